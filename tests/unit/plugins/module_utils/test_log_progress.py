"""log_progress: your script's progress lines in its log, as metrics records."""

import math
import signal
import threading

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress

DEFAULT = log_progress.compile_patterns(log_progress.DEFAULT_PATTERNS)


@pytest.mark.parametrize("line, record", [
    ("iter 100: loss 2.3456, time 41.20ms, mfu 1.2%", dict(step=100, loss=2.3456)),
    ("iter 0: loss 5.6800, time 1.75ms", dict(step=0, loss=5.68)),
    ("iteration 7 | loss 1e-3", dict(step=7, loss=0.001)),
    ("step 100/2000 | loss 2.3456 | lr 3.0e-04 | 51000 tok/s", dict(step=100, total_steps=2000, loss=2.3456, lr=3e-4)),
    ("Step: 12, loss: 3.25", dict(step=12, loss=3.25)),
    ("[rank0] step=5 train loss=4.0", dict(step=5, loss=4.0)),
    # without a step: its order among the records
    ("{'loss': 2.1034, 'grad_norm': 1.3, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
     dict(step=1, loss=2.1034, lr=4.9e-05, epoch=0.12)),
    ("step 3 loss n/a", None),  # no number: no record
    ("loading checkpoint step_000100.pt", None),
    ("val loss 2.0 at iter 5", None),
])
def test_the_common_progress_lines_of_public_trainers(line, record):
    assert log_progress.records([line], DEFAULT) == ([record] if record else [], {})


def test_a_diverged_loss_is_shown_as_it_is():
    [record], _warnings = log_progress.records(["iter 9: loss nan, time 3ms"], DEFAULT)
    assert record["step"] == 9 and math.isnan(record["loss"])


def test_records_keep_the_logs_order_and_number_lines_without_a_step():
    lines = ["{'loss': 3.0, 'epoch': 0.1}", "noise", "{'loss': 2.5, 'epoch': 0.2}", "iter 40: loss 2.0"]
    assert log_progress.records(lines, DEFAULT) == ([
        dict(step=1, loss=3.0, epoch=0.1), dict(step=2, loss=2.5, epoch=0.2), dict(step=40, loss=2.0)], {})


def test_your_own_pattern_comes_first_and_must_name_the_loss():
    mine = log_progress.compile_patterns([r"^E(?P<step>\d+) L=(?P<loss>\S+) T=(?P<tokens_per_s>\d+)"])
    assert log_progress.records(["E3 L=0.5 T=900"], mine) == ([dict(step=3, loss=0.5, tokens_per_s=900.0)], {})
    with pytest.raises(ValueError, match=r"has no \(\?P<loss>\.\.\.\) group"):
        log_progress.compile_patterns([r"step (?P<step>\d+)"])
    with pytest.raises(ValueError, match="is not a regular expression"):
        log_progress.compile_patterns([r"step (\d+"])


def test_the_last_record_is_read_from_the_end_of_the_log(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("".join("iter %d: loss %.1f\n" % (i, 9 - i) for i in range(5)) + "saving checkpoint\n")
    assert log_progress.last_record(str(log), DEFAULT) == (dict(step=4, loss=5.0), {})
    log.write_text("starting\n")
    assert log_progress.last_record(str(log), DEFAULT) == (None, {})


# Log lines of 4,096 characters on which the built-in patterns of 0.1.0 backtracked, from 0.4 s
# (`Step` and tabs) to 5 s (`step 1/2 loss` and blanks) each: `\s*[:=]?\s*` splits a run of
# blanks between its two repeats in every way.
SHAPES = [("Step", "\t"), ("step 1 loss", "\t"), ("step 1/2 loss", " "), ("iteration 12 | loss", " "),
          ("iter 1 loss", " "),
          # the trainers' patterns of later releases: Megatron-LM's gaps, torchtitan's, the Trainer's dict, tqdm's bar
          ("iteration 1/2 |", " learning rate: 1"), ("iteration 1/2 | learning rate: 1 |", " lm loss:"),
          ("step: 1  loss:", " tps:"), ("step: 1", "  "), ("{'loss': '", " 'learning_rate':"), ("| 1/2", " | 3/4"),
          ("validate step: 1", " loss:"), ("validation loss at iteration 1 |", " lm loss value:")]
ADVERSARIAL = [(head + fill * 4096)[:4096] for head, fill in SHAPES] * 40
# a progress line as long, that took them 1.2 s (the blanks after lr)
PROGRESS = ("step 7/9 loss 2.5 lr" + " " * 4096)[:4096]
# exponential in a run of digits without an x after it
CATASTROPHIC = r"(?P<loss>(\d+)+)x"


def overrun(pattern, where):
    return ("pretrain_progress_regex %r took more than 0.1 s of CPU on one log line (%s): it backtracks; progress "
            "from the log skips it. Rewrite it without nested or adjacent repeats such as (a+)+ or \\s*:?\\s*"
            % (pattern, where))


def test_the_built_in_patterns_take_linear_time_on_any_line(tmp_path):
    # a pattern that does overrun, on the last line: the CPU budget was there to trip
    compiled = log_progress.compile_patterns(log_progress.DEFAULT_PATTERNS + [CATASTROPHIC])
    assert log_progress.records(ADVERSARIAL + [PROGRESS, "1" * 28], compiled) == (
        [dict(step=7, total_steps=9, loss=2.5)], {CATASTROPHIC: overrun(CATASTROPHIC, "line %d" % (len(ADVERSARIAL) + 2))})
    log = tmp_path / "job.out"
    log.write_text("\n".join([PROGRESS] + ADVERSARIAL[:199]) + "\n")
    assert log_progress.last_record(str(log), DEFAULT) == (dict(step=7, total_steps=9, loss=2.5), {})


@pytest.fixture
def sentinel_timer():
    """A SIGVTALRM handler and ITIMER_VIRTUAL timer of someone else's, which must stay."""
    def handler(signum, frame):
        raise AssertionError("the sentinel timer fired")
    previous = signal.signal(signal.SIGVTALRM, handler)
    signal.setitimer(signal.ITIMER_VIRTUAL, 1000.0)
    yield handler
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    signal.signal(signal.SIGVTALRM, previous)


def test_a_pattern_that_backtracks_is_stopped_and_named_and_the_others_still_read(sentinel_timer, tmp_path):
    compiled = log_progress.compile_patterns([CATASTROPHIC] + log_progress.DEFAULT_PATTERNS)
    lines = ["12x", "1" * 28, "34x", "iter 4: loss 2.0", "1" * 28]
    # stopped on line 2 and not tried again: 34x is no record, iter 4 is the built-in pattern's
    assert log_progress.records(lines, compiled) == (
        [dict(step=1, loss=12.0), dict(step=4, loss=2.0)], {CATASTROPHIC: overrun(CATASTROPHIC, "line 2")})
    log = tmp_path / "job.out"
    log.write_text("iter 3: loss 2.5\n" + "1" * 28 + "\n")
    assert log_progress.last_record(str(log), compiled) == (
        dict(step=3, loss=2.5), {CATASTROPHIC: overrun(CATASTROPHIC, "line 1 from the end")})
    # the handler and the timer that were there before are back
    assert signal.getsignal(signal.SIGVTALRM) is sentinel_timer
    left, interval = signal.getitimer(signal.ITIMER_VIRTUAL)
    assert 990 < left < 1001 and interval == 0


def test_without_signals_a_pattern_of_yours_sees_the_start_of_each_line():
    # cubic in a run of digits: minutes on 4,096 of them, a fraction of a second on 512
    cubic = log_progress.compile_patterns([r"\d*\d*x(?P<loss>\d)"])
    lines = ["." * 600 + "x5", "1" * 4096]
    found = []
    thread = threading.Thread(target=lambda: found.append(log_progress.records(lines, cubic)))
    thread.start()
    thread.join()
    # past the first 512 characters, x5 is not seen
    assert found == [([], {})]
    # in the main thread the CPU budget stops the search instead, and the whole line is read
    assert log_progress.records(lines, cubic) == ([dict(step=1, loss=5.0)], {cubic[0].pattern: overrun(
        cubic[0].pattern, "line 2")})


def test_numbers_are_read_in_ascii_digits_whatever_else_a_pattern_matches():
    """A pattern of your own with \\d also matches Arabic-Indic, fullwidth and superscript digits, which
    int() and float() read as numbers (and '1_0' as 10): no step or loss is read from them."""
    mine = log_progress.compile_patterns([r"^E(?P<step>\d+) L=(?P<loss>\S+)"])
    assert log_progress.records(["E3 L=\u0660.5", "E3 L=1_0", "E3 L=\uff15", "E3 L=\u00b2"], mine) == ([], {})
    # a step of other digits is none: the record takes its place among the records, not step 42
    assert log_progress.records(["E\u0664\u0662 L=0.5", "E7 L=0.25"], mine) == (
        [dict(step=1, loss=0.5), dict(step=7, loss=0.25)], {})
    assert log_progress.records(["E%s L=0.5" % ("9" * 19)], mine) == ([dict(step=1, loss=0.5)], {})


def test_an_evaluation_line_or_a_progress_bar_in_other_digits_is_none():
    evaluated = "validation loss at iteration %s | lm loss value: 1.5 |"
    assert log_progress.records(["iter 42: loss 2.5", evaluated % "42"], DEFAULT) == (
        [dict(step=42, loss=2.5, val_loss=1.5)], {})
    assert log_progress.records(["iter 42: loss 2.5", evaluated % "\u0664\u0662"], DEFAULT) == (
        [dict(step=42, loss=2.5)], {})
    assert log_progress.records(["iter 42: loss 2.5", "validate step: \uff14\uff12 loss: 1.5"], DEFAULT) == (
        [dict(step=42, loss=2.5)], {})
    record = "{'loss': 2.0, 'epoch': 0.1}"
    assert log_progress.records([" 10%|#  | 10/100 [00:01<00:09, 9.5it/s]", record], DEFAULT) == (
        [dict(step=10, total_steps=100, loss=2.0, epoch=0.1)], {})
    assert log_progress.records([" 10%|#  | \uff11\uff10/\uff11\uff10\uff10 [00:01<00:09, 9.5it/s]", record], DEFAULT) == (
        [dict(step=1, loss=2.0, epoch=0.1)], {})
