"""What the trainer tests share: a tiny corpus, a tiny model, subprocess runners."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from trainer_faults import FAULTS_DIR

FILES_DIR = Path(__file__).resolve().parents[3] / "roles" / "deploy" / "files"

# A model small enough for a step in milliseconds on one CPU core.
TINY_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "dropout": 0.0}
TINY_TRAINING = ["--batch-size", "4", "--warmup", "3", "--lr", "3e-3", "--min-lr", "3e-4",
                 "--eval-interval", "8", "--eval-iters", "2", "--log-interval", "1", "--seed", "7"]
REFERENCE_STEPS = 24


def corpus_text(lines=600):
    """Repetitive Python-like text: easy to learn, so the loss falls within a few dozen steps."""
    return "".join(f"def f{i % 7}(x):\n    return x * {i % 5} + {i % 3}\n\n" for i in range(lines))


def trainer_env(**extra):
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([str(FAULTS_DIR), str(FILES_DIR)]), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_module(module, *args, timeout=90, env=None):
    """Run python -m trainer.<module> ARGS to completion; return the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", f"trainer.{module}", *map(str, args)], cwd=FILES_DIR,
                          env=env or trainer_env(), check=False, capture_output=True, text=True, timeout=timeout)


def start_module(module, *args, env=None):
    return subprocess.Popen([sys.executable, "-m", f"trainer.{module}", *map(str, args)], cwd=FILES_DIR,
                            env=env or trainer_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_metrics(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def losses(records):
    """{step: loss} of the loss records."""
    return {r["step"]: r["loss"] for r in records if "loss" in r}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_argv(nproc, *args):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), "-m", "trainer.train", *map(str, args)]


def torchrun(nproc, *args, env=None):
    return subprocess.run(torchrun_argv(nproc, *args), cwd=FILES_DIR, env=env or trainer_env(), check=False,
                          capture_output=True, text=True, timeout=120)


def worker_pid(launcher_pid, rank):
    """The pid of the launcher's worker process with this RANK, read from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            environ = (stat.parent / "environ").read_bytes().split(b"\0") if ppid == launcher_pid else []
        except (OSError, ValueError, IndexError):
            continue
        if f"RANK={rank}".encode() in environ:
            return int(stat.parent.name)
    return None
