"""log_progress: your script's progress lines in its log, as metrics records."""

import math

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils import log_progress

DEFAULT = log_progress.compile_patterns(log_progress.DEFAULT_PATTERNS)


@pytest.mark.parametrize("line, record", [
    ("iter 100: loss 2.3456, time 41.20ms, mfu 1.2%", dict(step=100, loss=2.3456)),
    ("iter 0: loss 5.6800, time 1.75ms", dict(step=0, loss=5.68)),
    ("iteration 7 | loss 1e-3", dict(step=7, loss=0.001)),
    ("step 100/2000 | loss 2.3456 | lr 3.0e-04 | 51000 tok/s", dict(step=100, total_steps=2000, loss=2.3456, lr=3e-4)),
    ("Step: 12, loss: 3.25", dict(step=12, loss=3.25)),
    ("[rank0] step=5 train loss=4.0", dict(step=5, loss=4.0)),
    ("{'loss': 2.1034, 'grad_norm': 1.3, 'learning_rate': 4.9e-05, 'epoch': 0.12}", dict(loss=2.1034, lr=4.9e-05)),
    ("step 3 loss n/a", None),  # no number: no record
    ("loading checkpoint step_000100.pt", None),
    ("val loss 2.0 at iter 5", None),
])
def test_the_common_progress_lines_of_public_trainers(line, record):
    assert log_progress.match(line, DEFAULT) == record


def test_a_diverged_loss_is_shown_as_it_is():
    record = log_progress.match("iter 9: loss nan, time 3ms", DEFAULT)
    assert record["step"] == 9 and math.isnan(record["loss"])


def test_records_keep_the_logs_order_and_number_lines_without_a_step():
    lines = ["{'loss': 3.0, 'epoch': 0.1}", "noise", "{'loss': 2.5, 'epoch': 0.2}", "iter 40: loss 2.0"]
    assert log_progress.records(lines, DEFAULT) == [
        dict(step=1, loss=3.0), dict(step=2, loss=2.5), dict(step=40, loss=2.0)]


def test_your_own_pattern_comes_first_and_must_name_the_loss():
    mine = log_progress.compile_patterns([r"^E(?P<step>\d+) L=(?P<loss>\S+) T=(?P<tokens_per_s>\d+)"])
    assert log_progress.match("E3 L=0.5 T=900", mine) == dict(step=3, loss=0.5, tokens_per_s=900.0)
    with pytest.raises(ValueError, match=r"has no \(\?P<loss>\.\.\.\) group"):
        log_progress.compile_patterns([r"step (?P<step>\d+)"])
    with pytest.raises(ValueError, match="is not a regular expression"):
        log_progress.compile_patterns([r"step (\d+"])


def test_the_last_record_is_read_from_the_end_of_the_log(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("".join("iter %d: loss %.1f\n" % (i, 9 - i) for i in range(5)) + "saving checkpoint\n")
    assert log_progress.last_record(str(log), DEFAULT) == dict(step=4, loss=5.0)
    log.write_text("starting\n")
    assert log_progress.last_record(str(log), DEFAULT) is None
