"""Faults for the tests, wrapped around the trainer's named steps (and the network check's pair
measurement): neither ever reads these.

TRAINER_FAULT_STEP_PAUSE_S  seconds to sleep before each step, so that a signal lands mid-run
TRAINER_FAULT_CRASH         RANK:STEP[:first]: that rank raises after step STEP, as a bug would;
                            with :first, only before torch.distributed.run restarted the ranks
                            (TORCHELASTIC_RESTART_COUNT 0), as a transient fault would
TRAINER_FAULT_SLOW_NODE     NODE:SECONDS: the ranks on that node sleep that much more before each
                            step, as on a node that computes slower than the others
TRAINER_FAULT_CHECKPOINT_WRITE_PAUSE_S  seconds each checkpoint write pauses after its first
                            bytes, half-written on disk, so that a kill lands in it
TRAINER_FAULT_NETWORK_SLOW_ONCE  NODE:SECONDS: in the network check (llmtrain_node.network_check),
                            every all-reduce of that node's ranks waits SECONDS first during the
                            first measurement of the ring-neighbour pairs only, as a passing
                            load on a healthy node would

A process with this directory on PYTHONPATH loads sitecustomize.py, which calls
install_on_import(): the trainer's modules are wrapped as they are imported.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import time
from contextlib import contextmanager
from functools import wraps
from pathlib import Path

FAULTS_DIR = Path(__file__).resolve().parent
STEP_PAUSE_ENV = "TRAINER_FAULT_STEP_PAUSE_S"
CRASH_ENV = "TRAINER_FAULT_CRASH"
SLOW_NODE_ENV = "TRAINER_FAULT_SLOW_NODE"
WRITE_PAUSE_ENV = "TRAINER_FAULT_CHECKPOINT_WRITE_PAUSE_S"
NETWORK_SLOW_ONCE_ENV = "TRAINER_FAULT_NETWORK_SLOW_ONCE"
ENVS = (STEP_PAUSE_ENV, CRASH_ENV, SLOW_NODE_ENV, WRITE_PAUSE_ENV, NETWORK_SLOW_ONCE_ENV)
WRAPPED = ("trainer.train", "trainer.checkpoint", "llmtrain_node.network_check")


def faulty_step(step, pause_s=0.0, crash="", slow_node=""):
    """Training.step that sleeps pause_s first (and SECONDS more on node NODE when slow_node is
    "NODE:SECONDS"), and raises on rank R before the step after STEP when crash is "R:STEP" (so
    step STEP is logged and checkpointed as usual)."""
    crash_rank, crash_step, when = (crash + "::").split(":")[:3]
    if when == "first" and int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0) > 0:
        crash_step = ""
    slow_name, slow_s = (slow_node.rsplit(":", 1) + ["0"])[:2] if slow_node else ("", "0")

    @wraps(step)
    def wrapper(training, index):
        if crash_step and int(crash_rank) == training.dist.rank and int(crash_step) == index:
            raise RuntimeError(f"fault injected by {CRASH_ENV}={crash_rank}:{crash_step} on rank {training.dist.rank}")
        if pause_s:
            time.sleep(pause_s)
        if slow_name and training.node == slow_name:
            time.sleep(float(slow_s))
        return step(training, index)

    return wrapper


class PausedWriter:
    """A file that pauses after its first write, half-written on disk."""

    def __init__(self, file, seconds):
        self.file, self.seconds, self.paused = file, seconds, False

    def write(self, data):
        written = self.file.write(data)
        if not self.paused:
            self.paused = True
            self.file.flush()
            time.sleep(self.seconds)
        return written

    def flush(self):
        self.file.flush()


def paused_atomic_file(atomic_file, seconds):
    """checkpoint.py's atomic_file, its file a PausedWriter."""

    @contextmanager
    def wrapper(path, mode="wb"):
        with atomic_file(path, mode) as f:
            yield PausedWriter(f, seconds)

    return wrapper


def slow_pairs_once(measure_pairs, slow_once, node):
    """network_check.measure_pairs whose first call, on node NODE of slow_once "NODE:SECONDS",
    makes each of the rank's all-reduces wait SECONDS first (inside the timing)."""
    slow_name, slow_s = slow_once.rsplit(":", 1)
    calls = []

    @wraps(measure_pairs)
    def wrapper(dist, *args, **kwargs):
        calls.append(1)
        if node != slow_name or len(calls) > 1:
            return measure_pairs(dist, *args, **kwargs)
        all_reduce = dist.all_reduce

        def late_all_reduce(*a, **k):
            time.sleep(float(slow_s))
            return all_reduce(*a, **k)

        dist.all_reduce = late_all_reduce
        try:
            return measure_pairs(dist, *args, **kwargs)
        finally:
            dist.all_reduce = all_reduce

    return wrapper


def wrap(module, environ):
    """Wrap what the fault variables in environ ask for in trainer.train, trainer.checkpoint or
    llmtrain_node.network_check (imported by that name: `python -m` runs it as __main__, unwrapped)."""
    if module.__name__ == "trainer.train" and any(name in environ for name in (STEP_PAUSE_ENV, CRASH_ENV, SLOW_NODE_ENV)):
        module.Training.step = faulty_step(module.Training.step, float(environ.get(STEP_PAUSE_ENV, "0")),
                                           environ.get(CRASH_ENV, ""), environ.get(SLOW_NODE_ENV, ""))
    if module.__name__ == "trainer.checkpoint" and float(environ.get(WRITE_PAUSE_ENV, "0")):
        module.atomic_file = paused_atomic_file(module.atomic_file, float(environ[WRITE_PAUSE_ENV]))
    if module.__name__ == "llmtrain_node.network_check" and environ.get(NETWORK_SLOW_ONCE_ENV):
        module.measure_pairs = slow_pairs_once(module.measure_pairs, environ[NETWORK_SLOW_ONCE_ENV],
                                               environ.get("SLURMD_NODENAME", ""))


class WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds the trainer's modules as the path finder does; wraps each once it has run."""

    def __init__(self, environ):
        self.environ = environ

    def find_spec(self, name, path, target=None):
        if name not in WRAPPED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            wrap(module, self.environ)

        spec.loader.exec_module = exec_and_wrap
        return spec


def install_on_import(environ=None):
    environ = dict(os.environ if environ is None else environ)
    if any(name in environ for name in ENVS):
        sys.meta_path.insert(0, WrapOnImport(environ))
