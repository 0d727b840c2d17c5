# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the stages' input checks share: reading a whole number, a count with its minimum, a
one-line string, a list of them."""

from __future__ import annotations

import re


def int_or_none(value):
    """value as an int when it is one (or a string of digits), else None; bools are not ints."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^-?[0-9]+$", value.strip()):
        return int(value)
    return None


def count(errors, values, name, minimum, fix):
    """values[name] as a whole number >= minimum, else None with a message in errors (or None unset)."""
    if name not in values:
        return None
    found = int_or_none(values[name])
    if found is None or found < minimum:
        errors.append("%s=%r must be a whole number >= %d: %s." % (name, values[name], minimum, fix))
        return None
    return found


def one_line(value):
    """A non-empty string of one line."""
    return isinstance(value, str) and value.strip() != "" and "\n" not in value and "\0" not in value


def strings(values, name, example):
    """values[name] as a list of one-line strings, or an error message."""
    value = values[name]
    if isinstance(value, list) and all(one_line(v) for v in value):
        return None
    return "%s=%r must be a list of one-line strings, such as %s." % (name, value, example)


def number(value):
    """value as a float, else None; bools are not numbers."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
