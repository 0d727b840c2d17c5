"""Checkpoints: written atomically, the newest K kept, the newest loadable one found.

A checkpoint is ``<run>/checkpoints/step_NNNNNN.pt``, a dict saved with torch.save that
loads with ``weights_only=True`` (tensors, numbers, strings, lists, dicts only).
"""

import os
import re
import sys
from pathlib import Path

import torch

from .fsio import atomic_file, remove_temp_files

CHECKPOINT_DIR = "checkpoints"
FORMAT = 1
REQUIRED_KEYS = ("format", "step", "model", "model_config")
NAME = re.compile(r"^step_(\d+)\.pt$")
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile


class CheckpointError(RuntimeError):
    pass


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

    Checkpoints numbered after it belong to a trajectory that was abandoned because they
    did not load, so they go too.
    """
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    step = state["step"]
    path = checkpoint_path(ckpt_dir, step)
    with atomic_file(path) as f:
        torch.save(state, f)
    existing = list_checkpoints(ckpt_dir)
    older = [p for s, p in existing if s <= step]
    stale = [p for s, p in existing if s > step]
    for old in older[:-keep] + stale:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path):
    """The checkpoint at path, on the CPU; raises if it is unreadable or not a checkpoint."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise CheckpointError(f"{path} is not a trainer checkpoint")
    if state["format"] != FORMAT:
        raise CheckpointError(f"{path} has format {state['format']}, this trainer reads format {FORMAT}")
    state["model"] = strip_wrapper_prefixes(state["model"])
    return state


def load_latest(ckpt_dir):
    """(path, state) of the newest checkpoint that loads, or (None, None) when there is none.

    A checkpoint that does not load (truncated, corrupt) is skipped with a warning in
    favour of the one before it; if none loads that is an error, not a fresh start.
    """
    candidates = list_checkpoints(ckpt_dir)
    for _step, path in reversed(candidates):
        try:
            return path, load_checkpoint(path)
        except Exception as e:  # any failure to read means: fall back to the previous checkpoint
            print(f"warning: checkpoint {path} does not load ({type(e).__name__}: {e}); trying the previous one",
                  file=sys.stderr, flush=True)
    if candidates:
        raise CheckpointError(f"none of the {len(candidates)} checkpoints in {ckpt_dir} loads; "
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
