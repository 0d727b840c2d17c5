"""Checkpoints: written atomically, the newest K kept, the newest loadable one found.

A checkpoint is ``<run>/checkpoints/step_NNNNNN.pt``, a dict saved with torch.save that
loads with ``weights_only=True`` (tensors, numbers, strings, lists, dicts only).
"""

import errno
import os
import pickle
import re
import sys
import time
import zipfile
from pathlib import Path

import torch

from .fsio import atomic_file, remove_temp_files

CHECKPOINT_DIR = "checkpoints"
FORMAT = 1
REQUIRED_KEYS = ("format", "step", "model", "model_config")
NAME = re.compile(r"^step_(\d+)\.pt$")
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile
BAD_SUFFIX = ".bad"
# Seconds between attempts to read a checkpoint: a shared file system's errors (EIO, ESTALE)
# often pass, and a file they hide must not be taken for a corrupt one.
READ_RETRY_DELAYS_S = (1.0, 3.0)
# What torch.load raises for a truncated or garbled file. A truncated zip makes its reader
# seek before the file's start: OSError EINVAL (ValueError from a buffer).
CORRUPT_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, zipfile.BadZipFile)
STREAM_READER_ERROR = "PytorchStreamReader failed"


class CheckpointError(RuntimeError):
    pass


class CorruptCheckpoint(CheckpointError):
    """A checkpoint file that was read but does not deserialize: no retry makes it load."""


def checkpoint_path(ckpt_dir, step):
    return Path(ckpt_dir) / f"step_{step:06d}.pt"


def list_checkpoints(ckpt_dir):
    """[(step, path)] of the checkpoints in ckpt_dir, oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), ckpt_dir / m.group(0)) for m in map(NAME.match, os.listdir(ckpt_dir)) if m]
    return sorted(found)


def strip_wrapper_prefixes(state_dict):
    """Model state dict keys as an unwrapped model names them."""
    clean = {}
    for key, value in state_dict.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        clean[key] = value
    return clean


def save_checkpoint(state, ckpt_dir, keep):
    """Write state as the checkpoint of state["step"]; keep the newest `keep` up to it.

    Checkpoints numbered after it are never removed: resume starts from the newest one
    that loads, so any after it are ones a user put back, or the work of another writer.
    """
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    step = state["step"]
    path = checkpoint_path(ckpt_dir, step)
    with atomic_file(path) as f:
        torch.save(state, f)
    older = [p for s, p in list_checkpoints(ckpt_dir) if s <= step]
    for old in older[:-keep]:
        old.unlink(missing_ok=True)
    return path


def is_corruption(error):
    """Whether torch.load's error means the file's bytes are wrong (truncated, garbled),
    not that they could not be read or held (EIO, ESTALE, out of memory)."""
    if isinstance(error, OSError):
        return error.errno == errno.EINVAL
    if isinstance(error, RuntimeError):
        return STREAM_READER_ERROR in str(error)
    return isinstance(error, CORRUPT_ERRORS)


def read_state(path):
    """torch.load of path, on the CPU. A read error is retried after each of
    READ_RETRY_DELAYS_S, then raised as CheckpointError; corrupt bytes raise CorruptCheckpoint."""
    for attempt, delay in enumerate((*READ_RETRY_DELAYS_S, None), start=1):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # sorted below: corrupt bytes, a read error to retry, anything else
            if is_corruption(e):
                raise CorruptCheckpoint(f"{path} does not load ({type(e).__name__}: {e})") from e
            if not isinstance(e, OSError):
                raise
            if delay is None:
                raise CheckpointError(f"{path} could not be read ({type(e).__name__}: {e}, {attempt} attempts); "
                                      "nothing was moved or removed: run again once the file system answers") from e
            print(f"warning: reading {path} failed ({type(e).__name__}: {e}); trying again in {delay:g} s",
                  file=sys.stderr, flush=True)
            time.sleep(delay)


def load_checkpoint(path):
    """The checkpoint at path, on the CPU; raises CorruptCheckpoint if it is not a checkpoint."""
    state = read_state(path)
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise CorruptCheckpoint(f"{path} is not a trainer checkpoint")
    if state["format"] != FORMAT:
        raise CheckpointError(f"{path} has format {state['format']}, this trainer reads format {FORMAT}")
    state["model"] = strip_wrapper_prefixes(state["model"])
    return state


def load_latest(ckpt_dir, move_aside=False):
    """(path, state) of the newest checkpoint that loads, or (None, None) when there is none.

    A corrupt checkpoint (truncated, garbled) is skipped with a warning in favour of the one
    before it, and with move_aside renamed to *.bad, out of the listing and of keep-K; if none
    loads that is an error, not a fresh start. Any other error (a read error that persists,
    no memory) is raised: the newer checkpoints may well be fine.
    """
    ckpt_dir = Path(ckpt_dir)
    candidates = list_checkpoints(ckpt_dir)
    moved_before = list(ckpt_dir.glob(f"step_*.pt{BAD_SUFFIX}")) if ckpt_dir.is_dir() else []
    for _step, path in reversed(candidates):
        try:
            return path, load_checkpoint(path)
        except CorruptCheckpoint as e:
            aside = ""
            if move_aside:
                path.rename(path.with_name(path.name + BAD_SUFFIX))
                aside = f"; moved to {path.name}{BAD_SUFFIX}"
            print(f"warning: checkpoint {e}{aside}; trying the previous one", file=sys.stderr, flush=True)
    if candidates or moved_before:
        raise CheckpointError(f"none of the {len(candidates) + len(moved_before)} checkpoints in {ckpt_dir} loads; "
                              "move them away to start the run from scratch")
    return None, None


def find_checkpoint(path):
    """(path, state) for a checkpoint file, a checkpoints directory, or a run directory."""
    path = Path(path)
    if path.is_file():
        return path, load_checkpoint(path)
    if not path.is_dir():
        raise CheckpointError(f"--checkpoint {path}: no such file or directory")
    ckpt_dir = path / CHECKPOINT_DIR if (path / CHECKPOINT_DIR).is_dir() else path
    found, state = load_latest(ckpt_dir)
    if found is None:
        raise CheckpointError(f"--checkpoint {path}: no checkpoints (step_*.pt) in {ckpt_dir}")
    return found, state


def clean_checkpoint_dir(ckpt_dir):
    """Remove partial checkpoints left by a process killed while writing one."""
    if Path(ckpt_dir).is_dir():
        for name in remove_temp_files(ckpt_dir):
            print(f"removed partial checkpoint {name}", file=sys.stderr, flush=True)
