# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Progress read from a training job's log, for a script that writes no metrics file: each
line that one of the patterns (pretrain_progress_regex) matches is a metrics record, from the
pattern's named groups (step, loss, and optionally total_steps, val_loss, lr, tokens_per_s)."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.job_log import MAX_LINE_CHARS, tail_lines

# The log lines of popular public trainers, tried in order, the first that matches wins:
#   iter 100: loss 2.3456, time 41.2ms           (a plain "iter N: loss X")
#   step 100/2000 | loss 2.3456 | lr 3.0e-04     (step N, with or without a total, then loss)
#   {'loss': 2.3456, 'learning_rate': 5e-05, 'epoch': 0.12}   (Hugging Face Trainer)
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
DEFAULT_PATTERNS = [
    r"^\s*iter(?:ation)?\s+(?P<step>\d+)\s*[:|,]?\s*loss\s*[:=]?\s*(?P<loss>%s)" % NUMBER,
    r"(?i)\bstep\s*[:=]?\s*(?P<step>\d+)(?:\s*/\s*(?P<total_steps>\d+))?\b.{0,80}?\bloss\s*[:=]?\s*(?P<loss>%s)"
    r"(?:.{0,80}?\blr\s*[:=]?\s*(?P<lr>%s))?" % (NUMBER, NUMBER),
    r"^\s*\{'loss': (?P<loss>%s)(?:.*?'learning_rate': (?P<lr>%s))?" % (NUMBER, NUMBER),
]
INTEGERS = ("step", "total_steps")
NUMBERS = ("loss", "val_loss", "lr", "tokens_per_s")
# what a log holds between polls is read from its end, at most this many lines
TAIL_LINES = 200


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


def match(line, compiled):
    """The record of one log line ({step, loss, ...} from the first pattern that matches and
    names a loss that is a number), or None."""
    for regex in compiled:
        found = regex.search(line[:MAX_LINE_CHARS])
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
    """The records of log lines, in order. A line without a step (a Hugging Face Trainer's
    dict) gets its order among the records as its step."""
    out = []
    for line in lines:
        record = match(line, compiled)
        if record is not None:
            record.setdefault("step", len(out) + 1)
            out.append(record)
    return out


def last_record(path, compiled):
    """The record of the last matching line among the last TAIL_LINES of a log, or None."""
    for line in reversed(tail_lines(path, TAIL_LINES)):
        record = match(line, compiled)
        if record is not None:
            return record
    return None
