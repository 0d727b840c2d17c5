# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' argument specs, read on the controller: the one place a variable's choices are listed
is its role's meta/argument_specs.yml, which ansible-doc, the roles' validation, the reference
pages (make docs), the input checks (inputs/) and the unknown-variable check (filter/variables.py)
all read."""

from __future__ import annotations

import functools
import glob
import os

try:
    import yaml
except ImportError:  # in a module's payload; the controller, where the input checks run, has it (ansible-core needs it)
    yaml = None

# The collection's root, three levels above this file: in a checkout and in the installed collection.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load(*path):
    """A YAML file of the collection (C parser where PyYAML has it)."""
    with open(os.path.join(ROOT, *path), encoding="utf-8") as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


@functools.lru_cache(maxsize=1)
def specs():
    """{role: {entry point: {variable: its spec}}} of every role's meta/argument_specs.yml."""
    found = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        role = os.path.basename(os.path.dirname(os.path.dirname(path)))
        entries = load(path).get("argument_specs") or {}
        found[role] = dict((entry, spec.get("options") or {}) for entry, spec in entries.items())
    return found


def role_of(name):
    """The role a variable belongs to: the longest role name its name starts with (nccl_env_, not nccl_)."""
    return max((role for role in specs() if name.startswith(role + "_")), key=len)


def choices(name):
    """The choices the spec of variable `name` lists, as a tuple."""
    return tuple(specs()[role_of(name)]["main"][name]["choices"])
