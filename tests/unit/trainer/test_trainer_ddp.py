"""Two gloo ranks on this machine, launched as a pipeline launches them: torch.distributed.run."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from trainer.checkpoint import list_checkpoints
from trainer_faults import SLOW_NODE_ENV, STEP_PAUSE_ENV
from trainer_testing import (FILES_DIR, free_port, losses, read_metrics, run_module, torchrun, torchrun_argv,
                             trainer_env, worker_pid)

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


def two_nodes(out, steps, *extra):
    """Two one-rank nodes on this machine (two launchers, as srun starts one per node); the ranks
    on n1 sleep 0.2 s more before each step (twice what the assertions need: a
    busy machine adds tens of ms to either node)."""
    port = free_port()
    launchers = []
    for node_rank, node in enumerate(("n0", "n1")):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node_rank),
                "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
                "-m", "trainer.train", *map(str, extra), "--batch-size", "2", "--out", str(out), "--steps", str(steps),
                "--log-interval", "2", "--eval-interval", "0"]
        env = trainer_env(SLURMD_NODENAME=node, **{SLOW_NODE_ENV: "n1:0.2"})
        launchers.append(subprocess.Popen(argv, cwd=FILES_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    outputs = [launcher.communicate(timeout=120)[0] for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], outputs


def test_each_node_s_work_and_wait_per_step_are_in_the_loss_records_and_node_times(tmp_path, train_args):
    """n1 works longer, and n0 waits for it; node_times.json counts what metrics.jsonl holds, also
    after a resume that drops the records after its checkpoint."""
    out = tmp_path / "run"
    two_nodes(out, 8, *train_args, "--checkpoint-interval", "4")
    records = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in records] == [2, 4, 6, 8]
    for r in (records[1], records[3]):  # (the first interval holds the start-up, the third the checkpoint of 4)
        times = r["node_times"]
        assert times["count"] == 2 and list(times["slowest"]) == ["n1", "n0"], times
        n0, n1 = times["slowest"]["n0"], times["slowest"]["n1"]
        assert n1["work_ms"] >= n0["work_ms"] + 100, times  # its 200 ms more a step
        assert n0["wait_ms"] >= n1["wait_ms"] + 100, times  # spent waiting for n1
        # what a node does not wait for, it works: the two add up to the step time on both
        assert n0["work_ms"] + n0["wait_ms"] == pytest.approx(n1["work_ms"] + n1["wait_ms"], rel=0.1)
        assert times["median_work_ms"] == pytest.approx((n0["work_ms"] + n1["work_ms"]) / 2, abs=0.01)
    history = json.loads((out / "node_times.json").read_text())
    assert (history["first_step"], history["step"], history["records"]) == (2, 8, 4)
    n0, n1 = history["nodes"]["n0"], history["nodes"]["n1"]
    assert n1["records"] == 4 and n1["slow_records"] >= 3 and n1["work_ms"] >= n0["work_ms"] + 100, history
    assert n1["last_work_ms"] == records[-1]["node_times"]["slowest"]["n1"]["work_ms"]

    shutil.rmtree(out / "checkpoints" / "step_000008.pt", ignore_errors=True)
    (out / "checkpoints" / "step_000008.pt").unlink(missing_ok=True)
    two_nodes(out, 8, *train_args, "--checkpoint-interval", "4")  # resumes at 4: the records of 6 and 8 again
    resume = next(r for r in read_metrics(out) if r.get("event") == "resume")
    assert resume["step"] == 4 and resume["discarded_records"] >= 2
    history = json.loads((out / "node_times.json").read_text())
    assert (history["first_step"], history["step"], history["records"]) == (2, 8, 4)
    assert history["nodes"]["n1"]["records"] == 4


def test_one_node_s_ranks_are_one_entry_and_a_single_process_records_none(two_rank_run, train_args, tmp_path):
    records = [r for r in read_metrics(two_rank_run) if "loss" in r]
    assert all(r["node_times"]["count"] == 1 and len(r["node_times"]["slowest"]) == 1 for r in records)
    history = json.loads((two_rank_run / "node_times.json").read_text())
    assert history["records"] == len(records) and len(history["nodes"]) == 1
    single = tmp_path / "single"
    assert run_module("train", *train_args, "--out", single, "--steps", 2).returncode == 0
    assert not any("node_times" in r or "nodes" in r for r in read_metrics(single))
    assert not (single / "node_times.json").exists()
