"""The trainer as a pipeline runs it: subprocesses, signals, kills, resumes."""

import json
import shutil
import signal
import time

import pytest
from trainer.checkpoint import list_checkpoints
from trainer.train import EXIT_PREEMPTED
from trainer_faults import STEP_PAUSE_ENV, WRITE_PAUSE_ENV
from trainer_testing import REFERENCE_STEPS, losses, read_metrics, run_module, start_module, trainer_env

LOSS_KEYS = {"step", "total_steps", "loss", "lr", "tokens_seen", "tokens_per_s", "elapsed_s", "eta_s"}


def wait_for(condition, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def logged_step(run_dir):
    """The last step with a loss record so far (0 before the first)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    steps = [json.loads(line).get("step", 0) for line in path.read_text().splitlines() if '"loss"' in line]
    return max(steps, default=0)


def partial_bytes(ckpt_dir, step):
    """Bytes written so far to the temporary file of the checkpoint of step (0 while there is none)."""
    for path in ckpt_dir.glob(f".step_{step:06d}.pt.tmp-*"):
        try:
            return path.stat().st_size
        except FileNotFoundError:  # renamed or removed since the listing
            pass
    return 0


def checkpoint_steps(run_dir):
    return [s for s, _path in list_checkpoints(run_dir / "checkpoints")]


def test_a_run_records_metrics_and_checkpoints_and_running_it_again_does_nothing(reference_run, train_args):
    out, result = reference_run
    # the start line says how many CPU threads each rank has: OMP_NUM_THREADS, as the job sets it
    assert "1 rank(s) (one process) on cpu (1 CPU thread(s) per rank)" in result.stdout, result.stdout
    records = read_metrics(out)
    assert all("step" in r or "event" in r for r in records)
    loss_records = [r for r in records if "loss" in r]
    assert [r["step"] for r in loss_records] == list(range(1, REFERENCE_STEPS + 1))
    for r in loss_records:
        assert LOSS_KEYS <= r.keys()
        assert r["total_steps"] == REFERENCE_STEPS and r["tokens_per_s"] > 0 and "mfu" not in r  # no GPU here
    assert loss_records[-1]["tokens_seen"] == REFERENCE_STEPS * 4 * 32
    assert [r["step"] for r in loss_records if "val_loss" in r] == [8, 16, 24]
    first, last = [r["loss"] for r in loss_records[:3]], [r["loss"] for r in loss_records[-3:]]
    assert sum(last) / 3 < sum(first) / 3 - 1.0, (first, last)
    events = [r["event"] for r in records if "event" in r]
    assert events[0] == "start" and events[-1] == "done" and events.count("checkpoint") == REFERENCE_STEPS // 4
    assert checkpoint_steps(out) == [20, 24]  # interval 4, keep 2
    assert not (out / "PREEMPTED").exists()

    before = (out / "metrics.jsonl").read_bytes(), {p: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}
    again = run_module("train", *train_args, "--out", out, "--steps", REFERENCE_STEPS, "--checkpoint-interval", "4")
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout
    assert ((out / "metrics.jsonl").read_bytes(), {p: p.stat().st_mtime_ns for p in (out / "checkpoints").iterdir()}) == before


@pytest.mark.parametrize("stop_signal", [signal.SIGUSR2, signal.SIGTERM])
def test_a_stop_signal_checkpoints_exits_75_and_the_resumed_run_is_exact(tmp_path, reference_run, train_args, stop_signal):
    reference = losses(read_metrics(reference_run[0]))
    out = tmp_path / "run"
    args = [*train_args, "--out", out, "--steps", REFERENCE_STEPS, "--checkpoint-interval", "1000"]
    proc = start_module("train", *args, env=trainer_env(**{STEP_PAUSE_ENV: 0.1}))
    try:
        wait_for(lambda: logged_step(out) >= 5, what="step 5")
        proc.send_signal(stop_signal)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED

    marker = json.loads((out / "PREEMPTED").read_text())
    stopped = marker["step"]
    assert marker["signal"] == stop_signal.name and 5 <= stopped < REFERENCE_STEPS
    assert checkpoint_steps(out) == [stopped]
    records = read_metrics(out)
    assert records[-1] == {"event": "preempted", "step": stopped, "signal": stop_signal.name}
    assert losses(records) == {s: reference[s] for s in range(1, stopped + 1)}

    resumed = run_module("train", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at step {stopped}" in resumed.stdout
    assert not (out / "PREEMPTED").exists()
    records = read_metrics(out)
    assert next(r for r in records if r.get("event") == "resume")["step"] == stopped
    assert losses(records) == reference  # exactly equal floats, every step
    assert records[-1]["event"] == "done"


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one_and_resume_uses_it(tmp_path, reference_run, train_args):
    reference = losses(read_metrics(reference_run[0]))
    out = tmp_path / "run"
    ckpt_dir = out / "checkpoints"
    args = [*train_args, "--out", out, "--steps", REFERENCE_STEPS, "--checkpoint-interval", "4", "--keep-checkpoints", "5"]
    proc = start_module("train", *args, env=trainer_env(**{WRITE_PAUSE_ENV: 1.0}))
    try:
        wait_for((ckpt_dir / "step_000004.pt").exists, what="checkpoint 4")
        wait_for(lambda: partial_bytes(ckpt_dir, 8) > 0, what="the write of checkpoint 8 to start")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    partial = list(ckpt_dir.glob(".step_000008.pt.tmp-*"))
    assert len(partial) == 1  # killed half-written: some bytes, fewer than a whole checkpoint
    assert 0 < partial[0].stat().st_size < (ckpt_dir / "step_000004.pt").stat().st_size
    assert checkpoint_steps(out) == [4]
    killed_at = logged_step(out)
    assert killed_at >= 8  # steps 5..8 were logged but not checkpointed

    resumed = run_module("train", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "removed partial checkpoint .step_000008.pt.tmp-" in resumed.stderr
    assert "resuming at step 4" in resumed.stdout
    records = read_metrics(out)
    resume_event = next(r for r in records if r.get("event") == "resume")
    assert resume_event["step"] == 4 and resume_event["discarded_records"] >= 4
    # the steps recorded past the checkpoint, trained again: 5 up to the last the killed run logged
    assert resume_event["steps_lost"] == killed_at - 4
    assert [r["step"] for r in records if "loss" in r] == list(range(1, REFERENCE_STEPS + 1))  # no step twice
    assert losses(records) == reference
    assert not list(ckpt_dir.glob(".*"))


def test_a_corrupt_newest_checkpoint_resumes_from_the_one_before(tmp_path, reference_run, train_args):
    out = tmp_path / "run"
    shutil.copytree(reference_run[0], out)
    (out / "checkpoints" / "step_000024.pt").write_bytes(b"\0" * 100)
    resumed = run_module("train", *train_args, "--out", out, "--steps", REFERENCE_STEPS, "--checkpoint-interval", "4")
    assert resumed.returncode == 0, resumed.stderr
    assert "step_000024.pt does not load" in resumed.stderr and "resuming at step 20" in resumed.stdout
    assert losses(read_metrics(out)) == losses(read_metrics(reference_run[0]))


@pytest.mark.parametrize("flag", ["--n-layer=3", "--no-bias"])
def test_resuming_with_another_model_shape_is_refused(tmp_path, reference_run, train_args, flag):
    out = tmp_path / "run"
    shutil.copytree(reference_run[0], out)
    result = run_module("train", *train_args, "--out", out, "--steps", "30", flag)
    assert result.returncode == 2
    assert "use the same model flags or another --out" in result.stderr
    assert read_metrics(out) == read_metrics(reference_run[0])


def test_a_rank_that_stopped_on_the_notice_exits_0_where_the_launcher_would_restart_it():
    """Under torch.distributed.run --max-restarts (pretrain_restarts_in_job), a non-zero exit restarts
    every rank: a stop with a checkpoint exits 0 there (the PREEMPTED marker tells the job script)."""
    from trainer.distributed import launched_exit_status
    assert launched_exit_status(EXIT_PREEMPTED, {"TORCHELASTIC_MAX_RESTARTS": "1"}) == 0
    assert launched_exit_status(EXIT_PREEMPTED, {"TORCHELASTIC_MAX_RESTARTS": "0"}) == EXIT_PREEMPTED
    assert launched_exit_status(EXIT_PREEMPTED, {}) == EXIT_PREEMPTED
    # a failure is still one, and restarts the ranks
    assert launched_exit_status(1, {"TORCHELASTIC_MAX_RESTARTS": "1"}) == 1
