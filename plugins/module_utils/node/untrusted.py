# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the run's files hold is untrusted: jobs write them, a training script of the user's
writes its records there, and a shared workspace may hold files others made. Everything the
collection reads from them goes through this module.

- JSON (loads): bounded in size and depth, numbers finite (unless asked) and integers within 64
  bits, so that no record can raise RecursionError, OverflowError or a ValueError nobody expects
  in the reader, nor hand a reader a value its code would recurse into without end; what fails is
  Unreadable, which the callers count and say.
- Fields (field, fields): each of the type it must have, or absent: a step of "5" is no step.
- Numbers in text (digits, whole, JOB_ID): ASCII digits only, whatever else Unicode calls a digit.
- Text for a terminal (printable): control characters (C0, C1, DEL) and bidirectional controls
  taken out, so that no escape sequence of a file reaches the user's terminal (OSC 52 writes the
  clipboard, OSC 8 draws a link that lies about where it leads, CSI clears the screen).

It imports nothing outside Python's standard library: it ships to the nodes in the llmtrain_node
package (the hang watch reads the metrics file with it), and the run report imports it too."""

from __future__ import annotations

import json
import math
import re
import sys

# no record of the collection, nor any trainer's, nests deeper (a metrics record is 2 or 3 deep)
MAX_DEPTH = 32
# JSON integers beyond 64 bits are no step, count or size
MAX_INT = 2 ** 63 - 1
# a Slurm job id as the run's files name it: JOBID, or ARRAYJOB_TASK. ASCII digits only, here and in
# every number read from Slurm or a file (digits, whole): \d and str.isdigit() also take Arabic-Indic,
# fullwidth and superscript digits, which int() reads as numbers (or fails on) and no Slurm command takes.
JOB_ID = re.compile(r"\A[0-9]{1,18}(?:_[0-9]{1,18})?\Z")
_DIGITS = re.compile(r"[0-9]+\Z")
# What a file of the run holds at most, for every reader of it; a larger one is none of them.
# A line of metrics.jsonl: the reference trainer's records are under 1 KB, a script of one's own
# may write more; a longer line is counted as unreadable, never cut into garbage.
METRICS_RECORD_MAX_BYTES = 1048576
# a done record (train.done.json, ...): a few hundred bytes
DONE_RECORD_MAX_BYTES = 65536
# a hang's summary (hangs/<job>-<start>/summary.json): its suspects and their first frames
HANG_SUMMARY_MAX_BYTES = 4 * 1048576


def digits(text):
    """Whether text is a string of one or more ASCII digits (0-9), and nothing else."""
    return isinstance(text, str) and _DIGITS.match(text) is not None


def whole(text, default=None):
    """The integer text writes in ASCII digits, no more than 18 of them (beyond 64 bits it is no count,
    id or time), else default."""
    return int(text) if digits(text) and len(text) <= 18 else default


class Unreadable(ValueError):
    """A text that is no JSON value the collection reads, and why."""


def _constant(name):
    """NaN, Infinity and -Infinity as json reads them: floats, which _check then judges."""
    return float(name)


def _int(text):
    """An integer of the text, refused past 64 bits before Python converts it (which takes time
    quadratic in its digits where the interpreter has no limit of its own on them)."""
    if len(text.lstrip("-")) > len(str(MAX_INT)):
        raise Unreadable(BIG_INT % text[:24])
    return int(text)


# Interpreters since the fix of CVE-2020-10735 (3.11, and 3.8.14, 3.9.14, 3.10.7) refuse to convert
# more than 4,300 digits themselves: json then builds every integer in C, and _check judges it.
PARSE_INT = None if hasattr(sys, "get_int_max_str_digits") else _int
BIG_INT = "it holds an integer beyond 64 bits (%s...)"


def _check(value, depth, nonfinite):
    """Raises Unreadable where a parsed value nests more than depth lists and objects, holds an
    integer beyond 64 bits, or (unless nonfinite) a float that is NaN or infinite. One walk, no
    recursion; what json builds in C is judged here rather than in a Python hook per number."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    _number(value, nonfinite)
    while stack:
        item, level = stack.pop()
        for child in (item.values() if isinstance(item, dict) else item):
            kind = type(child)
            if kind is str:
                continue
            if kind is dict or kind is list:
                if level >= depth:
                    raise Unreadable("it nests deeper than %d levels" % depth)
                stack.append((child, level + 1))
            else:
                _number(child, nonfinite)


def _number(value, nonfinite):
    kind = type(value)
    if kind is int and not -MAX_INT <= value <= MAX_INT:
        raise Unreadable(BIG_INT % str(value)[:24])
    if kind is float and not nonfinite and not math.isfinite(value):
        raise Unreadable("it holds %r (NaN, an infinity or a number beyond a float), which is no number" % value)


def loads(data, max_bytes, depth=MAX_DEPTH, nonfinite=False):
    """The JSON value of data (bytes or str) -> the value; raises Unreadable with why when data is
    longer than max_bytes, not UTF-8, nests deeper than depth, holds NaN, an infinity or a number
    beyond a float (unless nonfinite: a diverged run's loss is NaN, and says so) or an integer
    beyond 64 bits, or is no JSON."""
    if len(data) > max_bytes:
        raise Unreadable("it is longer than %d bytes" % max_bytes)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise Unreadable("it is not UTF-8 text") from None
    try:
        value = json.loads(data, parse_constant=_constant, parse_int=PARSE_INT)
    except RecursionError:  # json's parser stops itself at the interpreter's recursion limit
        raise Unreadable("it nests deeper than %d levels" % depth) from None
    except Unreadable:
        raise
    except ValueError as err:
        if "integer string conversion" in str(err):  # the interpreter's limit of 4,300 digits
            raise Unreadable(BIG_INT % "") from None
        raise Unreadable("it is no JSON (%s)" % str(err)[:80]) from None
    _check(value, depth, nonfinite)
    return value


def read(path, max_bytes, depth=MAX_DEPTH, nonfinite=False):
    """The JSON value of the file at path (no more than max_bytes read) -> value; raises OSError
    (FileNotFoundError where it is missing) or Unreadable."""
    with open(path, "rb") as handle:
        return loads(handle.read(max_bytes + 1), max_bytes, depth, nonfinite)


def record(data, max_bytes, depth=MAX_DEPTH, nonfinite=False):
    """The JSON object of data, or None (no object, or Unreadable)."""
    try:
        value = loads(data, max_bytes, depth, nonfinite)
    except Unreadable:
        return None
    return value if isinstance(value, dict) else None


# The types a field may have (field, fields).
INT = "int"          # an integer (not a bool)
COUNT = "count"      # an integer, 0 or more
NUMBER = "number"    # an integer or a finite float
REAL = "real"        # an integer or any float: a loss may be NaN or infinite, and is shown so
TEXT = "text"        # a string
JOB = "job"          # a Slurm job id (JOB_ID), as a string; an integer is taken as its text
LIST = "list"


def field(value, kind):
    """value when it has the type kind says, else None."""
    if isinstance(value, bool):
        return None
    if kind == INT:
        return value if isinstance(value, int) else None
    if kind == COUNT:
        return value if isinstance(value, int) and value >= 0 else None
    if kind == NUMBER:
        return value if isinstance(value, int) or isinstance(value, float) and math.isfinite(value) else None
    if kind == REAL:
        return value if isinstance(value, (int, float)) else None
    if kind == TEXT:
        return value if isinstance(value, str) else None
    if kind == JOB:
        text = str(value) if isinstance(value, int) else value
        return text if isinstance(text, str) and JOB_ID.match(text) else None
    if kind == LIST:
        return value if isinstance(value, list) else None
    raise ValueError("no field type %r" % kind)


def fields(source, kinds):
    """{name: value} of source's fields that kinds ({name: kind}) names and that have their type;
    the others absent."""
    found = {}
    for name, kind in kinds.items():
        value = field(source.get(name), kind)
        if value is not None:
            found[name] = value
    return found


# Control characters: C0 but tab and the line breaks, DEL, C1; the bidirectional controls (which
# reorder what a terminal shows: "Trojan Source"); and line breaks, kept only in text of several lines.
_CONTROLS = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_BREAKS = "\n\r\u2028\u2029\x85"
_ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves, clearing the screen
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: a title, the clipboard (52), a link (8)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"           # DCS, SOS, PM, APC: strings up to their terminator
    r"|\x1b[ -/]*[0-~]?")                      # any other escape (charset, keypad, ...), or a lone ESC
_INTRODUCERS = ("\x1b", "\x9b", "\x9d")
_ONE_LINE = re.compile("[%s%s]" % (_CONTROLS, _BREAKS))
_LINES = re.compile("[%s]" % _CONTROLS)
_LINE_BREAKS = re.compile("\r\n|[\u2028\u2029\x85]")


def printable(text, lines=False):
    """text made safe to show on a terminal: each escape sequence taken out whole (a coloured log
    line reads as its words), then every other control character; a tab stays. A line break
    stays where lines (the text is meant to have several: a log's tail, a traceback), else it
    becomes a blank, as a lone carriage return always does (it would let a line overwrite another)."""
    text = str(text)
    if any(c in text for c in _INTRODUCERS):
        text = _ESCAPE_SEQUENCE.sub("", text)
    text = _LINE_BREAKS.sub("\n", text)
    if lines:
        return _LINES.sub("", text.replace("\r", " "))
    return _ONE_LINE.sub(lambda m: " " if m.group() in _BREAKS else "", text)
