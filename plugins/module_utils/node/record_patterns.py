# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The log lines that are training records: the patterns of popular public trainers. The
controller's watch and collect step read records from them (module log_progress); the training
job's hang watch (llmtrain_node.hang) starts its clock at the first such line. It imports
nothing: it ships to the nodes in the llmtrain_node package."""

from __future__ import annotations

# The log lines of popular public trainers (tests/unit/fixtures/trainers, each with the release
# it comes from), tried in order; the first that matches wins:
#   step 250: train loss 3.1234, val loss 3.2345              (nanoGPT's evaluation)
#   iter 100: loss 2.3456, time 41.2ms                        (nanoGPT; a plain "iter N: loss X")
#   [date] iteration  10/ 5000 | ... | learning rate: 6.9E-07 | ... | lm loss: 9.9E+00 |   (Megatron-LM)
#   step: 10  loss:  9.87654  grad_norm: ...  tps: 38,123     (torchtitan, colours taken off)
#   step 100/2000 | loss 2.3456 | lr 3.0e-04                  (step N, with or without a total, then loss)
#   {'loss': 2.3456, 'learning_rate': 5e-05, 'epoch': 0.12}   (Hugging Face Trainer 4.x; 5.x quotes
#                                                              the values: {'loss': '2.346', ...})
# A record without a step (the Hugging Face Trainer's) takes it, and the total, from the progress
# bar tqdm drew on the line right before it ("| 250/1000 ["; PROGRESS_BAR, _Bars), else from the
# Trainer's trainer_state.json (module trainer_state, on the controller); a torchtitan "validate
# step" line is not a training record.
# Each takes time linear in the line's length, whatever the line:
# - a repeat is never followed by a piece that can match its characters, so giving one back fails
#   at once (`\s*[:=]?\s*` split a run of blanks between its two repeats in every way, quadratic
#   in the run's length; SEP has one repeat on each side of the ':');
# - no repeat holds a repeat;
# - a lazy gap before a word is bounded (.{0,80}?, Megatron's .{0,400}?), or is in a pattern
#   anchored at the line's start (^), which fails at once anywhere else. A start then costs its
#   gap's length times the word's, plus the blanks after each word its gap reaches, which only
#   the starts (`step N`) of the gap before that word read again.
NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|nan|inf"
# between a name and its value: blanks, at most one ':' or '=', blanks
SEP = r"\s*(?:[:=]\s*)?"
DEFAULT_PATTERNS = [
    r"^\s*step (?P<step>[0-9]+): train loss (?P<loss>%(number)s), val loss (?P<val_loss>%(number)s)" % dict(number=NUMBER),
    r"^\s*iter(?:ation)?\s+(?P<step>[0-9]+)\s*(?:[:|,]\s*)?loss%(sep)s(?P<loss>%(number)s)" % dict(sep=SEP, number=NUMBER),
    r"\biteration +(?P<step>[0-9]+)/ *(?P<total_steps>[0-9]+) \|(?:.{0,400}? learning rate: (?P<lr>%(number)s) \|)?"
    r".{0,400}? lm loss: (?P<loss>%(number)s) \|" % dict(number=NUMBER),
    r"(?<!validate )\bstep: *(?P<step>[0-9]+) +loss: *(?P<loss>%(number)s)(?:.{0,200}? tps: (?P<tokens_per_s>[0-9][0-9,]*))?"
    % dict(number=NUMBER),
    r"(?i)(?<!validate )\bstep%(sep)s(?P<step>[0-9]+)(?:\s*/\s*(?P<total_steps>[0-9]+))?\b.{0,80}?\bloss%(sep)s"
    r"(?P<loss>%(number)s)(?:.{0,80}?\blr%(sep)s(?P<lr>%(number)s))?" % dict(sep=SEP, number=NUMBER),
    r"^\s*\{'loss': '?(?P<loss>%(number)s)'?(?:.*?'learning_rate': '?(?P<lr>%(number)s)'?)?"
    r"(?:.*?'epoch': '?(?P<epoch>%(number)s)'?)?" % dict(number=NUMBER),
]
# The part of a log line the patterns see: a built-in pattern (linear in the line) the first
# MAX_LINE_CHARS; a pattern of your own, where no timer can stop a search that backtracks without
# end, the first UNTIMED_CHARS.
MAX_LINE_CHARS = 4096
UNTIMED_CHARS = 512
# terminal colours and cursor moves (torchtitan colours its lines; tqdm moves between its bars),
# taken off a line before the patterns see it
ESCAPES = r"\x1b\[[0-9;?]*[A-Za-z]"
