"""Per-rank memory and throughput of trainer.train --parallel fsdp against ddp, on CPU (gloo).

A model whose parameters, gradients and AdamW state dominate a rank's memory (many wide
layers, short sequences, one sequence per rank) trains for a few steps under
torch.distributed.run, with ddp and with fsdp, on 2 and 3 ranks. Each rank's peak resident
memory (VmHWM, over the whole run, its last checkpoint included) is read from /proc while
it runs; the same run with one layer is the
baseline (the interpreter, torch, gloo, the data, one layer), so what is above it is the
state of the other layers, which ddp holds whole on every rank and fsdp shards over them.

    python bench/fsdp_bench.py                     # text
    python bench/fsdp_bench.py --format markdown   # a section for docs/benchmarks.md
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
FILES_DIR = BENCH_DIR.parent / "roles" / "deploy" / "files"
MODEL = {"n_layer": 6, "n_head": 8, "n_embd": 512, "block_size": 32}
# glibc raises its mmap threshold each time a large mmapped block is freed, after which blocks
# that size come from the heap and stay resident when freed: fsdp's per-block gather and
# reduce buffers, freed every block, would then pile up in RSS (about 350 MiB more here, gone
# after malloc_trim). A fixed threshold keeps RSS to what is live, for ddp and fsdp alike.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
BYTES_PER_PARAM = 4 + 4 + 8  # float32 weight, gradient, AdamW's two moments


def layer_params(width):
    """Parameters of one transformer block of the trainer's model (with biases)."""
    return 12 * width * width + 13 * width


def children_hwm(launcher_pid, peaks):
    """Record in peaks {pid: KiB} the VmHWM of the launcher's child processes (the ranks)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != launcher_pid:
                continue
            status = (stat.parent / "status").read_text()
        except (OSError, ValueError, IndexError):
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                pid = int(stat.parent.name)
                peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]))


def run_ranks(data_dir, out_dir, ranks, parallel, n_layer, args, env):
    """One run under torch.distributed.run -> (per-rank peak RSS in MiB, tokens/s over the timed steps)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
            "127.0.0.1", "--master_port", str(args.port), "-m", "trainer.train", "--data", str(data_dir),
            "--out", str(out_dir), "--steps", str(args.steps), "--batch-size", "1", "--warmup", "5",
            "--log-interval", str(args.warmup_steps), "--eval-interval", "0", "--eval-iters", "1",
            "--checkpoint-interval", "0", "--no-tensorboard", "--parallel", parallel,
            *[f"--{k.replace('_', '-')}={v}" for k, v in dict(MODEL, n_layer=n_layer).items()]]
    peaks, done = {}, threading.Event()
    proc = subprocess.Popen(argv, cwd=FILES_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def watch():
        while not done.is_set():
            children_hwm(proc.pid, peaks)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _stdout, stderr = proc.communicate()
    done.set()
    watcher.join()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {stderr[-3000:]}")
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    timed = {r["step"]: r["elapsed_s"] for r in records if "loss" in r}
    tokens = (args.steps - args.warmup_steps) * ranks * MODEL["block_size"]
    return sorted(kib / 1024 for kib in peaks.values()), tokens / (timed[args.steps] - timed[args.warmup_steps])


def measure(args):
    env = dict(os.environ, PYTHONPATH=str(FILES_DIR), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **MALLOC_ENV)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        subprocess.run([sys.executable, "-m", "trainer.prepare", "--out", str(data_dir), "--max-bytes", "1000000"],
                       cwd=FILES_DIR, env=env, check=True, capture_output=True)
        for ranks in args.ranks:
            for parallel in ("ddp", "fsdp"):
                base_rss, _tps = run_ranks(data_dir, Path(tmp) / f"base-{parallel}-{ranks}", ranks, parallel, 1, args,
                                           env)
                rss, tokens_per_s = run_ranks(data_dir, Path(tmp) / f"{parallel}-{ranks}", ranks, parallel,
                                              MODEL["n_layer"], args, env)
                above = [r - b for r, b in zip(rss, base_rss)]
                results.append({"ranks": ranks, "parallel": parallel, "peak_rss_mib": [round(r) for r in rss],
                                "baseline_rss_mib": [round(b) for b in base_rss],
                                "above_baseline_mib": [round(a) for a in above], "tokens_per_s": round(tokens_per_s)})
                print(f"{parallel} on {ranks} ranks: above the 1-layer baseline {above} MiB, {tokens_per_s:,.0f} tokens/s",
                      file=sys.stderr, flush=True)
    extra_layers = MODEL["n_layer"] - 1
    state_mib = extra_layers * layer_params(MODEL["n_embd"]) * BYTES_PER_PARAM / 2**20
    return {"model": MODEL, "steps": args.steps, "timed_steps": args.steps - args.warmup_steps,
            "layers_state_mib": round(state_mib, 1), "runs": results}


def render(result, form):
    if form == "json":
        return json.dumps(result, indent=2)
    shape = ", ".join(f"{k}={v}" for k, v in result["model"].items())
    extra = result["model"]["n_layer"] - 1
    caption = (f"CPU, gloo, one thread per rank, fp32, no compile, {' '.join(f'{k}={v}' for k, v in MALLOC_ENV.items())}; "
               f"GPT {shape}, vocabulary 256; 1 sequence per rank "
               f"per step; {result['timed_steps']} timed steps after {result['steps'] - result['timed_steps']}. "
               f"Memory: each rank's peak RSS (VmHWM) minus that rank's in the same run with 1 layer: the state of "
               f"{extra} more layers, {result['layers_state_mib']} MiB of weights, gradients and AdamW moments "
               f"(16 bytes a parameter) when whole")
    ddp = {r["ranks"]: max(r["above_baseline_mib"]) for r in result["runs"] if r["parallel"] == "ddp"}
    rows = []
    for r in result["runs"]:
        most = max(r["above_baseline_mib"])
        share = f"{most / ddp[r['ranks']]:.2f} (1/N = {1 / r['ranks']:.2f})" if r["parallel"] == "fsdp" else "1"
        rows.append((r["parallel"], r["ranks"], ", ".join(map(str, r["above_baseline_mib"])),
                     ", ".join(map(str, r["peak_rss_mib"])), share, f"{r['tokens_per_s']:,}"))
    if form == "markdown":
        lines = [f"{caption}.", "",
                 "| parallel | ranks | above baseline per rank (MiB) | peak RSS per rank (MiB) | largest rank vs ddp "
                 "| tokens/s |", "|---|---:|---|---|---|---:|"]
        lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
        lines += ["", "fsdp holds a rank's shard of every layer plus, while a block runs, that block's gathered "
                      "weights and gradients; ddp also keeps its gradient buckets, a second copy of the gradients. "
                      f"Without {' '.join(MALLOC_ENV)} glibc keeps fsdp's freed per-block buffers resident and its "
                      "RSS is no lower than ddp's. On CPU fsdp's all-gathers and reduce-scatters go through gloo, on "
                      "two shared cores here, so its tokens/s say nothing of NCCL on GPUs."]
        return "\n".join(lines)
    lines = [caption]
    lines += [f"  {p:<5} {n} ranks: above baseline {a} MiB (peak {pk} MiB), vs ddp {s}, {t} tokens/s"
              for p, n, a, pk, s, t in rows]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5, help="steps not timed (allocator and cache warmup)")
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    p.add_argument("--port", type=int, default=29631)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    args = p.parse_args(argv)
    if args.steps % args.warmup_steps or args.steps <= args.warmup_steps:
        p.error("--steps must be a multiple of --warmup-steps and larger (the trainer logs every --warmup-steps)")
    print(render(measure(args), args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
