"""A GPT training loop written the way popular public trainers write theirs: plain variables for
the config, a get_batch() that opens the token file each call and stacks slices, the cosine
learning rate set on every step, loss.item() only when logging, AdamW and gradient clipping
with torch's defaults. It trains the trainer's own model (trainer.model.GPT), so what differs
from trainer.train is the loop. bench/trainer_bench.py runs it as its reference:

    python bench/public_loop.py DATA_DIR --steps 80 --warmup-steps 10 --batch-size 16

prints {"tokens_per_s": ...} over the steps after the warmup steps.
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "roles" / "deploy" / "files"))
from trainer.model import GPT, GPTConfig  # noqa: E402  pylint: disable=wrong-import-position

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}


def get_batch(data_dir, dtype, batch_size, block_size):
    # a new memmap per batch, as these trainers do (it avoids a leak they once saw)
    data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=dtype, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x, y


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("data_dir")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup-steps", type=int, default=10, help="steps not timed")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--bias", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args(argv)

    data_dir, batch_size, block_size = args.data_dir, args.batch_size, MODEL["block_size"]
    learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 10, args.steps
    log_interval, grad_clip = args.warmup_steps, 1.0
    meta = json.loads((Path(data_dir) / "meta.json").read_text())

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)

    torch.manual_seed(1337)
    model = GPT(GPTConfig(vocab_size=meta["vocab_size"], bias=args.bias, **MODEL))
    # the optimizer as these trainers make it: decay for matrices, fused only on CUDA
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=learning_rate, betas=(0.9, 0.95), fused=False)
    model.train()
    X, Y = get_batch(data_dir, meta["dtype"], batch_size, block_size)
    started = None
    for iter_num in range(args.steps + 1):
        if iter_num == args.warmup_steps:
            started = time.perf_counter()
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num == args.steps:
            break
        _logits, loss = model(X, Y)
        # the next batch while (on a GPU) this one's backward would still run
        X, Y = get_batch(data_dir, meta["dtype"], batch_size, block_size)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if iter_num % log_interval == 0:
            lossf = loss.item()
            print(f"iter {iter_num}: loss {lossf:.4f}", file=sys.stderr)
    seconds = time.perf_counter() - started
    print(json.dumps({"tokens_per_s": (args.steps - args.warmup_steps) * batch_size * block_size / seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
