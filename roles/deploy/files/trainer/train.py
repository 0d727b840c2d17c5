"""Pretrain a GPT on prepared tokens, in one process or under torch.distributed.run (DDP or FSDP2).

    python -m trainer.train --data DATA --out RUN --steps N [--config FILE] [--batch-size B ...]
    python -m torch.distributed.run --nproc_per_node 4 -m trainer.train --data DATA --out RUN --steps N
        [--parallel fsdp]

Rank 0 writes RUN/metrics.jsonl (one JSON object per line), under torch.distributed.run with
--parallel ddp RUN/node_times.json (each node's step times over the run), and RUN/checkpoints/step_*.pt
(--parallel ddp) or, with every rank, the sharded RUN/checkpoints/step_*/ (--parallel fsdp).
A rank whose step raises adds a line to RUN/rank_failures.jsonl (its rank, node, step and error)
before it ends; the start event after torch.distributed.run restarted the ranks names it. In a
Slurm job, rank 0 also adds its start or resume event to RUN/starts.jsonl.
A run resumes from the newest checkpoint that loads and continues as if it had not stopped
(bit for bit on CPU; on CUDA closely, as its kernels are chosen at run time). Exit status:
0 when all steps are done (also when they were done before), 75 (EX_TEMPFAIL) after
checkpointing on the preemption signal or SIGTERM, with RUN/PREEMPTED saying so for
launchers that replace the exit status, 2 for bad flags.

This file is the loop: set-up (model, optimizer, data, the run's outputs), resume, step,
record and evaluate, checkpoint, finish or stop, and the command line. What it runs on lives
beside it: distributed.py (process group, collectives, sharding, stop signals and the ranks'
vote), clock.py (the run's time, each rank's work and wait), state.py (random and optimizer
state, and a checkpoint's put back), metrics.py (metrics.jsonl, node_times.json, the console
line), runfiles.py (the lines it adds to the run's starts.jsonl and rank_failures.jsonl),
checkpoint.py (the files, and whether one fits the config), model.py, data.py.
"""

import argparse
import json
import math
import os
import signal
import socket
import sys
from contextlib import nullcontext
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

from .checkpoint import (CHECKPOINT_DIR, FORMAT, CheckpointError, check_resumable, clean_checkpoint_dir, is_sharded,
                         list_checkpoints, load_checkpoint, load_latest, save_checkpoint, save_sharded)
from .clock import RunClock, WaitClock
from .config import ConfigError, add_config_flags, parse_signal, resolve_config
from .data import TRAIN_STREAM, VAL_STREAM, open_tokens, window_starts, windows
from .distributed import EXIT_PREEMPTED, Distributed, StopRequest, StopVote, exit_now, launched_exit_status, shard_model
from .events import EventWriter
from .fsio import atomic_file, first_os_error, remove_temp_files
from .hostmem import keep_freed_memory
from .metrics import METRICS_FILE, NODE_TIMES_FILE, MetricsLog, NodeTimes, loss_line, node_step_times, with_node_times
from .mfu import mfu, peak_bf16_flops
from .model import GPT, AttentionKernels, GPTConfig, attention_kernels_problem, padded_vocab
from .prepare import DataError, read_meta
from .runfiles import RANK_FAILURES_FILE, add_start_line, env_count, recent_failures, record_failure, slurm_start
from .state import model_and_optimizer, restore_rng, rng_state, seed_everything
from .tokenizer import tokenizer_record
from .wandb_log import WandbLog

PREEMPTED_MARKER = "PREEMPTED"
TENSORBOARD_DIR = "tensorboard"


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


def cpu_threads(device):
    """' (N CPU threads per rank)' on a CPU: what the job gave each process (OMP_NUM_THREADS)."""
    return " (%d CPU thread(s) per rank)" % torch.get_num_threads() if device.type == "cpu" else ""


def trains_in_bf16(device, dtype):
    """Whether to train under bfloat16 autocast: on a CUDA GPU with native bfloat16 (compute
    capability 8.0 or newer), unless --dtype float32. Plain torch.cuda.is_bf16_supported() also
    says yes to GPUs that only emulate it (V100, T4), which gains nothing there."""
    return device.type == "cuda" and dtype != "float32" and torch.cuda.is_bf16_supported(including_emulation=False)


class Training:
    """One run's model, optimizer, data, clocks and outputs, and the steps of its loop."""

    def __init__(self, cfg, data_dir, out_dir, meta, dist, state, resume_path):
        """Set-up, by concern: the model's shape (checked against the checkpoint's), the model and
        optimizer (from the checkpoint when resuming), how they run, the data, the outputs (the
        metrics file with its start or resume event). Every rank takes part in the same
        collectives, in the same order."""
        self.cfg, self.dist, self.out_dir = cfg, dist, out_dir
        self.device = dist.device
        self.start_step = state["step"] if state else 0
        self.model_cfg = GPTConfig(vocab_size=padded_vocab(int(meta["vocab_size"])), block_size=cfg.block_size, n_layer=cfg.n_layer,
                                   n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias)
        # what decodes the model's tokens, carried in every checkpoint (generate needs no data dir)
        self.tokenizer = tokenizer_record(data_dir, meta)
        if state:
            check_resumable(state, self.model_cfg, self.tokenizer, data_dir, out_dir)
        # CPU, ddp: the step's freed buffers stay in the heap for the next step (hostmem.py)
        host_memory = keep_freed_memory() if self.device.type == "cpu" and cfg.parallel == "ddp" else None
        use_bf16 = trains_in_bf16(self.device, cfg.dtype)
        prior_elapsed = self._model_and_optimizer(state, resume_path, use_bf16)
        self._how_it_runs(use_bf16)
        self._data(data_dir, meta, use_bf16)
        self._outputs(state, resume_path, host_memory)
        self.clock = RunClock(self.start_step, prior_elapsed)
        self.model.train()

    def _model_and_optimizer(self, state, resume_path, use_bf16):
        """The model and optimizer, with the checkpoint's state when resuming; the time trained before."""
        cfg, dist = self.cfg, self.dist
        sharded_from = resume_path if state and is_sharded(resume_path) else None
        seed_everything(cfg.seed)  # the same initial weights on every rank
        self.raw_model = GPT(self.model_cfg).to(self.device)
        self.tokens_seen, prior_elapsed = 0, 0.0
        self.optimizer, changed = model_and_optimizer(
            self.raw_model, cfg, state, sharded_from,
            shard=(lambda model: shard_model(model, use_bf16)) if cfg.parallel == "fsdp" else None)
        if not state:
            seed_everything(cfg.seed, dist.rank)  # dropout differs between ranks
            return prior_elapsed
        if changed:
            self.log(f"train: resuming with {', '.join(changed)}")
        self.tokens_seen, prior_elapsed = state["tokens_seen"], state["elapsed_s"]
        if restore_rng(state["rng"], dist, cfg.seed, self.start_step):
            self.log(f"warning: checkpoint from {len(state['rng'])} ranks, now {dist.world_size}: random state "
                     "reseeded")
        return prior_elapsed

    def _how_it_runs(self, use_bf16):
        """Precision, the attention kernel, DDP and torch.compile around the model, and each rank's clock."""
        cfg, dist, device = self.cfg, self.dist, self.device
        if cfg.dtype == "bfloat16" and not use_bf16:
            self.log("warning: --dtype bfloat16 needs a CUDA GPU with native bfloat16 (compute capability 8.0 or "
                     "newer: A100, H100, L4, ...); training in float32")
        self.autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if use_bf16 else nullcontext()
        problem = attention_kernels_problem(cfg.attention)
        if problem:
            raise ConfigError(problem)
        # around every forward: compiled, the kernel is chosen when the graph is traced
        self.attention = AttentionKernels(cfg.attention)
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        # DDP inside torch.compile: compiled, DDP's gradient buckets split the graph and their
        # all-reduce overlaps the backward, which DDP around a compiled model cannot do.
        # With fsdp the raw model is the sharded one (fully_shard works in place).
        self.model = self.raw_model
        if dist.active and cfg.parallel == "ddp":
            self.model = DDP(self.model, device_ids=[dist.local_rank] if device.type == "cuda" else None)
        if cfg.compile:
            self.model = torch.compile(self.model)
        # Evaluation runs the raw model, eagerly. Through the compiled one, eval mode and no_grad
        # fail its guards and compile the forward a second time, for a few batches now and then;
        # the raw model holds the same parameters, and without gradients DDP has nothing to do
        # (with fsdp it is the sharded model itself, which every rank runs).
        self.eval_model = self.raw_model
        # each rank's own work and wait per step, gathered into the loss records by node
        self.node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        # (ddp: its parameters are the leaves the backward reaches; fsdp's sharded ones are not)
        self.wait_clock = WaitClock(self.raw_model.parameters(), device) if dist.active and cfg.parallel == "ddp" else None
        # every rank's node, once: each loss record then gathers only the ranks' times
        self.node_names = dist.gather(self.node) if self.wait_clock else None
        self.grad_norm = torch.zeros((), device=device)

    def _data(self, data_dir, meta, use_bf16):
        """The token files, this rank's share of a batch, and what a step's MFU is measured by."""
        cfg, dist = self.cfg, self.dist
        self.train_tokens = open_tokens(data_dir, meta, "train")
        self.val_tokens = open_tokens(data_dir, meta, "val")
        self.tokens_per_step = cfg.batch_size * cfg.grad_accum * dist.world_size * cfg.block_size
        self.rank_slice = slice(dist.rank * cfg.batch_size, (dist.rank + 1) * cfg.batch_size)
        self.peak_flops = peak_bf16_flops(torch.cuda.get_device_name(self.device)) if use_bf16 else None
        self.flops_per_token = self.raw_model.flops_per_token()

    def _outputs(self, state, resume_path, host_memory):
        """Rank 0's outputs (W&B first, metrics.jsonl, node_times.json, TensorBoard) and the start or
        resume event, in metrics.jsonl and starts.jsonl."""
        cfg, dist, out_dir = self.cfg, self.dist, self.out_dir
        self.metrics = self.node_times = self.events = self.wandb = None
        # torch.distributed.run's restarts of the ranks inside the job (pretrain_restarts_in_job):
        # the launcher whose rank failed counts one; the others restarted theirs for it at 0
        restart_in_job = dist.max_int_async(env_count("TORCHELASTIC_RESTART_COUNT")).wait()
        if not dist.is_main:
            return
        if cfg.wandb_project:  # first: a W&B that does not start stops the run before it writes anything
            self.wandb = WandbLog(cfg, out_dir, {**asdict(cfg), "world_size": dist.world_size,
                                                 "params": self.raw_model.num_params(),
                                                 "tokenizer": self.tokenizer["kind"],
                                                 "vocab_size": self.tokenizer["vocab_size"]})
        self.metrics = MetricsLog(out_dir / METRICS_FILE, self.start_step)
        self.node_times = NodeTimes(out_dir / NODE_TIMES_FILE, state.get("node_times") if state else None)
        self.node_times.write()  # as of the checkpoint, like metrics.jsonl
        if cfg.tensorboard:
            self.events = EventWriter(out_dir / TENSORBOARD_DIR, self.start_step)
        (out_dir / PREEMPTED_MARKER).unlink(missing_ok=True)
        event = {"event": "resume" if self.start_step else "start", "step": self.start_step,
                 "total_steps": cfg.steps, "world_size": dist.world_size, "parallel": cfg.parallel,
                 "device": str(self.device), **({"host_memory": host_memory} if host_memory else {}),
                 "params": self.raw_model.num_params(), "tokens_per_step": self.tokens_per_step,
                 "tokenizer": self.tokenizer["kind"], "vocab_size": self.tokenizer["vocab_size"]}
        if self.start_step:
            event.update(checkpoint=resume_path, discarded_records=self.metrics.dropped)
            if (self.metrics.dropped_to_step or 0) > self.start_step:  # trained past it: trained again
                event.update(steps_lost=self.metrics.dropped_to_step - self.start_step)
        event.update(slurm_start())
        if restart_in_job:
            event.update(restart_in_job=restart_in_job,
                         failed_ranks=recent_failures(out_dir / RANK_FAILURES_FILE, event.get("job_id"),
                                                      event.get("start")))
        self.metrics.write(event)
        add_start_line(out_dir, event)
        start_note = (f"resuming at step {self.start_step} from {resume_path}" if self.start_step
                      else "starting at step 0")
        self.log(f"train: {self.raw_model.num_params() / 1e6:.2f}M parameters, {dist.world_size} rank(s) "
                 f"({cfg.parallel if dist.active else 'one process'}) on "
                 f"{self.device.type}{cpu_threads(self.device)}, {self.tokens_per_step:,} tokens per step, {start_note}")

    def log(self, message):
        if self.dist.is_main:
            print(message, flush=True)

    def step(self, step):
        """One optimizer step over the global batch of `step`; returns this rank's summed micro-batch loss."""
        cfg, device = self.cfg, self.device
        A, T = cfg.grad_accum, cfg.block_size
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        starts = window_starts(len(self.train_tokens), T, cfg.seed, TRAIN_STREAM, step,
                               (A, cfg.batch_size * self.dist.world_size))
        loss_sum = torch.zeros((), device=device)
        for micro in range(A):
            x, y = windows(self.train_tokens, starts[micro, self.rank_slice], T)
            if device.type == "cuda":
                x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
            # ddp: gradients are all-reduced once per step, on the last micro-step; fsdp reduces
            # them into each rank's shard at every micro-step, which holds no whole gradient
            reduces = micro == A - 1
            sync = (self.model.no_sync() if self.dist.active and cfg.parallel == "ddp" and not reduces
                    else nullcontext())
            with sync:
                with self.autocast, self.attention:
                    _logits, loss = self.model(x, y)
                if self.wait_clock and reduces:
                    self.wait_clock.arm()
                (loss / A).backward()
                if self.wait_clock and reduces:
                    self.wait_clock.reduced()
            loss_sum += loss.detach().float()
        # the global gradient norm, clipped to grad_clip (0: measured only; scaling by 1 changes
        # nothing); foreach: one kernel for all gradients (torch's default only on CUDA)
        self.grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip or math.inf,
                                                        foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.tokens_seen += self.tokens_per_step
        return loss_sum

    def evaluate(self):
        """The validation loss; its time is a pause, not training."""
        with self.clock.pause():
            with self.attention:
                return estimate_val_loss(self.eval_model, self.val_tokens, self.cfg, self.dist, self.autocast)

    def record(self, done, loss_sum, evaluate):
        """The loss record of step `done`, with the validation loss if evaluate (every rank takes part)."""
        cfg, W = self.cfg, self.dist.world_size
        loss_value = self.dist.mean(loss_sum / cfg.grad_accum)
        lr = lr_at(done - 1, cfg)
        now, steps, trained_s = self.clock.lap(done)
        tokens_per_s = steps * self.tokens_per_step / max(1e-9, trained_s)
        times = None
        if self.wait_clock:
            waited = self.wait_clock.take()
            times = self.dist.gather_floats([trained_s - waited, waited])
        eta_s = self.clock.eta_s(now, done, cfg.steps)
        record = {"step": done, "total_steps": cfg.steps, "loss": loss_value, "lr": lr,
                  "grad_norm": round(float(self.grad_norm), 4),
                  "tokens_seen": self.tokens_seen, "tokens_per_s": round(tokens_per_s, 1),
                  "elapsed_s": round(self.clock.elapsed_s(now), 3), "eta_s": round(eta_s, 1)}
        if self.device.type == "cuda":
            record["mfu"] = mfu(self.flops_per_token, tokens_per_s, W, self.peak_flops) if self.peak_flops else None
        if evaluate:
            record["val_loss"] = self.evaluate()
        if times and self.dist.is_main:
            nodes = node_step_times(((node, work_s, wait_s) for node, (work_s, wait_s) in zip(self.node_names, times)),
                                    steps)
            self.node_times.add(done, nodes, with_node_times(record, nodes)["node_times"]["median_work_ms"])
        if self.dist.is_main:
            self.metrics.write(record)
            scalars = {"train/loss": loss_value, "train/lr": lr, "train/grad_norm": record["grad_norm"],
                       "train/tokens_per_s": tokens_per_s, "train/mfu": record.get("mfu"),
                       "val/loss": record.get("val_loss")}
            for sink in (self.events, self.wandb):
                if sink:
                    sink.scalars(done, scalars)
            print(loss_line(record, tokens_per_s, eta_s), flush=True)

    def checkpoint(self, step):
        """Every rank's random state to rank 0, which writes the checkpoint of `step`; with
        fsdp every rank writes its shard of the model and optimizer state, rank 0 the rest."""
        cfg, W = self.cfg, self.dist.world_size
        with self.clock.pause():
            rng_states = self.dist.gather(rng_state())
            ckpt_dir = self.out_dir / CHECKPOINT_DIR
            state = {
                "format": FORMAT,
                "step": step,
                "tokens_seen": self.tokens_seen,
                "elapsed_s": self.clock.elapsed_s(),
                "model_config": asdict(self.model_cfg),
                "tokenizer": self.tokenizer,
                "scheduler": {"kind": "warmup_cosine", "lr": cfg.lr, "min_lr": cfg.min_lr, "warmup": cfg.warmup,
                              "total_steps": cfg.steps, "next_lr": lr_at(step, cfg)},
                "data": {"sampler": "window_starts(seed, stream, step)", "seed": cfg.seed, "next_step": step,
                         "global_batch": cfg.batch_size * W},
                "rng": rng_states,
                "node_times": self.node_times.state if self.node_times else None,
                "world_size": W,
                "config": asdict(cfg),
            }
            path = None
            try:
                if cfg.parallel == "fsdp":
                    model_state, optimizer_state = get_state_dict(self.raw_model, self.optimizer)
                    path = save_sharded({"model": model_state, "optimizer": optimizer_state}, state, ckpt_dir,
                                        cfg.keep_checkpoints, self.dist.is_main, barrier=self.dist.barrier)
                elif self.dist.is_main:
                    path = save_checkpoint({**state, "model": self.raw_model.state_dict(),
                                            "optimizer": self.optimizer.state_dict()}, ckpt_dir, cfg.keep_checkpoints)
            # disk full, quota, read-only (torch.save wraps some in RuntimeError, DCP all in CheckpointException)
            except (OSError, RuntimeError, CheckpointException) as e:
                newest = list_checkpoints(ckpt_dir)
                cause = first_os_error(e)
                raise CheckpointError(
                    f"could not write the checkpoint of step {step} in {ckpt_dir} ({type(cause).__name__}: {cause}); nothing of it is left "
                    f"behind, and {newest[-1][1].name if newest else 'no earlier checkpoint'} is the newest complete one "
                    "(a rerun resumes from it once there is room)") from e
            if self.dist.is_main:
                self.metrics.write({"event": "checkpoint", "step": step, "path": str(path)})

    def finish(self, done):
        """Checkpoint the last step; returns 0."""
        self.checkpoint(done)
        if self.dist.is_main:
            self.metrics.write({"event": "done", "step": done, "tokens_seen": self.tokens_seen,
                                "elapsed_s": round(self.clock.elapsed_s(), 3)})
        self.dist.barrier()  # no rank exits while rank 0 still writes
        return 0

    def stop(self, done, signum):
        """Checkpoint step `done` and leave the PREEMPTED marker; returns EXIT_PREEMPTED."""
        name = signal.Signals(signum).name
        self.checkpoint(done)
        if self.dist.is_main:
            with atomic_file(self.out_dir / PREEMPTED_MARKER, "w") as f:
                json.dump({"step": done, "signal": name, "time": datetime.now(timezone.utc).isoformat()}, f)
            self.metrics.write({"event": "preempted", "step": done, "signal": name})
            print(f"train: {name} received; checkpointed step {done}, exiting with "
                  f"{launched_exit_status(EXIT_PREEMPTED) if 'RANK' in os.environ else EXIT_PREEMPTED}", flush=True)
        self.dist.barrier()
        return EXIT_PREEMPTED


def resume(out_dir, dist):
    """(path, state) of the checkpoint to resume from, (None, None) for a fresh run. Rank 0
    readies the run directory and finds the newest checkpoint that loads; every rank loads it."""
    ckpt_dir = out_dir / CHECKPOINT_DIR
    state, path = None, None
    if dist.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        remove_temp_files(out_dir)
        clean_checkpoint_dir(ckpt_dir)
        path, state = load_latest(ckpt_dir, move_aside=True)
    path = dist.broadcast(str(path) if path else None)
    if path and state is None:
        state = load_checkpoint(path)
    return path, state


def train(cfg, data_dir, out_dir, meta, dist, stop):
    """Run steps until cfg.steps are done or a stop is requested; return the exit status."""
    out_dir = Path(out_dir)
    if cfg.parallel == "fsdp" and not dist.active:
        raise ConfigError("--parallel fsdp shards over ranks started by torch.distributed.run (one rank too: "
                          "--nproc_per_node 1); run it so, or use --parallel ddp")
    resume_path, state = resume(out_dir, dist)
    if state and state["step"] >= cfg.steps:
        if dist.is_main:
            print(f"train: {out_dir} already has {state['step']} steps (--steps {cfg.steps}); nothing to do", flush=True)
            (out_dir / PREEMPTED_MARKER).unlink(missing_ok=True)
        return 0
    run = Training(cfg, data_dir, out_dir, meta, dist, state, resume_path)
    del state  # the checkpoint's tensors are copied into the model and optimizer
    status = 1
    try:
        status = run_steps(run, cfg, stop)
        return status
    except Exception as error:
        record_failure(out_dir / RANK_FAILURES_FILE, run.dist.rank, run.node, getattr(run, "done", run.start_step), error)
        raise
    finally:
        if run.wandb:
            run.wandb.close(status, preempted=status == EXIT_PREEMPTED)


def run_steps(run, cfg, stop):
    """The loop of train(): steps from the run's start until done or stopped; the exit status."""
    vote = StopVote(run.dist)
    run.done = run.start_step
    for step in range(run.start_step, cfg.steps):
        loss_sum = run.step(step)
        done = run.done = step + 1
        stop_signal = vote.after_step(stop.signum)  # a signal on any rank stops every rank after the same step
        finished = done == cfg.steps
        evaluate = finished or (cfg.eval_interval and done % cfg.eval_interval == 0)
        if evaluate or done % cfg.log_interval == 0:
            run.record(done, loss_sum, evaluate)
        if finished:
            vote.settle()  # a stop asked for in the last steps: the run is done anyway
            return run.finish(done)
        if stop_signal:
            vote.settle()
            return run.stop(done, stop_signal)
        if cfg.checkpoint_interval and done % cfg.checkpoint_interval == 0:
            run.checkpoint(done)


def build_parser():
    # the help is the docstring's usage part, not its account of the files
    p = argparse.ArgumentParser(prog="python -m trainer.train", description=__doc__.partition("\nThis file is")[0],
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


if __name__ == "__main__":
    # The imported module's main, not this __main__ copy's: one copy of the loop's classes, so
    # what wraps them on import (the tests' fault injection) applies to a run from the command line.
    from trainer import train as imported
    code = imported.main()
    if "RANK" in os.environ:  # a rank started by torch.distributed.run
        exit_now(launched_exit_status(code) if isinstance(code, int) else 1)
    sys.exit(code)
