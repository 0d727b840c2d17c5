"""Pretrain a GPT on prepared tokens, in one process or under torch.distributed.run (DDP).

    python -m trainer.train --data DATA --out RUN --steps N [--config FILE] [--batch-size B ...]
    python -m torch.distributed.run --nproc_per_node 4 -m trainer.train --data DATA --out RUN --steps N

Rank 0 writes RUN/metrics.jsonl (one JSON object per line) and RUN/checkpoints/step_*.pt.
A run resumes from the newest checkpoint that loads and continues exactly as if it had
not stopped. Exit status: 0 when all steps are done (also when they were done before),
75 (EX_TEMPFAIL) after checkpointing on the preemption signal or SIGTERM, with
RUN/PREEMPTED saying so for launchers that replace the exit status, 2 for bad flags.
"""

import argparse
import json
import math
import os
import random
import signal
import socket
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.distributed as torch_dist
from torch.nn.parallel import DistributedDataParallel as DDP

from .checkpoint import (CHECKPOINT_DIR, FORMAT, CheckpointError, clean_checkpoint_dir, list_checkpoints, load_checkpoint,
                         load_latest, save_checkpoint)
from .config import ConfigError, add_config_flags, parse_signal, resolve_config
from .data import TRAIN_STREAM, VAL_STREAM, open_tokens, window_starts, windows
from .fsio import atomic_file, remove_temp_files
from .mfu import mfu, peak_bf16_flops
from .model import GPT, GPTConfig
from .prepare import DataError, read_meta

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped on request with a checkpoint; run it again to continue
PREEMPTED_MARKER = "PREEMPTED"
METRICS_FILE = "metrics.jsonl"
# Fault-injection tests set this to slow every step down, so a signal lands mid-run.
STEP_PAUSE_ENV = "TRAINER_FAULT_STEP_PAUSE_S"
# ... and this ("RANK:STEP") to make one rank raise after that step, as a bug would.
CRASH_ENV = "TRAINER_FAULT_CRASH"


class Distributed:
    """This process's place in the job, and the few collectives the loop needs.

    Without RANK in the environment the run is a single process and every collective is
    the identity.
    """

    def __init__(self, rendezvous_timeout=300):
        self.active = "RANK" in os.environ
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        if self.active:
            self._connect("nccl" if self.device.type == "cuda" else "gloo", rendezvous_timeout)

    def _connect(self, backend, timeout_s):
        """Join the process group and run one barrier (NCCL connects at the first collective),
        within timeout_s: a rank that cannot reach the others (an interface that does not route
        between nodes, a firewall) would otherwise wait for torch's 30-minute default."""
        connected = threading.Event()

        def give_up():
            if not connected.wait(timeout_s):
                print(rendezvous_hint(self.rank, backend, f"the ranks did not all connect within {timeout_s} s "
                                      "(--rendezvous-timeout)"), file=sys.stderr, flush=True)
                os._exit(EXIT_RENDEZVOUS)

        threading.Thread(target=give_up, name="rendezvous-timeout", daemon=True).start()
        try:
            torch_dist.init_process_group(backend=backend, init_method="env://")
            torch_dist.barrier()
        except Exception as e:  # any failure to connect gets the same hint
            print(rendezvous_hint(self.rank, backend, f"{type(e).__name__}: {e}"), file=sys.stderr, flush=True)
            raise
        finally:
            connected.set()

    @property
    def is_main(self):
        return self.rank == 0

    def max_int(self, value):
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX)
        return int(t.item())

    def mean(self, tensor):
        """Mean over ranks of a scalar tensor, as a float."""
        t = tensor.detach().float().reshape(1)
        if self.active:
            torch_dist.all_reduce(t, op=torch_dist.ReduceOp.SUM)
            t /= self.world_size
        return t.item()

    def gather(self, obj):
        if not self.active:
            return [obj]
        objects = [None] * self.world_size
        torch_dist.all_gather_object(objects, obj)
        return objects

    def broadcast(self, obj):
        if not self.active:
            return obj
        holder = [obj]
        torch_dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self):
        if self.active:
            torch_dist.barrier()

    def close(self, wait_for_all=False):
        """Tear the process group down. With wait_for_all (every rank got here), a rank then
        waits on the launcher's store until every rank has torn its group down: a rank that
        exits early closes its sockets under peers still inside their teardown."""
        if not (self.active and torch_dist.is_initialized()):
            return
        store = torch_dist.distributed_c10d._get_default_store() if wait_for_all else None
        torch_dist.destroy_process_group()
        if store is None:
            return
        try:
            closed = store.add(CLOSED_KEY, 1)
            deadline = time.monotonic() + CLOSE_WAIT_S
            while closed < self.world_size and time.monotonic() < deadline:
                time.sleep(0.05)
                closed = store.add(CLOSED_KEY, 0)
        except (RuntimeError, OSError):  # the store is gone: nobody is left to wait for
            pass


EXIT_RENDEZVOUS = 3


def rendezvous_hint(rank, backend, what):
    """Why a rank could not reach the others, with the settings that decide the route."""
    names = ["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"] + (["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]
                                                                    if backend == "nccl" else [])
    settings = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in names)
    return (f"train: error: rendezvous failed on rank {rank} ({socket.gethostname()}, backend {backend}): {what}. "
            f"{settings}. Check that the interface in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (nccl_env_socket_ifname, "
            "nccl_env_gloo_socket_ifname) exists on every node and reaches the other nodes (not lo), and that no "
            "firewall blocks the ports between them.")


CLOSED_KEY = "llmtrain/process-group-closed"
CLOSE_WAIT_S = 60.0


class StopRequest:
    """Records a stop signal; the training loop acts on it at the next step boundary."""

    def __init__(self, signals):
        self.signum = 0
        self.signals = signals
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.signum = self.signum or signum

    def ignore_from_now(self):
        """Ignore these signals while the process exits: the launcher sends SIGTERM to the ranks
        still running when the first one exits, and during interpreter shutdown Python resets
        caught signals (not ignored ones) to their default action, which would kill a rank
        that has finished its work."""
        for sig in self.signals:
            signal.signal(sig, signal.SIG_IGN)


class MetricsLog:
    """RUN/metrics.jsonl. Records after the step a run resumes from are dropped first,
    so the file always tells one trajectory (and never holds a line cut short by a kill)."""

    def __init__(self, path, resumed_step):
        self.dropped = 0
        if path.exists():
            kept = []
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if resumed_step and isinstance(record, dict) and record.get("step", 0) <= resumed_step:
                    kept.append(line + "\n")
                else:
                    self.dropped += 1
            if self.dropped:
                with atomic_file(path, "w") as f:
                    f.writelines(kept)
        self.file = open(path, "a")

    def write(self, record):
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()


def seed_everything(*key):
    """Seed python, numpy and torch (CPU and CUDA) from a tuple of non-negative ints."""
    seed = int(np.random.SeedSequence(list(key)).generate_state(1)[0])
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state():
    _kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state):
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def lr_at(step, cfg):
    """Linear warmup to cfg.lr over cfg.warmup steps, then cosine decay to cfg.min_lr at the last step."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


@torch.no_grad()
def estimate_val_loss(model, val_tokens, cfg, dist, autocast):
    """Mean loss over cfg.eval_iters global batches, the same windows at every evaluation."""
    model.eval()
    B = cfg.batch_size
    starts = window_starts(len(val_tokens), cfg.block_size, cfg.seed, VAL_STREAM, 0, (cfg.eval_iters, B * dist.world_size))
    total = torch.zeros((), device=dist.device)
    for i in range(cfg.eval_iters):
        x, y = windows(val_tokens, starts[i, dist.rank * B:(dist.rank + 1) * B], cfg.block_size)
        with autocast:
            _logits, loss = model(x.to(dist.device), y.to(dist.device))
        total += loss.float()
    model.train()
    return dist.mean(total / cfg.eval_iters)


def format_seconds(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def train(cfg, data_dir, out_dir, meta, dist, stop):
    """Run steps until cfg.steps are done or a stop is requested; return the exit status."""
    log = print if dist.is_main else (lambda *a, **k: None)
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    marker = out_dir / PREEMPTED_MARKER
    if dist.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        remove_temp_files(out_dir)
        clean_checkpoint_dir(ckpt_dir)

    # Resume: rank 0 finds the newest checkpoint that loads; every rank loads that one.
    state, resume_path = None, None
    if dist.is_main:
        resume_path, state = load_latest(ckpt_dir)
    resume_path = dist.broadcast(str(resume_path) if resume_path else None)
    if resume_path and state is None:
        state = load_checkpoint(resume_path)
    start_step = state["step"] if state else 0
    if start_step >= cfg.steps:
        log(f"train: {out_dir} already has {start_step} steps (--steps {cfg.steps}); nothing to do", flush=True)
        if dist.is_main:
            marker.unlink(missing_ok=True)
        return 0

    model_cfg = GPTConfig(vocab_size=int(meta["vocab_size"]), block_size=cfg.block_size, n_layer=cfg.n_layer,
                          n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=cfg.dropout)
    if state:
        shape = {k: v for k, v in asdict(model_cfg).items() if k != "dropout"}
        saved_shape = {k: state["model_config"].get(k) for k in shape}
        if saved_shape != shape:
            raise ConfigError(f"the checkpoints in {ckpt_dir} are of a model {saved_shape}, the config asks for "
                              f"{shape}; use the same model flags or another --out")

    device = dist.device
    seed_everything(cfg.seed)  # the same initial weights on every rank
    raw_model = GPT(model_cfg).to(device)
    optimizer = raw_model.configure_optimizer(cfg.weight_decay, cfg.lr, device.type)
    tokens_seen, prior_elapsed = 0, 0.0
    if state:
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        tokens_seen, prior_elapsed = state["tokens_seen"], state["elapsed_s"]
        if len(state["rng"]) == dist.world_size:
            set_rng_state(state["rng"][dist.rank])
        else:
            log(f"warning: checkpoint from {len(state['rng'])} ranks, now {dist.world_size}: random state reseeded", flush=True)
            seed_everything(cfg.seed, dist.rank, start_step)
    else:
        seed_everything(cfg.seed, dist.rank)  # dropout differs between ranks
    del state  # the checkpoint's tensors are copied into the model and optimizer

    use_bf16 = device.type == "cuda" and cfg.dtype != "float32" and torch.cuda.is_bf16_supported()
    if cfg.dtype == "bfloat16" and not use_bf16:
        log("warning: --dtype bfloat16 needs a CUDA GPU that supports it; training in float32", flush=True)
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if use_bf16 else nullcontext()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = torch.compile(raw_model) if cfg.compile else raw_model
    eval_model = model
    if dist.active:
        model = DDP(model, device_ids=[dist.local_rank] if device.type == "cuda" else None)

    train_tokens = open_tokens(data_dir, meta, "train")
    val_tokens = open_tokens(data_dir, meta, "val")
    B, A, W, T = cfg.batch_size, cfg.grad_accum, dist.world_size, cfg.block_size
    tokens_per_step = B * A * W * T
    rank_slice = slice(dist.rank * B, (dist.rank + 1) * B)
    peak_flops = peak_bf16_flops(torch.cuda.get_device_name(device)) if use_bf16 else None
    flops_per_token = raw_model.flops_per_token()
    step_pause = float(os.environ.get(STEP_PAUSE_ENV, "0"))
    crash_rank, crash_step = (os.environ.get(CRASH_ENV, "") + ":").split(":")[:2]

    metrics = None
    if dist.is_main:
        metrics = MetricsLog(out_dir / METRICS_FILE, start_step)
        marker.unlink(missing_ok=True)
        event = {"event": "resume" if start_step else "start", "step": start_step, "total_steps": cfg.steps,
                 "world_size": W, "device": str(device), "params": raw_model.num_params(),
                 "tokens_per_step": tokens_per_step}
        if start_step:
            event.update(checkpoint=resume_path, discarded_records=metrics.dropped)
        metrics.write(event)
        start_note = f"resuming at step {start_step} from {resume_path}" if start_step else "starting at step 0"
        log(f"train: {raw_model.num_params() / 1e6:.2f}M parameters, {W} rank(s) on {device.type}, "
            f"{tokens_per_step:,} tokens per step, {start_note}", flush=True)

    run_started = time.perf_counter()
    last_record_time, last_record_step = run_started, start_step
    pause_s = 0.0  # time since the last record spent evaluating and checkpointing, not training

    def save(step):
        nonlocal pause_s
        started = time.perf_counter()
        rng_states = dist.gather(rng_state())
        if dist.is_main:
            try:
                path = save_checkpoint({
                    "format": FORMAT,
                    "step": step,
                    "tokens_seen": tokens_seen,
                    "elapsed_s": prior_elapsed + time.perf_counter() - run_started,
                    "model": raw_model.state_dict(),
                    "model_config": asdict(model_cfg),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": {"kind": "warmup_cosine", "lr": cfg.lr, "min_lr": cfg.min_lr, "warmup": cfg.warmup,
                                  "total_steps": cfg.steps, "next_lr": lr_at(step, cfg)},
                    "data": {"sampler": "window_starts(seed, stream, step)", "seed": cfg.seed, "next_step": step,
                             "global_batch": B * W},
                    "rng": rng_states,
                    "world_size": W,
                    "config": asdict(cfg),
                }, ckpt_dir, cfg.keep_checkpoints)
            except (OSError, RuntimeError) as e:  # disk full, quota, read-only (torch.save wraps some in RuntimeError)
                newest = list_checkpoints(ckpt_dir)
                raise CheckpointError(
                    f"could not write the checkpoint of step {step} in {ckpt_dir} ({type(e).__name__}: {e}); nothing of it is left "
                    f"behind, and {newest[-1][1].name if newest else 'no earlier checkpoint'} is the newest complete one "
                    "(a rerun resumes from it once there is room)") from e
            metrics.write({"event": "checkpoint", "step": step, "path": str(path)})
        pause_s += time.perf_counter() - started

    model.train()
    for step in range(start_step, cfg.steps):
        lr = lr_at(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        starts = window_starts(len(train_tokens), T, cfg.seed, TRAIN_STREAM, step, (A, B * W))
        loss_sum = torch.zeros((), device=device)
        for micro in range(A):
            x, y = windows(train_tokens, starts[micro, rank_slice], T)
            if device.type == "cuda":
                x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
            # gradients are all-reduced once per step, on the last micro-step
            sync = model.no_sync() if dist.active and micro < A - 1 else nullcontext()
            with sync:
                with autocast:
                    _logits, loss = model(x, y)
                (loss / A).backward()
            loss_sum += loss.detach().float()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        tokens_seen += tokens_per_step
        stop_signal = dist.max_int(stop.signum)  # a signal on any rank stops every rank here

        finished = done == cfg.steps
        evaluate = finished or (cfg.eval_interval and done % cfg.eval_interval == 0)
        if evaluate or done % cfg.log_interval == 0:
            loss_value = dist.mean(loss_sum / A)
            now = time.perf_counter()
            tokens_per_s = (done - last_record_step) * tokens_per_step / max(1e-9, now - last_record_time - pause_s)
            last_record_time, last_record_step, pause_s = now, done, 0.0
            eta_s = (now - run_started) / (done - start_step) * (cfg.steps - done)
            record = {"step": done, "total_steps": cfg.steps, "loss": loss_value, "lr": lr,
                      "tokens_seen": tokens_seen, "tokens_per_s": round(tokens_per_s, 1),
                      "elapsed_s": round(prior_elapsed + now - run_started, 3), "eta_s": round(eta_s, 1)}
            if device.type == "cuda":
                record["mfu"] = mfu(flops_per_token, tokens_per_s, W, peak_flops) if peak_flops else None
            if evaluate:
                started = time.perf_counter()
                record["val_loss"] = estimate_val_loss(eval_model, val_tokens, cfg, dist, autocast)
                pause_s += time.perf_counter() - started
            if dist.is_main:
                metrics.write(record)
                extras = "".join([f" val {record['val_loss']:.4f}" if evaluate else "",
                                  f" mfu {record['mfu']:.1%}" if record.get("mfu") else ""])
                print(f"step {done}/{cfg.steps} loss {loss_value:.4f}{extras} lr {lr:.2e} "
                      f"{tokens_per_s:,.0f} tok/s eta {format_seconds(eta_s)}", flush=True)

        if finished:
            save(done)
            if dist.is_main:
                metrics.write({"event": "done", "step": done, "tokens_seen": tokens_seen,
                               "elapsed_s": round(prior_elapsed + time.perf_counter() - run_started, 3)})
            dist.barrier()  # no rank exits while rank 0 still writes
            return 0
        if stop_signal:
            name = signal.Signals(stop_signal).name
            save(done)
            if dist.is_main:
                with atomic_file(marker, "w") as f:
                    json.dump({"step": done, "signal": name, "time": datetime.now(timezone.utc).isoformat()}, f)
                metrics.write({"event": "preempted", "step": done, "signal": name})
                print(f"train: {name} received; checkpointed step {done}, exiting with {EXIT_PREEMPTED}", flush=True)
            dist.barrier()
            return EXIT_PREEMPTED
        if cfg.checkpoint_interval and done % cfg.checkpoint_interval == 0:
            save(done)
        if crash_step and int(crash_rank) == dist.rank and int(crash_step) == done:
            raise RuntimeError(f"fault injected by {CRASH_ENV}={crash_rank}:{crash_step} on rank {dist.rank}")
        if step_pause:
            time.sleep(step_pause)


def build_parser():
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, metavar="DIR", help="directory written by python -m trainer.prepare")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory: metrics.jsonl, checkpoints/, PREEMPTED")
    p.add_argument("--config", metavar="FILE", help="JSON object of config values; flags override it")
    add_config_flags(p)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        cfg = resolve_config(args)
        meta = read_meta(args.data)
    except (ConfigError, DataError) as e:
        parser.error(str(e))
    for split in ("train", "val"):
        if meta[f"{split}_tokens"] <= cfg.block_size:
            parser.error(f"--data {args.data}: the {split} split has {meta[f'{split}_tokens']} tokens, "
                         f"not more than --block-size {cfg.block_size}; prepare more text or lower --block-size")
    # Handlers go in before the process group and the model, so an early signal is not fatal.
    stop = StopRequest({parse_signal(cfg.preempt_signal), signal.SIGTERM})
    dist = Distributed(cfg.rendezvous_timeout)
    status, every_rank_done = None, False
    try:
        status = train(cfg, args.data, args.out, meta, dist, stop)
        every_rank_done = True  # train() returns only after its last barrier
        stop.ignore_from_now()
        return status
    except ConfigError as e:
        print(f"train: error: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        dist.close(wait_for_all=every_rank_done)


def exit_now(status):
    """End a launched rank without the interpreter's teardown: the run's files are written and
    closed, the process group is gone, and what is left to tear down (torch's threads and
    native objects) can only fail a finished run (std::terminate at exit, seen with gloo)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    code = main()
    if "RANK" in os.environ:  # a rank started by torch.distributed.run
        exit_now(code if isinstance(code, int) else 1)
    sys.exit(code)
