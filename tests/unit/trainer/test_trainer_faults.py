"""The trainer's faults: a full disk at a checkpoint, a read error or a corrupt file at resume,
an injected crash, ranks that cannot reach each other. Single-process runs call train() in
this process."""

import errno
import json
import os
import shutil

import pytest
import torch
from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs
from trainer import checkpoint, runfiles, train
from trainer.checkpoint import CheckpointError, list_checkpoints
from trainer.config import resolve_config
from trainer.model import GPT, GPTConfig
from trainer.prepare import read_meta
from trainer.distributed import EXIT_RENDEZVOUS, Distributed, rendezvous_hint
from trainer.train import Training, build_parser
from trainer_faults import CRASH_ENV, wrap
from trainer_testing import REFERENCE_STEPS, TINY_TRAINING, free_port, losses, read_metrics, run_module, trainer_env


class NoStop:
    signum = 0


def run_here(data_dir, model_config_file, out, *argv):
    """train() of one process, as main() calls it (without main's signal handlers)."""
    args = build_parser().parse_args(["--data", str(data_dir), "--config", str(model_config_file), *TINY_TRAINING,
                                      "--out", str(out), *map(str, argv)])
    cfg = resolve_config(args)
    return train.train(cfg, args.data, args.out, read_meta(args.data), Distributed(cfg.rendezvous_timeout), NoStop())


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def checkpoint_steps(run_dir):
    return [s for s, _path in list_checkpoints(run_dir / "checkpoints")]


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device"),
    RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 1024 vs 960"),  # torch.save's wording
])
def test_a_checkpoint_that_cannot_be_written_names_the_newest_complete_one(monkeypatch, data_dir, model_config_file,
                                                                           tmp_path, error):
    saved = []

    def save_checkpoint(state, ckpt_dir, keep):
        saved.append(state["step"])
        if len(saved) == 2:
            raise error
        return checkpoint.save_checkpoint(state, ckpt_dir, keep)

    monkeypatch.setattr(train, "save_checkpoint", save_checkpoint)
    out = tmp_path / "run"
    with pytest.raises(CheckpointError) as info:
        run_here(data_dir, model_config_file, out, "--steps", 8, "--checkpoint-interval", 2)
    message = str(info.value)
    assert saved == [2, 4] and info.value.__cause__ is error
    assert message.startswith(f"could not write the checkpoint of step 4 in {out / 'checkpoints'} "
                              f"({type(error).__name__}: {error}); nothing of it is left behind")
    assert "step_000002.pt is the newest complete one (a rerun resumes from it once there is room)" in message
    assert checkpoint_steps(out) == [2]
    assert max(losses(read_metrics(out))) == 4  # no step after the one that could not be saved


def test_the_full_disk_behind_torch_saves_second_error_is_named(monkeypatch, data_dir, model_config_file, tmp_path):
    """torch.save closing its zip after a failed write raises again ("unexpected pos"): the
    message names the disk, which the user can act on, not the zip writer."""
    def save_checkpoint(state, ckpt_dir, keep):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 154560 vs 154448")

    monkeypatch.setattr(train, "save_checkpoint", save_checkpoint)
    with pytest.raises(CheckpointError, match=r"\(OSError: \[Errno 28\] No space left on device\); nothing of it"):
        run_here(data_dir, model_config_file, tmp_path / "run", "--steps", 4, "--checkpoint-interval", 2)


def test_a_full_disk_at_the_first_checkpoint_says_there_is_none(monkeypatch, data_dir, model_config_file, tmp_path):
    def save_checkpoint(state, ckpt_dir, keep):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(train, "save_checkpoint", save_checkpoint)
    with pytest.raises(CheckpointError, match=r"\[Errno 28\] No space left on device\); nothing of it is left behind, "
                                              "and no earlier checkpoint is the newest complete one"):
        run_here(data_dir, model_config_file, tmp_path / "run", "--steps", 4, "--checkpoint-interval", 2)


def test_a_disk_that_fills_mid_write_leaves_no_partial_file_and_the_rerun_resumes(
        monkeypatch, data_dir, model_config_file, tmp_path):
    real_save, writes = torch.save, []

    def save(obj, f, *args, **kwargs):
        writes.append(obj["step"])
        if len(writes) == 2:
            f.write(b"\0" * 4096)  # some of it made it to the disk
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    out = tmp_path / "run"
    with pytest.raises(CheckpointError, match="step_000002.pt is the newest complete one"):
        run_here(data_dir, model_config_file, out, "--steps", 6, "--checkpoint-interval", 2)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000002.pt"]

    monkeypatch.setattr(checkpoint.torch, "save", real_save)  # room again
    assert run_here(data_dir, model_config_file, out, "--steps", 6, "--checkpoint-interval", 2) == 0
    records = read_metrics(out)
    assert next(r for r in records if r.get("event") == "resume")["step"] == 2
    assert sorted(losses(records)) == list(range(1, 7)) and records[-1]["event"] == "done"
    assert checkpoint_steps(out) == [2, 4, 6]


@pytest.fixture
def copied_reference(reference_run, tmp_path):
    """A copy of the reference run: checkpoints of steps 20 and 24, metrics up to step 24."""
    out = tmp_path / "run"
    shutil.copytree(reference_run[0], out)
    return out


def resume_again(data_dir, model_config_file, out):
    return run_here(data_dir, model_config_file, out, "--steps", REFERENCE_STEPS + 4, "--checkpoint-interval", 4,
                    "--keep-checkpoints", 2)


def test_a_read_error_at_resume_is_retried_and_keeps_the_newer_checkpoint_and_records(
        monkeypatch, data_dir, model_config_file, copied_reference):
    before = read_metrics(copied_reference)
    real_load, loads = torch.load, []

    def load(*args, **kwargs):
        loads.append(args[0])
        if len(loads) == 1:
            raise OSError(errno.EIO, "Input/output error")
        return real_load(*args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "load", load)
    monkeypatch.setattr(checkpoint, "READ_RETRY_DELAYS_S", (0, 0))
    assert resume_again(data_dir, model_config_file, copied_reference) == 0
    assert [p.name for p in loads] == ["step_000024.pt", "step_000024.pt"]
    records = read_metrics(copied_reference)
    assert records[:len(before)] == before
    resumed = next(r for r in records if r.get("event") == "resume")
    assert resumed["step"] == REFERENCE_STEPS and resumed["discarded_records"] == 0
    assert checkpoint_steps(copied_reference) == [REFERENCE_STEPS, REFERENCE_STEPS + 4]


def test_a_read_error_that_persists_fails_the_run_and_removes_nothing(monkeypatch, data_dir, model_config_file,
                                                                      copied_reference):
    before = read_metrics(copied_reference), sorted(p.name for p in (copied_reference / "checkpoints").iterdir())

    def load(*args, **kwargs):
        raise OSError(errno.ESTALE, "Stale file handle")

    monkeypatch.setattr(checkpoint.torch, "load", load)
    monkeypatch.setattr(checkpoint, "READ_RETRY_DELAYS_S", (0, 0))
    with pytest.raises(CheckpointError, match=r"step_000024.pt could not be read \(OSError: \[Errno 116\] Stale file "
                                              r"handle, 3 attempts\); nothing was moved or removed"):
        resume_again(data_dir, model_config_file, copied_reference)
    assert (read_metrics(copied_reference), sorted(p.name for p in (copied_reference / "checkpoints").iterdir())) == before


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory")])
def test_running_out_of_memory_while_loading_is_not_corruption(monkeypatch, data_dir, model_config_file,
                                                               copied_reference, error):
    def load(*args, **kwargs):
        raise error

    monkeypatch.setattr(checkpoint.torch, "load", load)
    with pytest.raises(type(error)) as info:
        resume_again(data_dir, model_config_file, copied_reference)
    assert info.type is type(error)  # not the CheckpointError of "none loads"
    assert checkpoint_steps(copied_reference) == [20, REFERENCE_STEPS]


def test_a_truncated_newest_checkpoint_is_moved_aside_and_the_run_resumes_from_the_one_before(
        reference_run, data_dir, model_config_file, copied_reference, capsys):
    newest = copied_reference / "checkpoints" / "step_000024.pt"
    truncated = newest.read_bytes()[:newest.stat().st_size // 2]
    newest.write_bytes(truncated)
    assert resume_again(data_dir, model_config_file, copied_reference) == 0
    assert "step_000024.pt does not load" in capsys.readouterr().err
    assert (copied_reference / "checkpoints" / "step_000024.pt.bad").read_bytes() == truncated
    records = read_metrics(copied_reference)
    assert next(r for r in records if r.get("event") == "resume")["step"] == 20
    reference = losses(read_metrics(reference_run[0]))
    assert {s: v for s, v in losses(records).items() if s <= 20} == {s: reference[s] for s in range(1, 21)}
    assert checkpoint_steps(copied_reference) == [REFERENCE_STEPS, REFERENCE_STEPS + 4]


def inject(monkeypatch, environ):
    """The faults environ asks for, on this process's trainer until the test ends."""
    monkeypatch.setattr(Training, "step", Training.step)
    wrap(train, environ)


def test_an_injected_crash_raises_after_its_step_on_its_rank(monkeypatch, data_dir, model_config_file, tmp_path):
    inject(monkeypatch, {CRASH_ENV: "0:3"})
    out = tmp_path / "run"
    monkeypatch.setenv("SLURM_JOB_ID", "45")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    with pytest.raises(RuntimeError, match=f"^fault injected by {CRASH_ENV}=0:3 on rank 0$"):
        run_here(data_dir, model_config_file, out, "--steps", 6, "--checkpoint-interval", 3)
    assert sorted(losses(read_metrics(out))) == [1, 2, 3] and checkpoint_steps(out) == [3]
    # the failing rank's line: which rank, on which node, after which step, what it raised
    failure, = [json.loads(line) for line in (out / runfiles.RANK_FAILURES_FILE).read_text().splitlines()]
    assert failure["rank"] == 0 and failure["step"] == 3 and failure["node"]
    assert failure["error"] == f"RuntimeError: fault injected by {CRASH_ENV}=0:3 on rank 0"
    assert failure["job_id"] == "45" and failure["start"] == 2 and failure["restart_in_job"] == 0
    # the start event says which job and start it is of
    assert read_metrics(out)[0]["job_id"] == "45" and read_metrics(out)[0]["start"] == 2
    # and is added to the run's starts.jsonl, beside the job script's line of that start
    assert [json.loads(line) for line in (out / runfiles.STARTS_FILE).read_text().splitlines()] == [
        {"job_id": "45", "start": 2, "event": "start", "step": 0}]


def test_an_injected_crash_on_another_rank_leaves_this_one_running(monkeypatch, data_dir, model_config_file, tmp_path):
    inject(monkeypatch, {CRASH_ENV: "1:3"})
    assert run_here(data_dir, model_config_file, tmp_path / "run", "--steps", 4) == 0


def test_a_crash_of_the_first_round_only_is_not_repeated_after_a_restart_in_the_job(
        monkeypatch, data_dir, model_config_file, tmp_path):
    """torch.distributed.run restarted the ranks (pretrain_restarts_in_job): the resume records it."""
    out = tmp_path / "run"
    assert run_here(data_dir, model_config_file, out, "--steps", 3, "--checkpoint-interval", 3) == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setenv("SLURM_JOB_ID", "45")
    # what the failed rank of this job's start recorded, after a line of another job's and one cut short
    failed = dict(rank=3, node="w1", step=4, error="RuntimeError: CUDA error: an illegal memory access")
    (out / runfiles.RANK_FAILURES_FILE).write_text("".join(json.dumps(line) + "\n" for line in [
        dict(failed, job_id="44", start=1), dict(failed, job_id="45", start=1, restart_in_job=0)]) + '{"rank": 2, "jo')
    inject(monkeypatch, {CRASH_ENV: "0:4:first"})
    assert run_here(data_dir, model_config_file, out, "--steps", 6, "--checkpoint-interval", 3) == 0
    resume, = [r for r in read_metrics(out) if r.get("event") == "resume"]
    assert resume["restart_in_job"] == 1 and resume["step"] == 3
    assert resume["failed_ranks"] == [failed] and resume["job_id"] == "45" and resume["start"] == 1
    assert "restart_in_job" not in read_metrics(out)[0]  # the first start's event: no restart


def test_the_rendezvous_hint_names_the_interface_settings(monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    hint = rendezvous_hint(2, "gloo", "the ranks did not all connect within 5 s (--rendezvous-timeout)")
    assert hint.startswith("train: error: rendezvous failed on rank 2 (")
    assert "backend gloo): the ranks did not all connect within 5 s (--rendezvous-timeout). " in hint
    assert "MASTER_ADDR=10.0.0.1, MASTER_PORT=(unset), GLOO_SOCKET_IFNAME=eth9." in hint
    assert "NCCL_SOCKET_IFNAME=" not in hint  # gloo does not use it
    assert ("Check that the interface in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (nccl_env_socket_ifname, "
            "nccl_env_gloo_socket_ifname) exists on every node") in hint and "firewall" in hint
    nccl = rendezvous_hint(0, "nccl", "DistBackendError: timeout")
    assert "GLOO_SOCKET_IFNAME=eth9, NCCL_SOCKET_IFNAME=ib0, NCCL_IB_HCA=(unset)." in nccl


def test_a_rank_whose_peers_never_come_stops_after_the_rendezvous_timeout(tmp_path, train_args):
    env = trainer_env(RANK=0, LOCAL_RANK=0, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port(),
                      GLOO_SOCKET_IFNAME="lo", CUDA_VISIBLE_DEVICES="")
    result = run_module("train", *train_args, "--out", tmp_path / "run", "--steps", 3, "--rendezvous-timeout", 2,
                        env=env, timeout=60)
    assert result.returncode == EXIT_RENDEZVOUS, result.stderr
    assert "rendezvous failed on rank 0 (" in result.stderr and ", backend gloo)" in result.stderr
    assert "the ranks did not all connect within 2 s (--rendezvous-timeout)" in result.stderr
    assert "GLOO_SOCKET_IFNAME=lo" in result.stderr
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_preflight_asks_for_at_least_the_room_a_real_checkpoint_takes(data_dir, model_config_file, tmp_path):
    model = dict(n_layer=6, n_head=2, n_embd=32, block_size=32)
    out = tmp_path / "run"
    assert run_here(data_dir, model_config_file, out, "--steps", 1, "--n-layer", 6, "--keep-checkpoints", 1) == 0
    written = (out / "checkpoints" / "step_000001.pt").stat().st_size
    need, how = inputs.workspace_need(dict(pretrain_model=model, pretrain_extra_args=["--keep-checkpoints", "1"]))
    assert written <= need / 2 < 1.5 * written  # one kept, one being written
    params = sum(p.numel() for p in GPT(GPTConfig(vocab_size=inputs.pretrain.VOCAB_SIZE, dropout=0.0, **model)).parameters())
    assert f"({params} parameters," in how
