"""--parallel fsdp on gloo ranks of this machine: FSDP2 against DDP, its sharded checkpoints,
a stop and a kill mid-write, resume across kinds and rank counts, generate from a step dir."""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
from trainer import generate, train
from trainer.checkpoint import TRAINER_STATE, list_checkpoints
from trainer.config import ConfigError, resolve_config
from trainer.distributed import Distributed
from trainer.prepare import read_meta
from trainer_faults import STEP_PAUSE_ENV, WRITE_PAUSE_ENV
from trainer_testing import FILES_DIR, losses, read_metrics, torchrun, torchrun_argv, trainer_env, worker_pid

STEPS = 12
GLOBAL_BATCH = 6  # sequences per micro-step over all ranks: 3 ranks x 2, or 2 ranks x 3
TRAINING = ["--grad-accum", "2", "--eval-interval", "6", "--checkpoint-interval", "4", "--keep-checkpoints", "2",
            "--no-tensorboard"]
# FSDP's reduce-scatter sums the ranks' gradients in another order than DDP's all-reduce, so
# the two agree to float32 rounding, not always bit for bit (measured: at most 4.8e-7 apart,
# 1e-7 relative, on 2 of the 12 steps).
FSDP_VS_DDP = {"rel": 1e-5, "abs": 1e-6}


def run_args(train_args, out, ranks, parallel):
    return [*train_args, *TRAINING, "--batch-size", GLOBAL_BATCH // ranks, "--parallel", parallel, "--out", out,
            "--steps", STEPS]


def checkpoint_names(run_dir):
    return [path.name for _step, path in list_checkpoints(run_dir / "checkpoints")]


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory, train_args):
    """An uninterrupted fsdp run on 3 ranks; the interrupted ones must repeat its losses exactly."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    result = torchrun(3, *run_args(train_args, out, 3, "fsdp"))
    assert result.returncode == 0, result.stdout + result.stderr
    return out


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, train_args):
    out = tmp_path_factory.mktemp("ddp") / "run"
    result = torchrun(3, *run_args(train_args, out, 3, "ddp"))
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def copy_until(run_dir, dest, step):
    """dest: run_dir as it was after step (its checkpoints up to step, its records up to step)."""
    (dest / "checkpoints").mkdir(parents=True)
    for ckpt_step, path in list_checkpoints(run_dir / "checkpoints"):
        if ckpt_step <= step:
            (shutil.copytree if path.is_dir() else shutil.copy)(path, dest / "checkpoints" / path.name)
    kept = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if json.loads(line).get("step", 0) <= step]
    (dest / "metrics.jsonl").write_text("\n".join(kept) + "\n")


def test_fsdp_matches_ddp_from_the_same_seed_and_writes_sharded_checkpoints(fsdp_run, ddp_run):
    fsdp_records, ddp_records = read_metrics(fsdp_run), read_metrics(ddp_run)
    assert fsdp_records[0]["parallel"] == "fsdp" and ddp_records[0]["parallel"] == "ddp"
    fsdp, ddp = losses(fsdp_records), losses(ddp_records)
    assert list(fsdp) == list(range(1, STEPS + 1))
    assert fsdp == pytest.approx(ddp, **FSDP_VS_DDP)
    val = {r["step"]: r["val_loss"] for r in fsdp_records if "val_loss" in r}
    assert val == pytest.approx({r["step"]: r["val_loss"] for r in ddp_records if "val_loss" in r}, **FSDP_VS_DDP)
    assert checkpoint_names(fsdp_run) == ["step_000008", "step_000012"]  # keep 2
    assert checkpoint_names(ddp_run) == ["step_000008.pt", "step_000012.pt"]
    newest = fsdp_run / "checkpoints" / "step_000012"
    assert sorted(p.name for p in newest.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp",
                                                        TRAINER_STATE]
    assert not [p for p in (fsdp_run / "checkpoints").iterdir() if p.name.startswith(".")]  # no temp dirs left


def start(args, **fault_env):
    return subprocess.Popen(torchrun_argv(3, *args), cwd=FILES_DIR, env=trainer_env(**fault_env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(predicate, launcher, what, timeout=90):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline and launcher.poll() is None, what
        time.sleep(0.02)


def test_sigusr2_to_one_of_three_ranks_stops_all_and_the_resume_repeats_the_losses_exactly(
        tmp_path, fsdp_run, train_args):
    out = tmp_path / "run"
    args = run_args(train_args, out, 3, "fsdp")
    launcher = start(args, **{STEP_PAUSE_ENV: 0.1})
    try:
        wait_for(lambda: (out / "metrics.jsonl").exists() and any(
            r.get("step", 0) >= 5 and "loss" in r for r in read_metrics(out)), launcher, "the run did not reach step 5")
        os.kill(worker_pid(launcher.pid, 2), signal.SIGUSR2)  # neither rank 0 nor rank 1 is signalled
        output, _stderr = launcher.communicate(timeout=90)
    finally:
        launcher.kill()
    marker = json.loads((out / "PREEMPTED").read_text())
    stopped = marker["step"]
    assert marker["signal"] == "SIGUSR2" and 5 <= stopped < STEPS
    exit_codes = re.findall(r"exitcode\s*:\s*(-?\d+)", output)
    assert exit_codes and set(exit_codes) == {"75"}, output  # every rank stopped the same way
    assert f"step_{stopped:06d}" in checkpoint_names(out)

    resumed = torchrun(3, *args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = read_metrics(out)
    assert [r["step"] for r in records if r.get("event") == "resume"] == [stopped]
    assert losses(records) == losses(read_metrics(fsdp_run))  # exactly
    assert not (out / "PREEMPTED").exists()


def test_rank_0_killed_mid_write_leaves_the_previous_checkpoint_and_the_resume_is_exact(tmp_path, fsdp_run, train_args):
    out = tmp_path / "run"
    args = run_args(train_args, out, 3, "fsdp")
    launcher = start(args, **{WRITE_PAUSE_ENV: 1.5})  # each checkpoint's trainer state pauses, half-written
    partial = out / "checkpoints" / ".step_000008.tmp-sharded"
    try:
        wait_for(lambda: partial.is_dir() and any(p.name.startswith(f".{TRAINER_STATE}") for p in partial.iterdir()),
                 launcher, "the checkpoint of step 8 was not being written")
        os.kill(worker_pid(launcher.pid, 0), signal.SIGKILL)
        launcher.communicate(timeout=90)
    finally:
        launcher.kill()
    assert launcher.returncode != 0
    assert checkpoint_names(out) == ["step_000004"]  # step 8's shards are written, but it is not a checkpoint

    resumed = torchrun(3, *args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "removed partial checkpoint .step_000008.tmp-sharded" in resumed.stderr
    records = read_metrics(out)
    assert [r["step"] for r in records if r.get("event") == "resume"] == [4]
    assert losses(records) == losses(read_metrics(fsdp_run))  # exactly
    assert checkpoint_names(out) == ["step_000008", "step_000012"]


def test_ddp_on_two_ranks_resumes_from_three_fsdp_shards_past_a_truncated_one(tmp_path, fsdp_run, train_args):
    out = tmp_path / "run"
    copy_until(fsdp_run, out, STEPS)
    shard = out / "checkpoints" / "step_000012" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:shard.stat().st_size // 2])
    resumed = torchrun(2, *run_args(train_args, out, 2, "ddp"))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "step_000012: shard __1_0.distcp has" in resumed.stderr and "moved to step_000012.bad" in resumed.stderr
    assert (out / "checkpoints" / "step_000012.bad" / "__1_0.distcp").exists()  # kept to look at
    records = read_metrics(out)
    resume = next(r for r in records if r.get("event") == "resume")
    assert (resume["step"], resume["world_size"], resume["parallel"]) == (8, 2, "ddp")
    assert losses(records) == pytest.approx(losses(read_metrics(fsdp_run)), **FSDP_VS_DDP)
    assert checkpoint_names(out) == ["step_000008", "step_000012.pt"]  # keep-K counts both kinds


def test_fsdp_on_two_ranks_resumes_from_a_ddp_checkpoint_of_three(tmp_path, ddp_run, train_args):
    out = tmp_path / "run"
    copy_until(ddp_run, out, 8)
    resumed = torchrun(2, *run_args(train_args, out, 2, "fsdp"))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = read_metrics(out)
    assert [(r["step"], r["world_size"]) for r in records if r.get("event") == "resume"] == [(8, 2)]
    assert losses(records) == pytest.approx(losses(read_metrics(ddp_run)), **FSDP_VS_DDP)
    assert checkpoint_names(out) == ["step_000008.pt", "step_000012"]


def test_generate_reads_a_sharded_step_dir_in_one_process(fsdp_run, ddp_run, capsys):
    samples, loaded = {}, {}
    for name, checkpoint in (("fsdp", fsdp_run / "checkpoints" / "step_000012"), ("ddp", ddp_run)):
        assert generate.main(["--checkpoint", str(checkpoint), "--prompt", "def f1(x):", "--max-new-tokens", "24",
                              "--temperature", "0", "--json"]) == 0
        out, err = capsys.readouterr()
        samples[name], loaded[name] = json.loads(out)[0]["completion"], err
    assert f"generate: {fsdp_run}/checkpoints/step_000012 (step 12," in loaded["fsdp"]
    assert samples["fsdp"] == samples["ddp"]  # weights within rounding of each other: the same greedy text
    assert len(samples["fsdp"]) == 24


def test_fsdp_without_launched_ranks_is_refused(tmp_path, train_args):
    args = train.build_parser().parse_args([str(a) for a in run_args(train_args, tmp_path / "run", 3, "fsdp")])
    cfg = resolve_config(args)
    with pytest.raises(ConfigError, match="--parallel fsdp shards over ranks started by torch.distributed.run"):
        train.train(cfg, args.data, args.out, read_meta(args.data), Distributed(), stop=None)
    assert not (tmp_path / "run").exists()
