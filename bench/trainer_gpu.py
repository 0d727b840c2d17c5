"""GPU throughput and MFU of trainer.train at the GPT-2 small (124M) shape, bf16, torch.compile.

Runs the trainer itself (one process per GPU under torch.distributed.run when --gpus > 1)
on random tokens with GPT-2's padded vocabulary, and reports the steady-state tokens/s
and MFU from its metrics.jsonl. Without a CUDA device it says so and exits 0.

    python bench/trainer_gpu.py                  # all GPUs of this machine
    python bench/trainer_gpu.py --gpus 1 --format json
    python bench/trainer_gpu.py --smoke          # a tiny model, any device: checks the script itself
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

FILES_DIR = Path(__file__).resolve().parents[1] / "roles" / "deploy" / "files"
GPT2_SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024}
SMOKE = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 64, as nanoGPT does


def write_random_tokens(data_dir, n_tokens, vocab):
    """A prepared data directory (trainer.prepare's format) of uniformly random uint16 tokens."""
    data_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_tokens), ("val", n_tokens // 10)):
        rng.integers(0, vocab, n, dtype=np.uint16).tofile(data_dir / f"{split}.bin")
    meta = {"format": 1, "tokenizer": "random", "vocab_size": vocab, "dtype": "uint16",
            "train_tokens": n_tokens, "val_tokens": n_tokens // 10}
    (data_dir / "meta.json").write_text(json.dumps(meta))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count(), help="ranks, one per GPU")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--skip-steps", type=int, default=20, help="first steps left out (compilation, warmup)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per GPU per micro-step")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--smoke", action="store_true", help="tiny model on whatever device there is")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    args = p.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("trainer_gpu: no CUDA device here; skipped (run it on a GPU node, or with --smoke)")
        return 0
    shape = SMOKE if args.smoke else GPT2_SMALL
    cuda = torch.cuda.is_available()
    gpus = max(1, args.gpus) if cuda else 1
    dtype = "bfloat16" if cuda else "float32"
    log_interval = 10

    with tempfile.TemporaryDirectory() as tmp:
        data_dir, out_dir = Path(tmp) / "data", Path(tmp) / "run"
        write_random_tokens(data_dir, 1 << 22 if args.smoke else 1 << 27, 256 if args.smoke else VOCAB)
        launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus)]
                    if gpus > 1 else [sys.executable])
        argv = launcher + ["-m", "trainer.train", "--data", str(data_dir), "--out", str(out_dir),
                           "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--warmup", "10",
                           "--log-interval", str(log_interval), "--eval-interval", "0", "--eval-iters", "1",
                           "--checkpoint-interval", "0", "--dtype", dtype,
                           "--compile" if args.compile and not args.smoke else "--no-compile"]
        argv += [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
        env = dict(os.environ, PYTHONPATH=str(FILES_DIR))
        subprocess.run(argv, cwd=FILES_DIR, env=env, check=True)
        records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]

    steady = [r for r in records if "loss" in r and r["step"] > args.skip_steps]
    if not steady:
        p.error(f"no metrics after step {args.skip_steps}; raise --steps")
    mfus = [r["mfu"] for r in steady if r.get("mfu") is not None]
    result = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "gpus": gpus, "model": shape, "vocab_size": 256 if args.smoke else VOCAB,
        "batch_size_per_gpu": args.batch_size, "compile": args.compile and not args.smoke, "dtype": dtype,
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in steady)),
        "mfu": round(statistics.median(mfus), 4) if mfus else None,
        "final_loss": steady[-1]["loss"],
    }
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        mfu = (f"{result['mfu']:.1%}" if result["mfu"] is not None
               else "n/a (GPU not in the peak-FLOPs table)" if cuda else "n/a (no GPU)")
        what = (f"{result['gpus']} x {result['device']}, GPT {', '.join(f'{k}={v}' for k, v in shape.items())}, "
                f"batch {args.batch_size}/GPU, compile={result['compile']}")
        if args.format == "markdown":
            print(f"| {what} | {result['tokens_per_s']:,} tokens/s | MFU {mfu} |")
        else:
            print(f"{what}\n  {result['tokens_per_s']:,} tokens/s, MFU {mfu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
