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

The file holds every logged record of the run, and grows with it: it is read from its first and
last bytes only (the keys are sorted, the entries at the end of log_history are the latest), on
the cluster: by the watch each poll (TAIL_BYTES), by the collect step once (COLLECT_TAIL_BYTES,
the steps of the last tens of thousands of records exactly; the earlier ones by rules 2 and 3).
Its numbers are untrusted (node/untrusted.py): a step is an integer within 64 bits, an epoch a
finite number; a state that holds other values names no step."""

from __future__ import annotations

import bisect
import itertools
import math
import os
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

NAME = "trainer_state.json"
CHECKPOINT = re.compile(r"^checkpoint-([0-9]+)$")
HEAD_BYTES = 4096
TAIL_BYTES = 65536
# the collect step's read: about 20,000 entries of log_history as the Trainer writes them
COLLECT_TAIL_BYTES = 4 * 1048576
# a record's epoch range holds this many of the state's entries at most that are looked at
MAX_CANDIDATES = 64
_TOP_INT = re.compile(r'^ {2}"(global_step|max_steps|logging_steps)": ([0-9]{1,18}),?$', re.M)
_TOP_EPOCH = re.compile(r'^ {2}"epoch": ([-+0-9.eE]{1,32}),?$', re.M)
_ENTRY = re.compile(r"\{[^{}]*\}")
# an entry of log_history is a few hundred bytes
ENTRY_MAX_BYTES = 65536


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


def read_newest(checkpoint_dir, tries=3, tail_bytes=TAIL_BYTES):
    """(state, errors): the state of the newest checkpoint whose trainer_state.json reads (one
    being written, or removed by the Trainer's save_total_limit, is passed over for the one
    before it, up to tries of them; read: its first HEAD_BYTES and last tail_bytes), or None;
    errors: what could not be read."""
    errors = []
    for path in itertools.islice(_candidates(checkpoint_dir), tries):
        try:
            state = read(path, tail_bytes)
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
        value = untrusted.field(top.get(key), untrusted.COUNT)
        ints[key] = value if value else None
    epoch = untrusted.field(top.get("epoch"), untrusted.NUMBER)
    trained = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        typed = untrusted.fields(entry, dict(step=untrusted.COUNT, loss=untrusted.NUMBER, epoch=untrusted.NUMBER))
        if len(typed) == 3:
            trained.append((typed["step"], float(typed["epoch"]), float(typed["loss"])))
    if not ints["global_step"] and not trained:
        return None
    return dict(ints, epoch=float(epoch) if epoch is not None and epoch > 0 else None, entries=trained)


def parse(text):
    """The state of a whole trainer_state.json's text, or None (no JSON object the collection reads, no step)."""
    data = untrusted.record(text, len(text))
    if data is None:
        return None
    history = data.get("log_history")
    return _state(data, history if isinstance(history, list) else [])


def read(path, tail_bytes=TAIL_BYTES):
    """The state in the file at path, or None. Unless the file is small, only its first
    HEAD_BYTES and last tail_bytes are read: the top keys as json.dumps(indent=2, sort_keys=True)
    writes them, and the entries of log_history whole in the tail."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(0)
        if size <= HEAD_BYTES + tail_bytes:
            return parse(handle.read().decode("utf-8", "replace"))
        head = handle.read(HEAD_BYTES).decode("utf-8", "replace")
        handle.seek(size - tail_bytes)
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
            epoch = float(found.group(1))
        except ValueError:
            epoch = None
        if epoch is not None and math.isfinite(epoch):
            top["epoch"] = epoch
    end = tail.find('\n  "logging_steps"')
    entries = [untrusted.record(match.group(), ENTRY_MAX_BYTES) for match in _ENTRY.finditer(tail[:end] if end >= 0 else tail)]
    return _state(top, entries)


def compact(state):
    """A state as a module returns it (JSON: its entries as [step, epoch, loss] lists)."""
    return None if state is None else dict(state, entries=[list(entry) for entry in state["entries"]])


def from_result(value):
    """The state of a module's result (compact), or None when it is none: entries of three numbers,
    the rest as _state keeps them."""
    if not isinstance(value, dict) or not isinstance(value.get("entries"), list):
        return None
    entries = [dict(step=e[0], epoch=e[1], loss=e[2]) for e in value["entries"] if isinstance(e, list) and len(e) == 3]
    return _state(value, entries)


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
