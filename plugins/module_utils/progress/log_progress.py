# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress read from a training job's log, for a script that writes no metrics file: each
line that one of the patterns (pretrain_progress_regex) matches is a metrics record, from the
pattern's named groups (step, loss, and optionally total_steps, val_loss, lr, tokens_per_s)."""

from __future__ import annotations

import contextlib
import re
import signal
import threading

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.job_log import MAX_LINE_CHARS, tail_lines
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.record_patterns import DEFAULT_PATTERNS, ESCAPES, NUMBER, UNTIMED_CHARS

# The patterns of popular public trainers' log lines (NUMBER, SEP, DEFAULT_PATTERNS) live in
# node/record_patterns.py: the training job's hang watch uses them too.
# The trainers' evaluation lines: no record of their own, their val_loss goes to the record of
# their step (the Trainer's, which print none: to the record before them), in a log of the whole run.
# Steps here and in tqdm's bar are ASCII digits, 18 at most (a count, as untrusted.whole reads one).
VAL_PATTERNS = [re.compile(p % dict(number=NUMBER)) for p in (
    r"^\s*\{'eval_loss': '?(?P<val_loss>%(number)s)'?",  # Hugging Face Trainer
    r"\bvalidation loss at iteration (?P<step>[0-9]{1,18}) \| lm loss value: (?P<val_loss>%(number)s) \|",  # Megatron-LM
    r"\bvalidate step: *(?P<step>[0-9]{1,18}) +loss: *(?P<val_loss>%(number)s)",  # torchtitan
)]
# tqdm's bar, "{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]": the step a Hugging Face
# Trainer's log line does not print
PROGRESS_BAR = re.compile(r"\| *(?P<n>[0-9]{1,18})/(?P<total>[0-9]{1,18}) \[")
_ESCAPES = re.compile(ESCAPES)
INTEGERS = ("step", "total_steps")
NUMBERS = ("loss", "val_loss", "lr", "tokens_per_s", "epoch")
# what a log holds between polls is read from its end, at most this many lines
TAIL_LINES = 200
# A pattern of your own may backtrack without end ((a+)+b is exponential in a run of a's): a
# search of one line gets this much CPU time (up to twice), then that pattern is not tried on
# the lines after it.
PATTERN_CPU_S = 0.1
# where no signal can stop a search, a pattern of your own sees the start of each line only
OVERRUN = ("pretrain_progress_regex %r took more than %s s of CPU on one log line (%s): it backtracks; progress "
           "from the log skips it. Rewrite it without nested or adjacent repeats such as (a+)+ or \\s*:?\\s*")


def compile_patterns(patterns):
    """[regex text] -> [compiled]; ValueError naming the pattern that does not compile or
    has no (?P<loss>...) group."""
    compiled = []
    for pattern in patterns:
        try:
            regex = re.compile(pattern)
        except (re.error, TypeError) as err:
            raise ValueError("pretrain_progress_regex: %r is not a regular expression: %s" % (pattern, err))
        if "loss" not in regex.groupindex:
            raise ValueError("pretrain_progress_regex: %r has no (?P<loss>...) group: name the loss (and the step, "
                             "(?P<step>...)) in it" % (pattern,))
        compiled.append(regex)
    return compiled


def _value(name, text):
    """The number a group holds, or None. ASCII digits only: a pattern of your own with \\d also
    matches other scripts' digits, which int() and float() read as numbers (and '1_0' as 10)."""
    if name in INTEGERS:
        return untrusted.whole(text.strip())
    if not text.isascii() or "_" in text:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def plain(line):
    """The line without terminal escapes (ESCAPES)."""
    return _ESCAPES.sub("", line) if "\x1b" in line else line


class _Overrun(Exception):
    """A search stopped by the CPU timer."""


class _Matcher(object):
    """The records of lines, one after another, each search bounded in CPU time. While timed(),
    a periodic ITIMER_VIRTUAL (CPU time; Ansible's task timeout has SIGALRM) ticks every
    PATTERN_CPU_S, one timer for all the lines rather than two system calls a search, and a
    search that was running at the last tick already is stopped (CPython's re engine checks for
    signals): after one to two PATTERN_CPU_S. Its pattern is not tried on the lines after, and
    warnings ({pattern: message}) says so. Signals need the main thread and setitimer: elsewhere
    a pattern of your own sees the first UNTIMED_CHARS of a line only, which bounds backtracking
    polynomial in the line's length (\\s*\\s*x) but not exponential ((a+)+x)."""

    def __init__(self, compiled, where):
        self.compiled, self.where, self.warnings = compiled, where, {}
        self._skipped = set()
        self._searches, self._running, self._at_tick = 0, None, None
        self._ticks = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
        self._chars = [MAX_LINE_CHARS if self._ticks or regex.pattern in DEFAULT_PATTERNS else UNTIMED_CHARS
                       for regex in compiled]

    @contextlib.contextmanager
    def timed(self):
        """The searches of the block bounded; the previous SIGVTALRM handler and timer are
        put back after it."""
        if not self._ticks:
            yield self
            return
        previous, timer = signal.signal(signal.SIGVTALRM, self._tick), (0, 0)
        try:
            timer = signal.setitimer(signal.ITIMER_VIRTUAL, PATTERN_CPU_S, PATTERN_CPU_S)
            yield self
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            # None: a handler set outside Python, which cannot be put back (ignored, not left to end the process)
            signal.signal(signal.SIGVTALRM, signal.SIG_IGN if previous is None else previous)
            signal.setitimer(signal.ITIMER_VIRTUAL, *timer)

    def _tick(self, signum, frame):
        """SIGVTALRM: stops the search that was running at the last tick already."""
        if self._running is not None and self._running == self._at_tick:
            self._running = None
            raise _Overrun()
        self._at_tick = self._running

    def _search(self, regex, line):
        self._searches += 1
        self._running = self._searches
        found = regex.search(line)
        self._running = None
        return found

    def record(self, line, number):
        """The record of one line ({step, loss, ...} from the first pattern that matches and
        names a loss that is a number), or None. number: the line's, for a warning. Terminal
        escapes (colours, cursor moves) are taken off first."""
        line = plain(line)
        for index, regex in enumerate(self.compiled):
            if index in self._skipped:
                continue
            try:
                found = self._search(regex, line[:self._chars[index]])
            except _Overrun:
                self._skipped.add(index)
                self.warnings[regex.pattern] = OVERRUN % (regex.pattern, PATTERN_CPU_S, self.where % number)
                continue
            if not found:
                continue
            record = {}
            for name, text in found.groupdict().items():
                if name in INTEGERS + NUMBERS and text is not None:
                    value = _value(name, text)
                    if value is not None:
                        record[name] = value
            if "loss" in record:
                return record
        return None


class _Bars(object):
    """The progress bar tqdm drew on the line right before a record (blank lines aside): the step
    (and total) of a record that prints none, the Hugging Face Trainer's. That is so where its
    output reaches the log as it is written, tqdm's `\r`-ended redraws in order with the lines.
    Slurm's job steps deliver each stream a line at a time and take the `\r` out: the bar's
    redraws come as one line, after the records they belong to. There a record has no bar right
    before it, and its step is its place among the records."""

    def __init__(self):
        self.fresh = None

    def see(self, line):
        found = PROGRESS_BAR.search(line) if "/" in line else None
        if found:
            self.fresh = (int(found.group("n")), int(found.group("total")))
        elif line.strip():
            self.fresh = None

    def fill(self, record):
        """Gives record the step (and total) of the bar right before it: True, or False (none)."""
        drawn, self.fresh = self.fresh, None
        if drawn is None:
            return False
        record["step"] = drawn[0]
        record.setdefault("total_steps", drawn[1])
        return True


def evaluation(line):
    """(step or None, val_loss) of a trainer's evaluation line (VAL_PATTERNS), or None."""
    if "loss" not in line:
        return None
    line = plain(line)
    for pattern in VAL_PATTERNS:
        found = pattern.search(line)
        if found:
            value = _value("val_loss", found.group("val_loss"))
            step = found.groupdict().get("step")
            return (None if step is None else int(step), value) if value is not None else None
    return None


def records(lines, compiled, state=None):
    """(records, warnings): the records of log lines, in order, and a message for each pattern
    that backtracked past its CPU time on a line (_Matcher). Records that print no step (the
    Hugging Face Trainer's dicts) take those of the progress bars right before them (_Bars)
    when every one of them has one and they rise; else those the Trainer's own state gives them
    (state: trainer_state.read(), trainer_state.steps_of); else each takes its place among the
    records. A trainer's evaluation line (VAL_PATTERNS) gives its val_loss to the record of its
    step (one without a step: to the record before it)."""
    out, stepless, barred = [], [], True
    bars = _Bars()
    with _Matcher(compiled, "line %d").timed() as matcher:
        for number, line in enumerate(lines, 1):
            record = matcher.record(line, number)
            if record is None:
                evaluated = evaluation(line)
                if evaluated and out and evaluated[0] in (None, out[-1].get("step")):
                    out[-1].setdefault("val_loss", evaluated[1])
                bars.see(line)
                continue
            if "step" not in record:
                barred = bars.fill(record) and barred
                stepless.append(len(out))
            bars.fresh = None
            out.append(record)
    steps = [out[i]["step"] for i in stepless if "step" in out[i]]
    if stepless and not (barred and all(a < b for a, b in zip(steps, steps[1:]))):
        unplaced = [out[i] for i in stepless]
        for record in unplaced:
            record.pop("step", None)
            record.pop("total_steps", None)
        if trainer_state.steps_of(unplaced, state) < len(unplaced):
            for i in stepless:
                out[i]["step"] = i + 1
                out[i].pop("total_steps", None)
    return out, matcher.warnings


def last_record(path, compiled, state=None):
    """(record, warnings): the record of the last matching line among the last TAIL_LINES of a
    log, or None, and the warnings of records(). A record without a step takes that of the
    progress bar right before it (_Bars), if there is one, else the one the Trainer's own state
    gives it among the stepless records of those lines (trainer_state.steps_of)."""
    lines = tail_lines(path, TAIL_LINES)
    with _Matcher(compiled, "line %d from the end").timed() as matcher:
        for number, line in enumerate(reversed(lines), 1):
            record = matcher.record(line, number)
            if record is not None:
                if "step" not in record:
                    bars = _Bars()
                    for before in reversed(lines[:len(lines) - number]):
                        if before.strip():
                            bars.see(before)
                            break
                    if not bars.fill(record) and state:
                        stepless = [r for r in (matcher.record(before, len(lines) - i)
                                                for i, before in enumerate(lines[:len(lines) - number]))
                                    if r is not None and "step" not in r] + [record]
                        if trainer_state.steps_of(stepless, state) < len(stepless):
                            record.pop("step", None)
                            record.pop("total_steps", None)
                return record, matcher.warnings
    return None, matcher.warnings
