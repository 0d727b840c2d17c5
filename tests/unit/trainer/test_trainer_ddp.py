"""Two gloo ranks on this machine, launched as a pipeline launches them: torch.distributed.run."""

import json
import os
import re
import signal
import subprocess
import time

import pytest
from trainer.checkpoint import list_checkpoints
from trainer_faults import STEP_PAUSE_ENV
from trainer_testing import FILES_DIR, losses, read_metrics, run_module, torchrun, torchrun_argv, trainer_env, worker_pid

STEPS = 12
DDP_TRAINING = ["--grad-accum", "2", "--eval-interval", "6", "--checkpoint-interval", "1000"]


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory, train_args):
    out = tmp_path_factory.mktemp("ddp") / "run"
    result = torchrun(2, *train_args, *DDP_TRAINING, "--batch-size", "2", "--out", out, "--steps", STEPS)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_two_ranks_match_one_rank_with_the_same_global_batch(tmp_path, two_rank_run, train_args):
    one = tmp_path / "one"
    result = run_module("train", *train_args, *DDP_TRAINING, "--batch-size", "4", "--out", one, "--steps", STEPS)
    assert result.returncode == 0, result.stderr
    two_records, one_records = read_metrics(two_rank_run), read_metrics(one)
    assert two_records[0]["world_size"] == 2 and one_records[0]["world_size"] == 1
    assert two_records[0]["tokens_per_step"] == one_records[0]["tokens_per_step"]
    two, single = losses(two_records), losses(one_records)
    assert list(two) == list(range(1, STEPS + 1))
    assert two == pytest.approx(single, rel=1e-5, abs=1e-6)
    val = {r["step"]: r["val_loss"] for r in two_records if "val_loss" in r}
    assert val == pytest.approx({r["step"]: r["val_loss"] for r in one_records if "val_loss" in r}, rel=1e-5)
    assert list(val) == [6, 12]
    assert [s for s, _path in list_checkpoints(two_rank_run / "checkpoints")] == [STEPS]


def test_a_signal_to_one_rank_stops_both_at_the_same_step_and_resume_matches(tmp_path, two_rank_run, train_args):
    out = tmp_path / "run"
    args = [*train_args, *DDP_TRAINING, "--batch-size", "2", "--out", out, "--steps", STEPS]
    launcher = subprocess.Popen(torchrun_argv(2, *args), cwd=FILES_DIR, env=trainer_env(**{STEP_PAUSE_ENV: 0.2}),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while not any(r.get("step", 0) >= 3 and "loss" in r for r in
                      (read_metrics(out) if (out / "metrics.jsonl").exists() else [])):
            assert time.monotonic() < deadline and launcher.poll() is None, "the run did not reach step 3"
            time.sleep(0.02)
        rank1 = worker_pid(launcher.pid, 1)
        assert rank1 is not None
        os.kill(rank1, signal.SIGUSR2)  # rank 0 is not signalled
        output, _stderr = launcher.communicate(timeout=90)
    finally:
        launcher.kill()
    assert launcher.returncode != 0, output  # the launcher reports any worker's non-zero exit as its own failure
    marker = json.loads((out / "PREEMPTED").read_text())  # written by rank 0, which got no signal
    stopped = marker["step"]
    assert marker["signal"] == "SIGUSR2" and 3 <= stopped < STEPS
    assert [s for s, _path in list_checkpoints(out / "checkpoints")] == [stopped]
    exit_codes = re.findall(r"exitcode\s*:\s*(-?\d+)", output)
    assert exit_codes and set(exit_codes) == {"75"}, output  # no rank died some other way

    resumed = torchrun(2, *args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert not (out / "PREEMPTED").exists()
    assert losses(read_metrics(out)) == losses(read_metrics(two_rank_run))  # exactly
