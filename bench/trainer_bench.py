"""CPU throughput and peak memory of trainer.train against a public-style GPT loop.

The reference, bench/public_loop.py, is a loop written the way popular public trainers write
theirs (its own get_batch that stacks slices of a fresh memmap, loss.item() only when
logging). Both train the same model (trainer.model.GPT) on the same prepared bytes, in
fresh processes with the same thread count; the difference is the loop and its data path.
They run in alternating pairs (which of the two goes first alternates too), and the figures
are medians with their range over the pairs, never the best run.

    python bench/trainer_bench.py                     # text table
    python bench/trainer_bench.py --format markdown   # a table for docs/benchmarks.md
    python bench/trainer_bench.py --format json --check   # exit 1 if the trainer is below --min-ratio
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
FILES_DIR = BENCH_DIR.parent / "roles" / "deploy" / "files"
MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128}

# What profiling the trainer's step against the public loop's found, and what changed.
REMOVED = [
    "AdamW and gradient clipping a parameter at a time off CUDA (torch's default there): the trainer "
    "now uses the multi-tensor (foreach) kernels on CPU, the fused AdamW on CUDA, and a resumed run keeps "
    "this run's kernel instead of the one its checkpoint recorded",
    "nothing else in the loop: its data path (one seeded draw of window starts, one gather from a memmap "
    "opened once) costs tens of microseconds a step where the public loop's per-window slicing of a fresh "
    "memmap costs a few hundred, and the stop check is no collective in one process",
]


def step_pairs(data_dir, blocks, steps):
    """In one process, on one model and optimizer: trainer.train's Training.step against the
    public loop's step, in alternating blocks -> ms per step of each block. Process-wide
    effects (start-up, memory layout) are out, so this is the loop's own cost."""
    sys.path.insert(0, str(FILES_DIR))
    import numpy as np
    import torch

    from trainer import train as trainer_train
    from trainer.config import TrainConfig
    from trainer.prepare import read_meta

    meta = read_meta(data_dir)
    cfg = TrainConfig(steps=10 ** 6, batch_size=16, warmup=10, eval_interval=0, checkpoint_interval=0, **MODEL)
    with tempfile.TemporaryDirectory() as out:
        run = trainer_train.Training(cfg, data_dir, Path(out), meta, trainer_train.Distributed(), None, None)
        model, optimizer, data, T = run.raw_model, run.optimizer, run.train_tokens, MODEL["block_size"]

        def public_step(_step):
            ix = torch.randint(len(data) - T, (cfg.batch_size,))
            x = torch.stack([torch.from_numpy(data[i:i + T].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + T].astype(np.int64)) for i in ix])
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr
            _logits, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        times = {"trainer": [], "public": []}
        for block in range(blocks):
            order = [("trainer", run.step), ("public", public_step)]
            for name, step in (order if block % 2 == 0 else order[::-1]):
                step(0)  # one untimed step after the switch
                started = time.perf_counter()
                for i in range(steps):
                    step(i)
                times[name].append((time.perf_counter() - started) / steps * 1e3)
    print(json.dumps(times))


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


def trainer_run(data_dir, out_dir, args, env, extra=()):
    argv = [sys.executable, "-m", "trainer.train", "--data", str(data_dir), "--out", str(out_dir),
            "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--warmup", "10",
            "--log-interval", str(args.warmup_steps), "--eval-interval", "0", "--eval-iters", "1",
            "--checkpoint-interval", "0"] + [f"--{k.replace('_', '-')}={v}" for k, v in MODEL.items()] + list(extra)
    _stdout, rss = run_measured(argv, env)
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    timed = {r["step"]: r["elapsed_s"] for r in records if "loss" in r}
    tokens_per_step = args.batch_size * MODEL["block_size"]
    # the public loop's window: from the end of the warmup steps to the last step
    seconds = timed[args.steps] - timed[args.warmup_steps]
    return (args.steps - args.warmup_steps) * tokens_per_step / seconds, rss


def public_run(data_dir, args, env):
    argv = [sys.executable, str(BENCH_DIR / "public_loop.py"), str(data_dir), "--steps", str(args.steps),
            "--warmup-steps", str(args.warmup_steps), "--batch-size", str(args.batch_size)]
    out, rss = run_measured(argv, env)
    return json.loads(out)["tokens_per_s"], rss


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(args):
    threads = str(args.threads)
    env = dict(os.environ, PYTHONPATH=str(FILES_DIR), OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        subprocess.run([sys.executable, "-m", "trainer.prepare", "--out", str(data_dir), "--max-bytes", "4000000"],
                       cwd=FILES_DIR, env=env, check=True, capture_output=True)
        runs = {"trainer": [], "public": [], "trainer_no_bias": []}
        for i in range(args.pairs):
            pair = [("public", lambda: public_run(data_dir, args, env)),
                    ("trainer", lambda i=i: trainer_run(data_dir, Path(tmp) / f"run{i}", args, env))]
            for name, run in (pair if i % 2 == 0 else pair[::-1]):
                runs[name].append(run())
            runs["trainer_no_bias"].append(trainer_run(data_dir, Path(tmp) / f"nobias{i}", args, env, ["--no-bias"]))
            print(f"pair {i + 1}: trainer {runs['trainer'][-1][0]:,.0f}, public loop {runs['public'][-1][0]:,.0f} "
                  f"tokens/s", file=sys.stderr, flush=True)
        out, _rss = run_measured([sys.executable, str(Path(__file__).resolve()), "--step-pairs", str(data_dir),
                                  "--pairs", str(args.pairs)], env)
        steps = json.loads(out.strip().splitlines()[-1])  # (after the trainer's start line)
    ratios = [t[0] / p[0] for t, p in zip(runs["trainer"], runs["public"])]
    return {
        "model": MODEL, "batch_size": args.batch_size, "steps": args.steps, "timed_steps": args.steps - args.warmup_steps,
        "threads": args.threads, "pairs": args.pairs,
        "tokens_per_s": {name: spread([r[0] for r in rs]) for name, rs in runs.items()},
        "peak_rss_mib": {name: round(max(r[1] for r in rs), 1) for name, rs in runs.items()},
        "ratio": spread(ratios), "min_ratio": args.min_ratio, "removed": REMOVED,
        "step_ms": {name: spread(ms) for name, ms in steps.items()},
        "step_ratio": spread([p / t for t, p in zip(steps["trainer"], steps["public"])]),
    }


def fmt(s, digits=0, unit=""):
    return f"{s['median']:,.{digits}f}{unit} (min {s['min']:,.{digits}f}, max {s['max']:,.{digits}f}, n={s['n']})"


def render(result, form):
    if form == "json":
        return json.dumps(result, indent=2)
    tps, rss = result["tokens_per_s"], result["peak_rss_mib"]
    rows = [("public-style loop (bench/public_loop.py)", "public"), ("trainer.train", "trainer"),
            ("trainer.train --no-bias", "trainer_no_bias")]
    shape = ", ".join(f"{k}={v}" for k, v in result["model"].items())
    caption = (f"CPU, {result['threads']} thread(s), 1 rank, fp32, no compile; GPT {shape}, vocabulary 256; "
               f"batch {result['batch_size']}; {result['timed_steps']} timed steps after "
               f"{result['steps'] - result['timed_steps']}; medians of {result['pairs']} alternating pairs")
    ratio = result["ratio"]
    verdict = "met" if ratio["median"] >= result["min_ratio"] else f"missed by {result['min_ratio'] - ratio['median']:.1%}"
    summary = f"trainer / public-style loop, per pair: {fmt(ratio, 3)} (target >= {result['min_ratio']}: {verdict})"
    ms = result["step_ms"]
    in_process = (f"In one process, on one model and optimizer, in alternating blocks of 20 steps: trainer.train's "
                  f"step {fmt(ms['trainer'], 1, ' ms')}, the public loop's {fmt(ms['public'], 1, ' ms')}; "
                  f"speed ratio {fmt(result['step_ratio'], 3)}. The loop's own cost; the runs above add "
                  f"process start-up, memory layout and the machine's noise.")
    if form == "markdown":
        lines = [f"{caption}.", "", "| loop | tokens/s | peak RSS per rank (MiB) |", "|---|---|---:|"]
        lines += [f"| {label} | {fmt(tps[key])} | {rss[key]} |" for label, key in rows]
        lines += ["", summary[0].upper() + summary[1:] + ".", "", in_process, "", "Found and changed:", ""]
        lines += [f"- {item}" for item in result["removed"]]
        return "\n".join(lines)
    lines = [caption] + [f"  {label:<42} {fmt(tps[key])} tokens/s   peak RSS {rss[key]:>7} MiB" for label, key in rows]
    lines += ["  " + summary, "  " + in_process]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup-steps", type=int, default=10, help="steps not timed (allocator and cache warmup)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--pairs", type=int, default=7, help="alternating trainer / public-loop pairs (at least 5)")
    p.add_argument("--min-ratio", type=float, default=1.0)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--check", action="store_true", help="exit 1 when the median ratio is below --min-ratio")
    p.add_argument("--step-pairs", metavar="DATA_DIR", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.step_pairs:
        step_pairs(args.step_pairs, 2 * args.pairs, 20)
        return 0
    if args.steps % args.warmup_steps or args.steps <= args.warmup_steps:
        p.error("--steps must be a multiple of --warmup-steps and larger (the trainer logs every --warmup-steps)")
    result = measure(args)
    print(render(result, args.format))
    return 1 if args.check and result["ratio"]["median"] < args.min_ratio else 0


if __name__ == "__main__":
    sys.exit(main())
