"""Weights & Biases logging of the trainer, in W&B's offline mode (nothing leaves this machine):
the records W&B saved, read back from its own files, are the metrics records; a resumed run
continues the same W&B run; without the package, the run stops before its first step."""

import os
import shutil
import signal
import subprocess
import time

import pytest
from trainer_testing import losses, read_metrics, run_module, start_module, trainer_env
from wandb_records import wandb_history, wandb_test_env

WANDB = ["--wandb-project", "llmtrain-tests", "--wandb-mode", "offline"]


def read_metrics_if_any(run_dir):
    return read_metrics(run_dir) if (run_dir / "metrics.jsonl").exists() else []


@pytest.fixture(name="wandb_env")
def fixture_wandb_env(tmp_path):
    return trainer_env(**wandb_test_env(tmp_path))


def test_the_metrics_records_go_to_an_offline_wandb_run(train_args, tmp_path, wandb_env):
    out = tmp_path / "run"
    result = run_module("train", *train_args, "--out", out, "--steps", 8, *WANDB, timeout=180, env=wandb_env)
    assert result.returncode == 0, result.stderr
    run_id = (out / "wandb" / "run_id").read_text().strip()
    assert run_id.startswith("run-") and len(run_id) == len("run-") + 8
    starts = list((out / "wandb").glob("offline-run-*"))
    assert len(starts) == 1 and starts[0].name.endswith("-" + run_id)
    records = [r for r in read_metrics(out) if "loss" in r]
    history = wandb_history(out)
    assert sorted(history) == [r["step"] for r in records] == list(range(1, 9))
    for r in records:
        logged = history[r["step"]]
        assert logged["train/loss"] == pytest.approx(r["loss"], rel=1e-12)
        assert logged["train/lr"] == pytest.approx(r["lr"], rel=1e-12)
        assert logged["train/grad_norm"] == pytest.approx(r["grad_norm"], rel=1e-12) and r["grad_norm"] > 0
        assert logged["train/tokens_per_s"] > 0
        assert ("val/loss" in logged) == ("val_loss" in r)
        assert "train/mfu" not in logged  # not measured on CPU: left out, not logged as 0
    assert history[8]["val/loss"] == pytest.approx(records[-1]["val_loss"], rel=1e-12)


def test_a_resumed_run_continues_the_same_wandb_run(train_args, tmp_path, wandb_env):
    out = tmp_path / "run"
    args = [*train_args, "--out", out, "--steps", 12, "--checkpoint-interval", 4, "--keep-checkpoints", 5, *WANDB]
    first = run_module("train", *args, timeout=180, env=wandb_env)
    assert first.returncode == 0, first.stderr
    uninterrupted = losses(read_metrics(out))
    run_id = (out / "wandb" / "run_id").read_text()
    for step in (8, 12):  # as if it had stopped after step 9, with its checkpoint of step 4 the newest
        (out / "checkpoints" / f"step_{step:06d}.pt").unlink()
    again = run_module("train", *args, timeout=180, env=wandb_env)
    assert again.returncode == 0, again.stderr
    assert (out / "wandb" / "run_id").read_text() == run_id
    starts = sorted((out / "wandb").glob("offline-run-*"))
    assert len(starts) == 2 and all(s.name.endswith("-" + run_id.strip()) for s in starts)
    # the second start logged steps 5-12 again, with the same losses on CPU
    assert sorted(wandb_history(starts[1].parent.parent)) == list(range(1, 13))
    second_only = tmp_path / "second"
    (second_only / "wandb").mkdir(parents=True)
    shutil.copytree(starts[1], second_only / "wandb" / starts[1].name)
    resumed = wandb_history(second_only)
    assert sorted(resumed) == list(range(5, 13))
    assert {s: v["train/loss"] for s, v in resumed.items()} == pytest.approx(
        {s: loss for s, loss in uninterrupted.items() if s >= 5}, rel=1e-12)


def test_without_the_wandb_package_the_run_stops_before_its_first_step(train_args, tmp_path, wandb_env):
    shadow = tmp_path / "shadow" / "wandb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named wandb')\n")
    wandb_env["PYTHONPATH"] = f"{shadow.parent}:{wandb_env['PYTHONPATH']}"
    out = tmp_path / "run"
    result = run_module("train", *train_args, "--out", out, "--steps", 4, *WANDB, timeout=120, env=wandb_env)
    assert result.returncode == 2
    assert "--wandb-project needs the Python package 'wandb'" in result.stderr
    assert "run_wandb_project" in result.stderr
    assert not (out / "metrics.jsonl").exists() and not list((out / "checkpoints").glob("step_*"))


@pytest.mark.parametrize("flags, message", [
    (["--wandb-mode", "cloud"], "--wandb-mode must be one of online, offline (got 'cloud')"),
    (["--wandb-project", "team/project"], "--wandb-project 'team/project' is not a W&B project name"),
])
def test_bad_wandb_flags_are_refused_naming_the_flag(train_args, tmp_path, flags, message):
    result = run_module("train", *train_args, "--out", tmp_path / "run", "--steps", 2, *flags)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_wandb_whose_own_process_is_gone_stops_logging_and_training_goes_on(train_args, tmp_path, wandb_env):
    """A SIGTERM to a job's processes (a preemption by scontrol requeue) ends W&B's own process
    (wandb-core) too: the trainer's stop still checkpoints and says so, without W&B."""
    out = tmp_path / "run"
    proc = start_module("train", *train_args, "--out", out, "--steps", 400, "--checkpoint-interval", 0, *WANDB,
                        env=dict(wandb_env, TRAINER_FAULT_STEP_PAUSE_S="0.05"))
    try:
        deadline = time.monotonic() + 120
        while not [r for r in read_metrics_if_any(out) if r.get("step", 0) >= 3 and "loss" in r]:
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False).stdout.split()
        assert children, "no wandb-core process under the trainer"
        for pid in children:
            os.kill(int(pid), signal.SIGTERM)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 75, stderr
    assert "train: warning: W&B stopped taking records at step" in stderr
    events = [r["event"] for r in read_metrics(out) if "event" in r]
    assert events[-2:] == ["checkpoint", "preempted"]
    assert list((out / "checkpoints").glob("step_*.pt"))
