"""Batches of token windows from a directory that trainer.prepare wrote."""

import numpy as np
import torch

from .prepare import token_file

# Independent random streams of window positions, one per split.
TRAIN_STREAM, VAL_STREAM = 0, 1


def open_tokens(data_dir, meta, split):
    """The tokens of one split as a read-only memmap (nothing is read until indexed)."""
    if meta[f"{split}_tokens"] == 0:
        return np.zeros(0, dtype=meta["dtype"])
    return np.memmap(token_file(data_dir, split), dtype=meta["dtype"], mode="r")


def window_starts(n_tokens, block_size, seed, stream, step, shape):
    """Start offsets of random windows, a pure function of (seed, stream, step).

    Every rank draws the same global batch and takes its own slice, so the data a run
    sees depends on the step and the global batch only: resuming needs no sampler
    state, and N ranks with batch b see the windows that 1 rank with batch N*b sees.
    """
    seed_int = int(np.random.SeedSequence([seed, stream, step]).generate_state(1, np.uint64)[0])
    generator = torch.Generator().manual_seed(seed_int)
    return torch.randint(n_tokens - block_size, shape, generator=generator)


def windows(tokens, starts, block_size):
    """Inputs and next-token targets, each (len(starts), block_size) int64, for the windows at starts."""
    index = starts.numpy()[:, None] + np.arange(block_size + 1)
    chunk = torch.from_numpy(tokens[index].astype(np.int64))
    return chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()
