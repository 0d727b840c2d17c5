"""A Hugging Face Trainer's trainer_state.json gives its log lines, which print none, their steps:
read whole (the collect step) or by its ends (the watch), and matched to the log's records
across a resume."""

import json
import math
import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress, trainer_state

DEFAULT = log_progress.compile_patterns(log_progress.DEFAULT_PATTERNS)
PER_EPOCH = 1000  # optimizer steps per epoch


def loss(step, start):
    """A loss curve; the steps a crashed start logged after its last checkpoint (2001-2050) come
    out a little different when the next start trains them again, as they do on a GPU."""
    return 2 + 3 * math.exp(-step / 800.0) + 0.01 * math.sin(step) + (3e-4 * start if 2000 < step <= 2050 else 0)


def line_5x(step, start):
    """transformers 5.x: each value quoted, 4 significant digits."""
    return "{'loss': '%.4g', 'grad_norm': '1.02', 'learning_rate': '0.0001', 'epoch': '%.4g'}" % (
        loss(step, start), step / float(PER_EPOCH))


def line_4x(step, start):
    """transformers 4.x: the loss rounded to 4 decimals, the epoch to 2."""
    return "{'loss': %r, 'grad_norm': 1.02, 'learning_rate': 0.0001, 'epoch': %r}" % (
        round(loss(step, start), 4), round(step / float(PER_EPOCH), 2))


def save_state(directory, step, logging_steps=10, evaluations=500):
    """A trainer_state.json as the Trainer writes it (json.dumps(indent=2, sort_keys=True)) in
    checkpoint-<step>/, its log_history that of the run's last start."""
    history = []
    for at in range(logging_steps, step + 1, logging_steps):
        history.append(dict(epoch=at / float(PER_EPOCH), grad_norm=1.02, learning_rate=1e-4, loss=loss(at, 2), step=at))
        if at % evaluations == 0:
            history.append(dict(epoch=at / float(PER_EPOCH), eval_loss=2.5, eval_runtime=1.5, step=at))
    state = dict(best_global_step=None, best_metric=None, best_model_checkpoint=None, epoch=step / float(PER_EPOCH),
                 eval_steps=evaluations, global_step=step, is_hyper_param_search=False, is_local_process_zero=True,
                 is_world_process_zero=True, log_history=history, logging_steps=logging_steps, max_steps=5000,
                 num_input_tokens_seen=0, num_train_epochs=5, save_steps=500,
                 stateful_callbacks={"TrainerControl": {"args": {"should_save": True, "should_evaluate": False},
                                                        "attributes": {}}},
                 total_flos=1.5e15, train_batch_size=8, trial_name=None, trial_params=None)
    path = directory / ("checkpoint-%d" % step) / "trainer_state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def test_the_watch_reads_the_files_ends_and_gets_what_the_whole_file_gives(tmp_path):
    path = save_state(tmp_path, 40000, logging_steps=1)
    assert path.stat().st_size > 50 * (trainer_state.HEAD_BYTES + trainer_state.TAIL_BYTES)
    whole, ends = trainer_state.parse(path.read_text()), trainer_state.read(str(path))
    for key in ("global_step", "max_steps", "logging_steps", "epoch"):
        assert ends[key] == whole[key]
    assert (whole["global_step"], whole["max_steps"], whole["logging_steps"], whole["epoch"]) == (40000, 5000, 1, 40.0)
    assert len(whole["entries"]) == 40000 and whole["entries"][-1] == (40000, 40.0, pytest.approx(loss(40000, 2)))
    # the ends hold the latest entries whole, the evaluations left out
    assert 100 < len(ends["entries"]) < 1000 and ends["entries"] == whole["entries"][-len(ends["entries"]):]


@pytest.mark.parametrize("line", [line_5x, line_4x])
def test_a_run_that_crashed_and_resumed_gets_every_records_step(line, tmp_path):
    """The first start logs steps 10-2050 and dies; its newest checkpoint was checkpoint-2000. The
    second resumes from it and logs 2010-3730; the newest checkpoint is checkpoint-3500. Its
    state holds the second start's records up to 3500; 3510-3730 count on from them, and the
    first start's 2010-2050 (losses the state does not hold) on from 2000."""
    lines = [line(step, 1) for step in range(10, 2051, 10)] + ["llmtrain: job 7 start"]
    lines += [line(step, 2) for step in range(2010, 3731, 10)]
    state = trainer_state.parse(save_state(tmp_path, 3500).read_text())
    found, _warnings = log_progress.records(lines, DEFAULT, state)
    assert [r["step"] for r in found] == list(range(10, 2051, 10)) + list(range(2010, 3731, 10))
    assert {r["total_steps"] for r in found} == {5000}
    # the watch, from the state's ends and the log's last lines
    log = tmp_path / "job.out"
    log.write_text("\n".join(lines) + "\n")
    last, _warnings = log_progress.last_record(str(log), DEFAULT, trainer_state.read(str(save_state(tmp_path, 3000))))
    assert (last["step"], last["total_steps"]) == (3730, 5000)


def test_a_start_that_resumed_past_every_entry_of_the_state_takes_its_steps_from_its_epochs(tmp_path):
    """The state read is checkpoint-1000's; the log is a start that resumed from checkpoint-2000
    (saved since): its records match no entry and follow none, their epochs place them."""
    lines = [line_5x(step, 2) for step in range(2060, 2200, 10)]
    state = trainer_state.parse(save_state(tmp_path, 1000).read_text())
    found, _warnings = log_progress.records(lines, DEFAULT, state)
    assert [r["step"] for r in found] == list(range(2060, 2200, 10))


def test_without_a_state_or_an_epoch_the_records_keep_their_places(tmp_path):
    state = trainer_state.parse(save_state(tmp_path, 100).read_text())
    lines = ["{'loss': 3.0}", "{'loss': 2.5}"]
    assert [r["step"] for r in log_progress.records(lines, DEFAULT, state)[0]] == [1, 2]
    assert [r["step"] for r in log_progress.records([line_4x(10, 1), line_4x(20, 1)], DEFAULT, None)[0]] == [1, 2]
    assert trainer_state.parse("not json") is None and trainer_state.parse("[1]") is None
    assert trainer_state.parse('{"log_history": []}') is None


def test_the_newest_checkpoint_with_a_state_is_read(tmp_path):
    save_state(tmp_path, 100)
    newest = save_state(tmp_path, 200)
    (tmp_path / "checkpoint-300").mkdir()  # being saved: no state yet
    (tmp_path / "checkpoint-400" / "trainer_state.json").mkdir(parents=True)  # no file
    (tmp_path / "checkpoint-final").mkdir()
    os.mkfifo(str(tmp_path / "checkpoint-300" / "trainer_state.json"))  # never opened: it would block
    assert next(trainer_state._candidates(str(tmp_path))) == str(newest)
    assert trainer_state.read_newest(str(tmp_path)) == (trainer_state.read(str(newest)), [])
    assert next(trainer_state._candidates(str(tmp_path / "missing")), None) is None


@pytest.mark.parametrize("value, tolerance", [(5.471, 5e-4), (0.01, 5e-3), (0.0134, 5e-5), (5.0, 0.5), (1e-05, 5e-6),
                                              (1.2e-05, 5e-7), (2.0, 0.5), (1234.5, 0.05)])
def test_a_printed_number_matches_to_the_digits_it_has(value, tolerance):
    assert trainer_state._tolerance(value) == pytest.approx(tolerance, rel=0.01)


def test_a_state_being_written_is_passed_over_for_the_one_before_it(tmp_path):
    save_state(tmp_path, 100)
    path = save_state(tmp_path, 200)
    path.write_text(path.read_text()[:1000])  # the Trainer is writing it
    state, errors = trainer_state.read_newest(str(tmp_path))
    assert state["global_step"] == 100 and errors == []
    big = save_state(tmp_path, 40000, logging_steps=1)
    big.write_bytes(big.read_bytes()[:-30000])  # the ends read of one being written
    assert trainer_state.read_newest(str(tmp_path))[0]["global_step"] == 100
    assert trainer_state.read_newest(str(tmp_path / "missing")) == (None, [])
