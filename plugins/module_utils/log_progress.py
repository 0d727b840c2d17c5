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

from ansible_collections.llmtrain.slurm.plugins.module_utils.job_log import MAX_LINE_CHARS, tail_lines

# The log lines of popular public trainers, tried in order, the first that matches wins:
#   iter 100: loss 2.3456, time 41.2ms           (a plain "iter N: loss X")
#   step 100/2000 | loss 2.3456 | lr 3.0e-04     (step N, with or without a total, then loss)
#   {'loss': 2.3456, 'learning_rate': 5e-05, 'epoch': 0.12}   (Hugging Face Trainer)
# Each takes time linear in the line's length, whatever the line:
# - a repeat is never followed by a piece that can match its characters, so giving one back fails
#   at once (`\s*[:=]?\s*` split a run of blanks between its two repeats in every way, quadratic
#   in the run's length; SEP has one repeat on each side of the ':');
# - no repeat holds a repeat;
# - a lazy gap before a word is bounded (.{0,80}?), or is in a pattern anchored at the line's
#   start (^), which fails at once anywhere else. A start then costs its gap's length times the
#   word's, plus the blanks after each word its gap reaches, which only the starts (`step N`)
#   of the 80 characters before that word read again.
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
# between a name and its value: blanks, at most one ':' or '=', blanks
SEP = r"\s*(?:[:=]\s*)?"
DEFAULT_PATTERNS = [
    r"^\s*iter(?:ation)?\s+(?P<step>\d+)\s*(?:[:|,]\s*)?loss%(sep)s(?P<loss>%(number)s)" % dict(sep=SEP, number=NUMBER),
    r"(?i)\bstep%(sep)s(?P<step>\d+)(?:\s*/\s*(?P<total_steps>\d+))?\b.{0,80}?\bloss%(sep)s(?P<loss>%(number)s)"
    r"(?:.{0,80}?\blr%(sep)s(?P<lr>%(number)s))?" % dict(sep=SEP, number=NUMBER),
    r"^\s*\{'loss': (?P<loss>%(number)s)(?:.*?'learning_rate': (?P<lr>%(number)s))?" % dict(number=NUMBER),
]
INTEGERS = ("step", "total_steps")
NUMBERS = ("loss", "val_loss", "lr", "tokens_per_s")
# what a log holds between polls is read from its end, at most this many lines
TAIL_LINES = 200
# A pattern of your own may backtrack without end ((a+)+b is exponential in a run of a's): a
# search of one line gets this much CPU time (up to twice), then that pattern is not tried on
# the lines after it.
PATTERN_CPU_S = 0.1
# where no signal can stop a search, a pattern of your own sees the start of each line only
UNTIMED_CHARS = 512
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
    try:
        return int(text) if name in INTEGERS else float(text)
    except (TypeError, ValueError):
        return None


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
        names a loss that is a number), or None. number: the line's, for a warning."""
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


def records(lines, compiled):
    """(records, warnings): the records of log lines, in order, and a message for each pattern
    that backtracked past its CPU time on a line (_Matcher). A line without a step (a Hugging
    Face Trainer's dict) gets its order among the records as its step."""
    out = []
    with _Matcher(compiled, "line %d").timed() as matcher:
        for number, line in enumerate(lines, 1):
            record = matcher.record(line, number)
            if record is not None:
                record.setdefault("step", len(out) + 1)
                out.append(record)
    return out, matcher.warnings


def last_record(path, compiled):
    """(record, warnings): the record of the last matching line among the last TAIL_LINES of a
    log, or None, and the warnings of records()."""
    lines = tail_lines(path, TAIL_LINES)
    with _Matcher(compiled, "line %d from the end").timed() as matcher:
        for number, line in enumerate(reversed(lines), 1):
            record = matcher.record(line, number)
            if record is not None:
                return record, matcher.warnings
    return None, matcher.warnings
