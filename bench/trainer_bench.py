"""CPU throughput and peak memory of trainer.train against a bare PyTorch loop.

Both train the same GPT (trainer.model) with the same AdamW, batch and window sampling
cost, on the same prepared bytes, in fresh processes with the same thread count. The
difference is what the trainer adds: its config, metrics, stop checks, LR schedule and
data sampler. Each side runs --repeats times, alternating, and keeps its best run.

    python bench/trainer_bench.py                     # text table
    python bench/trainer_bench.py --format markdown   # a table for docs/benchmarks.md
    python bench/trainer_bench.py --format json --check   # exit 1 if overhead > --max-overhead
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILES_DIR = Path(__file__).resolve().parents[1] / "roles" / "deploy" / "files"
MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}


def bare_loop(data_dir, steps, warmup_steps, batch_size):
    """The loop every PyTorch tutorial writes; prints tokens/s after the warmup steps as JSON."""
    sys.path.insert(0, str(FILES_DIR))
    import numpy as np
    import torch

    from trainer.data import windows
    from trainer.model import GPT, GPTConfig

    meta = json.loads((Path(data_dir) / "meta.json").read_text())
    tokens = np.memmap(Path(data_dir) / "train.bin", dtype=meta["dtype"], mode="r")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=meta["vocab_size"], **MODEL))
    optimizer = model.configure_optimizer(weight_decay=0.1, lr=1e-3, device_type="cpu")
    T = MODEL["block_size"]
    for step in range(steps):
        if step == warmup_steps:
            started = time.perf_counter()
        x, y = windows(tokens, torch.randint(len(tokens) - T, (batch_size,)), T)
        _logits, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()
    seconds = time.perf_counter() - started
    print(json.dumps({"tokens_per_s": (steps - warmup_steps) * batch_size * T / seconds}))


def run_measured(argv, env):
    """Run argv to completion; return (stdout, peak RSS in MiB of that process)."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, cwd=FILES_DIR, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.read()}")
        out.seek(0)
        return out.read(), usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def trainer_run(data_dir, out_dir, args, env):
    argv = [sys.executable, "-m", "trainer.train", "--data", str(data_dir), "--out", str(out_dir),
            "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--warmup", "10",
            "--log-interval", str(args.warmup_steps), "--eval-interval", "0", "--eval-iters", "1",
            "--checkpoint-interval", "0"] + [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()]
    _stdout, rss = run_measured(argv, env)
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    timed = {r["step"]: r["elapsed_s"] for r in records if "loss" in r}
    tokens_per_step = args.batch_size * MODEL["block_size"]
    # the same window as the bare loop: from the end of the warmup steps to the last step
    seconds = timed[args.steps] - timed[args.warmup_steps]
    return (args.steps - args.warmup_steps) * tokens_per_step / seconds, rss


def bare_run(data_dir, args, env):
    argv = [sys.executable, str(Path(__file__).resolve()), "--bare", str(data_dir), "--steps", str(args.steps),
            "--warmup-steps", str(args.warmup_steps), "--batch-size", str(args.batch_size)]
    out, rss = run_measured(argv, env)
    return json.loads(out)["tokens_per_s"], rss


def measure(args):
    threads = str(args.threads)
    env = dict(os.environ, PYTHONPATH=str(FILES_DIR), OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        subprocess.run([sys.executable, "-m", "trainer.prepare", "--out", str(data_dir), "--max-bytes", "4000000"],
                       cwd=FILES_DIR, env=env, check=True, capture_output=True)
        results = {"trainer": [], "bare": []}
        for i in range(args.repeats):
            results["bare"].append(bare_run(data_dir, args, env))
            results["trainer"].append(trainer_run(data_dir, Path(tmp) / f"run{i}", args, env))
    best = {name: max(runs) for name, runs in results.items()}  # (tokens/s, rss) of the fastest run
    overhead = 1.0 - best["trainer"][0] / best["bare"][0]
    return {
        "model": MODEL, "batch_size": args.batch_size, "steps": args.steps, "timed_steps": args.steps - args.warmup_steps,
        "threads": args.threads, "repeats": args.repeats,
        "trainer_tokens_per_s": round(best["trainer"][0]), "bare_tokens_per_s": round(best["bare"][0]),
        "trainer_peak_rss_mib": round(max(r for _tokens, r in results["trainer"]), 1),
        "bare_peak_rss_mib": round(max(r for _tokens, r in results["bare"]), 1),
        "overhead": round(overhead, 4), "max_overhead": args.max_overhead,
    }


def render(result, fmt):
    if fmt == "json":
        return json.dumps(result, indent=2)
    rows = [("bare PyTorch loop", result["bare_tokens_per_s"], result["bare_peak_rss_mib"]),
            ("trainer.train", result["trainer_tokens_per_s"], result["trainer_peak_rss_mib"])]
    shape = ", ".join(f"{k}={v}" for k, v in result["model"].items())
    caption = (f"CPU, {result['threads']} thread(s), 1 rank; GPT {shape}; batch {result['batch_size']}; "
               f"best of {result['repeats']} runs of {result['timed_steps']} timed steps")
    if fmt == "markdown":
        lines = [f"{caption}.", "", "| loop | tokens/s | peak RSS per rank (MiB) |", "|---|---:|---:|"]
        lines += [f"| {name} | {tps:,} | {rss} |" for name, tps, rss in rows]
        lines += ["", f"Trainer overhead: {result['overhead']:.1%} (limit {result['max_overhead']:.0%})."]
        return "\n".join(lines)
    lines = [caption] + [f"  {name:<18} {tps:>10,} tokens/s   peak RSS {rss:>7} MiB" for name, tps, rss in rows]
    lines.append(f"  trainer overhead   {result['overhead']:.1%} (limit {result['max_overhead']:.0%})")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup-steps", type=int, default=10, help="steps not timed (allocator and cache warmup)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-overhead", type=float, default=0.05)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--check", action="store_true", help="exit 1 when the overhead exceeds --max-overhead")
    p.add_argument("--bare", metavar="DATA_DIR", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps % args.warmup_steps or args.steps <= args.warmup_steps:
        p.error("--steps must be a multiple of --warmup-steps and larger (the trainer logs every --warmup-steps)")
    if args.bare:
        bare_loop(args.bare, args.steps, args.warmup_steps, args.batch_size)
        return 0
    result = measure(args)
    print(render(result, args.format))
    return 1 if args.check and result["overhead"] > args.max_overhead else 0


if __name__ == "__main__":
    sys.exit(main())
