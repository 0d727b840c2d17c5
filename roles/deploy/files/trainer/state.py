"""Training state besides the weights: random state, optimizer state, and putting a checkpoint's back.

Owns seeding, every generator's state (python, numpy, torch, CUDA) as a checkpoint holds it,
and the restore of a checkpoint's model and optimizer state into this run's model and
optimizer, whatever either's layout (a .pt of whole tensors or a sharded directory; ddp or
fsdp; any number of ranks), keeping this run's optimizer options over the checkpoint's.
"""

import random

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict, get_state_dict,
                                                     set_optimizer_state_dict, set_state_dict)

from .checkpoint import load_sharded


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


NOT_OPTIONS = ("params", "param_names", "lr")  # what a param group holds besides options; the lr is set every step


def kept_options(optimizer, saved_groups):
    """saved_groups (a checkpoint's param groups) with optimizer's options, and each option
    that differs, once, as "name value (the checkpoint had value)"."""
    differences, groups = {}, []
    for group, saved_group in zip(optimizer.param_groups, saved_groups):
        options = {k: v for k, v in group.items() if k not in NOT_OPTIONS}
        for name, value in options.items():
            if name not in saved_group:
                differences[name, repr(value), None] = f"{name} {value} (the checkpoint did not record it)"
            elif saved_group[name] != value:
                differences[name, repr(value), repr(saved_group[name])] = (f"{name} {value} (the checkpoint had "
                                                                           f"{saved_group[name]})")
        groups.append({**saved_group, **options})
    return groups, list(differences.values())


def load_optimizer_state(optimizer, saved):
    """Load a checkpoint's optimizer state (moments, step counts) into optimizer, keeping
    optimizer's options. load_state_dict alone takes the checkpoint's (its kernel, weight decay,
    betas, eps): a checkpoint made on a CPU would stay unfused on a GPU, and a changed
    --weight-decay would be ignored. Returns the options that differ (kept_options)."""
    groups, differences = kept_options(optimizer, saved["param_groups"])
    # the state is cast as its groups say: a fused optimizer's step counts go to the GPU as float32
    optimizer.load_state_dict({**saved, "param_groups": groups})
    return differences


def load_sharded_state(model, optimizer, path):
    """Load the sharded checkpoint at path into model and optimizer (sharded or plain, on any
    number of ranks: each reads the parts of the tensors it holds), keeping optimizer's options;
    returns the options that differ. Every rank calls it."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    tensors = {"model": model_state, "optimizer": optimizer_state}
    load_sharded(tensors, path)
    groups, differences = kept_options(optimizer, tensors["optimizer"]["param_groups"])
    set_state_dict(model, optimizer, model_state_dict=tensors["model"],
                   optim_state_dict={**tensors["optimizer"], "param_groups": groups})
    return differences


def restore_rng(saved, dist, seed, step):
    """This rank's random state from a checkpoint's (every rank's, in rank order); from a run
    on another number of ranks, reseeded from (seed, rank, step) instead. Returns whether it reseeded."""
    if len(saved) == dist.world_size:
        set_rng_state(saved[dist.rank])
        return False
    seed_everything(seed, dist.rank, step)
    return True


def model_and_optimizer(model, cfg, state=None, sharded_from=None, shard=None):
    """(optimizer, options that differ): cfg's AdamW for model, made after shard(model) where
    shard is given (fsdp: the model and the optimizer made after it hold only shards), and when
    resuming the checkpoint's model and optimizer state loaded into both: `state` a checkpoint
    of whole tensors, or `sharded_from` the path of a sharded one (each rank reads its parts)."""
    full_optimizer_state, changed = None, []
    if state and not sharded_from:
        model.load_state_dict(state["model"])
        if shard:
            # a checkpoint of whole tensors, from a ddp run: loaded as ddp would, then handed
            # to the sharded optimizer by name, each rank keeping its shard
            whole = model.configure_optimizer(cfg.weight_decay, cfg.lr)
            changed = load_optimizer_state(whole, state["optimizer"])
            full_optimizer_state = get_optimizer_state_dict(model, whole)
            del whole
    if shard:
        shard(model)
    optimizer = model.configure_optimizer(cfg.weight_decay, cfg.lr)
    if sharded_from:
        changed = load_sharded_state(model, optimizer, sharded_from)
    elif full_optimizer_state is not None:
        set_optimizer_state_dict(model, optimizer, full_optimizer_state, options=StateDictOptions(full_state_dict=True))
    elif state:
        changed = load_optimizer_state(optimizer, state["optimizer"])
    return optimizer, changed
