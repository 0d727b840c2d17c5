"""The progress lines of the trainers people run, as their releases print them (fixtures/trainers,
SOURCES.md says where each comes from), read by the default patterns: loss, step, total, lr."""

import gzip
import json
import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress, trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import job_log

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers")
DEFAULT = log_progress.compile_patterns(log_progress.DEFAULT_PATTERNS)


def raw(name):
    """The log's bytes; those with `\\r` (tqdm's redraws) are kept gzipped, as recorded."""
    path = os.path.join(FIXTURES, name)
    with (gzip.open(path + ".gz", "rb") if os.path.exists(path + ".gz") else open(path, "rb")) as handle:
        return handle.read()


def read(name):
    """The file's lines as the job watch reads a log: `\\r` ends a line too."""
    return job_log._text_lines(raw(name))


def records(name):
    found, warnings = log_progress.records(read(name), DEFAULT)
    assert warnings == {}
    return found


@pytest.mark.parametrize("release", ["4.57.3", "5.25.0"])
def test_the_hugging_face_trainer_gives_each_logged_step_its_loss_and_learning_rate(release, tmp_path):
    """What the Trainer recorded itself (trainer_state.json's log_history) is what the log gives:
    the step and total from tqdm's bar before each line, the loss and learning rate from the
    line (5.x quotes them, rounded to 4 digits)."""
    with open(os.path.join(FIXTURES, "hf_trainer_%s.trainer_state.json" % release)) as handle:
        history = [entry for entry in json.load(handle)["log_history"] if "loss" in entry]
    got = records("hf_trainer_%s.log" % release)
    assert [(r["step"], r["total_steps"]) for r in got] == [(entry["step"], 30) for entry in history]
    for record, entry in zip(got, history):
        assert record["loss"] == pytest.approx(entry["loss"], rel=5e-4)
        assert record["lr"] == pytest.approx(entry["learning_rate"], rel=5e-4)
    # the evaluation lines give the val_loss of their step; the summary (train_runtime) is no record
    assert len(got) == len(history) == 6
    with open(os.path.join(FIXTURES, "hf_trainer_%s.trainer_state.json" % release)) as handle:
        evaluations = [(e["step"], e["eval_loss"]) for e in json.load(handle)["log_history"] if "eval_loss" in e]
    assert [(r["step"], r["val_loss"]) for r in got if "val_loss" in r] == [
        (step, pytest.approx(value, rel=5e-4)) for step, value in evaluations]
    assert [step for step, _value in evaluations] == [15, 30]
    # the watch: the last record, its step from the bar drawn before it
    log = tmp_path / "job.out"
    log.write_bytes(raw("hf_trainer_%s.log" % release))
    last, _warnings = log_progress.last_record(str(log), DEFAULT)
    assert (last["step"], last["total_steps"]) == (30, 30) and last["loss"] == pytest.approx(history[-1]["loss"], rel=5e-4)


def test_megatron_lm_lines_give_iteration_total_lm_loss_and_learning_rate():
    assert records("megatron_lm_d98e8a6.log") == [
        dict(step=1, total_steps=5000, loss=10.43863, lr=6.976744e-08),
        dict(step=2, total_steps=5000, loss=10.44022, lr=1.395349e-07),
        dict(step=3, total_steps=5000, loss=10.44375, lr=2.093023e-07),
        # its validation line is no record of its own: its loss is the val_loss of its iteration
        dict(step=10, total_steps=5000, loss=9.947481, lr=6.976744e-07, val_loss=9.876543)]


def test_torchtitan_lines_in_colour_give_step_loss_and_tokens_per_second():
    # its validation line ("validate step: 10  loss: 9.1234") is the val_loss of its step
    assert records("torchtitan_0.3.0.log") == [dict(step=1, loss=12.25069, tokens_per_s=1234.0),
                                               dict(step=10, loss=9.87654, tokens_per_s=38123.0, val_loss=9.1234),
                                               dict(step=20, loss=8.12345, tokens_per_s=39001.0)]


def test_nanogpt_lines_give_the_iterations_and_the_evaluations_with_their_val_loss():
    assert records("nanogpt_3adf61e.log") == [
        dict(step=0, loss=10.9876, val_loss=10.9901), dict(step=0, loss=10.9914), dict(step=10, loss=6.5432),
        dict(step=20, loss=5.4321), dict(step=250, loss=3.1234, val_loss=3.2345), dict(step=250, loss=3.0987)]


def state_of(name, **changes):
    with open(os.path.join(FIXTURES, name + ".trainer_state.json")) as handle:
        text = handle.read()
    state = trainer_state.parse(text)
    state.update(changes)
    return state


def test_in_a_slurm_job_log_the_trainers_records_take_their_steps_from_its_trainer_state():
    """Under srun the bar's redraws reach the log after the records, one line without `\r`: no
    record has a bar right before it. Without the Trainer's trainer_state.json each is numbered by
    its place (never given the count of a bar of another record); with it, each gets the step the
    Trainer logged it at, and max_steps as the total. Its evaluations find their records either way."""
    with open(os.path.join(FIXTURES, "hf_trainer_5.25.0_slurm.trainer_state.json")) as handle:
        history = json.load(handle)["log_history"]
    got = records("hf_trainer_5.25.0_slurm.log")
    losses = [e["loss"] for e in history if "loss" in e]
    assert [r["step"] for r in got] == [1, 2, 3, 4, 5, 6] and not any("total_steps" in r for r in got)
    assert [r["loss"] for r in got] == [pytest.approx(loss, rel=5e-4) for loss in losses]
    evaluations = [e["eval_loss"] for e in history if "eval_loss" in e]
    assert [(r["step"], r["val_loss"]) for r in got if "val_loss" in r] == [
        (place, pytest.approx(value, rel=5e-4)) for place, value in zip((2, 4, 6), evaluations)]

    state = state_of("hf_trainer_5.25.0_slurm")
    placed, _warnings = log_progress.records(read("hf_trainer_5.25.0_slurm.log"), DEFAULT, state)
    assert [(r["step"], r["total_steps"]) for r in placed] == [(e["step"], 30) for e in history if "loss" in e]
    assert [(r["step"], r["val_loss"]) for r in placed if "val_loss" in r] == [
        (e["step"], pytest.approx(e["eval_loss"], rel=5e-4)) for e in history if "eval_loss" in e]
    # the state of an earlier checkpoint: the records after it count on by logging_steps
    early = state_of("hf_trainer_5.25.0_slurm", global_step=10, entries=state["entries"][:2],
                     epoch=state["entries"][1][1])
    again, _warnings = log_progress.records(read("hf_trainer_5.25.0_slurm.log"), DEFAULT, early)
    assert [r["step"] for r in again] == [5, 10, 15, 20, 25, 30]


@pytest.mark.parametrize("release", ["4.57.3", "5.25.0"])
def test_the_watch_takes_the_step_of_a_trainer_line_from_its_state_where_no_bar_precedes_it(release, tmp_path):
    """The last record of a log with the bars out (as Slurm delivers it) and the state of the
    checkpoint-10 it saved, as the watch reads it: step 30 of 30, 4 records after that checkpoint."""
    lines = [line for line in read("hf_trainer_%s.log" % release) if "it/s]" not in line and "s/it]" not in line]
    log = tmp_path / "job.out"
    log.write_text("\n".join(lines) + "\n")
    full = state_of("hf_trainer_%s" % release)
    early = dict(full, global_step=10, entries=full["entries"][:2], epoch=full["entries"][1][1])
    last, _warnings = log_progress.last_record(str(log), DEFAULT, early)
    assert (last["step"], last["total_steps"]) == (30, 30)
    assert last["loss"] == pytest.approx(full["entries"][-1][2], rel=5e-4)
    # without a state: a loss, no step
    last, _warnings = log_progress.last_record(str(log), DEFAULT)
    assert "step" not in last and last["loss"] == pytest.approx(full["entries"][-1][2], rel=5e-4)


def test_a_bar_counts_only_for_the_record_right_after_it():
    lines = [" 10%|#   | 5/50 [00:01<00:09]", "   ", "{'loss': '3.5', 'epoch': '0.1'}",
             " 12%|#   | 6/50 [00:01<00:09]", "[warning] something", "{'loss': '3.2', 'epoch': '0.2'}"]
    assert log_progress.records(lines, DEFAULT)[0] == [dict(step=1, loss=3.5, epoch=0.1), dict(step=2, loss=3.2, epoch=0.2)]
    assert log_progress.records(lines[:3], DEFAULT)[0] == [dict(step=5, total_steps=50, loss=3.5, epoch=0.1)]


def test_pytorch_lightning_writes_no_line_per_step_into_a_log_file():
    """What docs/own-script.md says of it: its Rich bar leaves only its last state in the file."""
    assert records("lightning_2.6.6.log") == []
    assert any("train_loss: 1.124" in line for line in read("lightning_2.6.6.log"))
