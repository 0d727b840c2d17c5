# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Hugging Face Trainer's own record of its steps: the trainer_state.json it saves in each
checkpoint-N/. Its log lines ({'loss': ..., 'epoch': ...}) print no step, and in a Slurm job's
log no progress bar stands before them; the state's log_history holds each logged record with
its step, its logging_steps the interval between records and max_steps the total.

A record of the log takes its step (steps_of):
1. from the state's entry it is (its loss and epoch equal to the entry's, to the digits the
   line prints): every record up to the checkpoint the state was saved with;
2. else, from the record before it plus logging_steps (the records after that checkpoint), as
   long as the record's epoch agrees (epoch = step / steps per epoch, known from the state);
3. else (the first records of a start that resumed from a checkpoint newer than none of the
   state's entries) from its epoch: the multiple of logging_steps nearest epoch x steps per epoch.
Records before the first one placed count back from it by logging_steps.

The file holds every logged record of the run: the watch reads its first and last bytes only
(the keys are sorted, the entries at the end of log_history are the latest), the collect step
the whole file once."""

from __future__ import annotations

import bisect
import itertools
import json
import os
import re

NAME = "trainer_state.json"
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
HEAD_BYTES = 4096
TAIL_BYTES = 65536
# a record's epoch range holds this many of the state's entries at most that are looked at
MAX_CANDIDATES = 64
_TOP_INT = re.compile(r'^ {2}"(global_step|max_steps|logging_steps)": (\d+),?$', re.M)
_TOP_EPOCH = re.compile(r'^ {2}"epoch": ([-+0-9.eE]+),?$', re.M)
_ENTRY = re.compile(r"\{[^{}]*\}")


def _candidates(checkpoint_dir):
    """The trainer_state.json files (plain files) of the checkpoint-N/ directories, highest N first."""
    try:
        names = os.listdir(checkpoint_dir)
    except (OSError, TypeError):
        return
    numbered = sorted(((int(m.group(1)), name) for name in names for m in [CHECKPOINT.match(name)] if m),
                      reverse=True)
    for _number, name in numbered:
        path = os.path.join(checkpoint_dir, name, NAME)
        if os.path.isfile(path):
            yield path


def read_newest(checkpoint_dir, tries=3):
    """(state, errors): the state of the newest checkpoint whose trainer_state.json reads (one
    being written, or removed by the Trainer's save_total_limit, is passed over for the one
    before it, up to tries of them), or None; errors: what could not be read."""
    errors = []
    for path in itertools.islice(_candidates(checkpoint_dir), tries):
        try:
            state = read(path)
        except (IOError, OSError) as err:
            errors.append("cannot read %s: %s" % (path, err))
            continue
        if state is not None:
            return state, errors
    return None, errors


def _state(top, entries):
    """{global_step, max_steps, logging_steps, epoch, entries: [(step, epoch, loss)] of the
    training records, in order}; None when it names no step."""
    ints = {}
    for key in ("global_step", "max_steps", "logging_steps"):
        value = top.get(key)
        ints[key] = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    epoch = top.get("epoch")
    trained = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        step, loss, at = entry.get("step"), entry.get("loss"), entry.get("epoch")
        if isinstance(step, int) and isinstance(loss, (int, float)) and isinstance(at, (int, float)):
            trained.append((step, float(at), float(loss)))
    if not ints["global_step"] and not trained:
        return None
    return dict(ints, epoch=float(epoch) if isinstance(epoch, (int, float)) and epoch > 0 else None,
                entries=trained)


def parse(text):
    """The state of a whole trainer_state.json's text, or None (no JSON object, no step)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    history = data.get("log_history")
    return _state(data, history if isinstance(history, list) else [])


def read(path, whole=False):
    """The state in the file at path, or None. Unless whole (or the file is small), only its
    first HEAD_BYTES and last TAIL_BYTES are read: the top keys as json.dumps(indent=2,
    sort_keys=True) writes them, and the entries of log_history whole in the tail."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(0)
        if whole or size <= HEAD_BYTES + TAIL_BYTES:
            return parse(handle.read().decode("utf-8", "replace"))
        head = handle.read(HEAD_BYTES).decode("utf-8", "replace")
        handle.seek(size - TAIL_BYTES)
        tail = handle.read().decode("utf-8", "replace")
    if not tail.rstrip().endswith("}"):
        return None  # being written
    top = {}
    for text in (head, tail):
        for key, value in _TOP_INT.findall(text):
            top.setdefault(key, int(value))
    found = _TOP_EPOCH.search(head)
    if found:
        try:
            top["epoch"] = float(found.group(1))
        except ValueError:
            pass
    end = tail.find('\n  "logging_steps"')
    entries = []
    for match in _ENTRY.finditer(tail[:end] if end >= 0 else tail):
        try:
            entries.append(json.loads(match.group()))
        except ValueError:
            continue
    return _state(top, entries)


def _tolerance(value):
    """Half a unit of the last digit a printed number has (repr gives back the digits the line
    printed, less trailing zeros): 5.471 -> 0.0005, 0.01 -> 0.005."""
    text = repr(float(value)).lower()
    mantissa, _e, exponent = text.partition("e")
    digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
    if mantissa.endswith(".0"):
        digits = 0
    return 0.5 * 10 ** (int(exponent or 0) - digits) * 1.001


def _fits(record, epoch, loss):
    return (abs(record["loss"] - loss) <= _tolerance(record["loss"])
            and abs(record["epoch"] - epoch) <= _tolerance(record["epoch"]))


class _Index:
    def __init__(self, state):
        self.every = state["logging_steps"]
        self.by_step = {step: (epoch, loss) for step, epoch, loss in state["entries"]}
        ordered = sorted((epoch, step) for step, epoch, _loss in state["entries"])
        self.epochs = [epoch for epoch, _step in ordered]
        self.steps = [step for _epoch, step in ordered]
        self.per_epoch = (state["global_step"] / state["epoch"]
                          if state["global_step"] and state["epoch"] else None)

    def match(self, record, expected):
        """The step of the state's entry the record is (the nearest to expected of several)."""
        if expected in self.by_step and _fits(record, *self.by_step[expected]):
            return expected
        tolerance = _tolerance(record["epoch"])
        low = bisect.bisect_left(self.epochs, record["epoch"] - tolerance)
        high = min(bisect.bisect_right(self.epochs, record["epoch"] + tolerance), low + MAX_CANDIDATES)
        found = [s for s in self.steps[low:high] if _fits(record, *self.by_step[s])]
        if not found:
            return None
        return min(found, key=lambda s: (abs(s - expected) if expected is not None else s, s))

    def agrees(self, record, step):
        """Whether a step fits the record's epoch (true where either is not known)."""
        if self.per_epoch is None or "epoch" not in record:
            return True
        return abs(step / self.per_epoch - record["epoch"]) <= _tolerance(record["epoch"]) + 0.5 / self.per_epoch

    def from_epoch(self, record):
        if self.per_epoch is None or "epoch" not in record:
            return None
        every = self.every or 1
        return max(every, int(round(record["epoch"] * self.per_epoch / every)) * every)


def steps_of(records, state):
    """Gives the records (in log order, none with a step) their steps and the total from the
    state, as the module docstring says; the number of records placed."""
    if not records or not state:
        return 0
    index, every = _Index(state), state["logging_steps"]
    steps, previous = [], None
    for record in records:
        expected = previous + every if previous is not None and every else None
        step = index.match(record, expected) if "epoch" in record else None
        if step is None and expected is not None and index.agrees(record, expected):
            step = expected
        if step is None:
            step = index.from_epoch(record)
        steps.append(step)
        previous = step if step is not None else previous
    first = next((i for i, s in enumerate(steps) if s is not None), None)
    if first is None:
        return 0
    for i in range(first - 1, -1, -1):
        steps[i] = steps[i + 1] - every if every and steps[i + 1] - every > 0 else None
    placed = 0
    for record, step in zip(records, steps):
        if step is not None:
            record["step"] = step
            placed += 1
            if state["max_steps"]:
                record["total_steps"] = state["max_steps"]
    return placed
