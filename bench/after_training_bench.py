"""After training, on CPU: trainer.export of a GPT-2 124M-shaped checkpoint (its time, the export's
size, the process's peak memory; a rerun that finds the export), and trainer.evaluate's held-out
tokens per second per rank on that model. The weights are a fresh initialisation: export and
evaluation time do not depend on what the model learnt.

    python bench/after_training_bench.py                    # text
    python bench/after_training_bench.py --format markdown  # a section for docs/benchmarks.md
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

FILES_DIR = Path(__file__).resolve().parents[1] / "roles" / "deploy" / "files"
sys.path.insert(0, str(FILES_DIR))
from trainer.model import GPT, GPTConfig  # noqa: E402  pylint: disable=wrong-import-position

SHAPES = {"gpt2-124m": dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768),
          "tiny": dict(vocab_size=256, block_size=64, n_layer=2, n_head=2, n_embd=64)}


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def run(argv, env=None):
    """(seconds, the child's peak RSS in MiB, stdout) of python -m trainer.<argv>."""
    before = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", *argv], cwd=FILES_DIR, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(FILES_DIR), **(env or {})))
    out = process.stdout.read()
    _pid, status, usage = os.wait4(process.pid, 0)  # the child's own peak RSS, not every child's so far
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stdout.close()
    seconds = time.perf_counter() - before
    if process.returncode:
        raise SystemExit("%s failed (exit %s)" % (" ".join(argv), process.returncode))
    return seconds, usage.ru_maxrss / 1024, out


def measure(args):
    shape = SHAPES[args.shape]
    torch.manual_seed(0)
    model = GPT(GPTConfig(**shape))
    params = model.num_params()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        run_dir = Path(tmp) / "run"
        (run_dir / "checkpoints").mkdir(parents=True)
        checkpoint = run_dir / "checkpoints" / "step_000001.pt"
        torch.save({"format": 1, "step": 1, "model": model.state_dict(), "model_config": asdict(model.config),
                    "tokenizer": None, "tokens_seen": 0}, checkpoint)
        del model
        checkpoint_bytes = checkpoint.stat().st_size
        seconds, own, peaks, again = [], [], [], []
        for attempt in range(args.runs):
            out = Path(tmp) / ("exports-%d" % attempt)
            wall, peak, printed = run(["trainer.export", "--checkpoint", str(checkpoint), "--out", str(out)])
            line = json.loads(printed.splitlines()[-1])
            seconds.append(wall)
            own.append(line["seconds"])
            peaks.append(peak)
            export_bytes = line["bytes"]
            again.append(run(["trainer.export", "--checkpoint", str(checkpoint), "--out", str(out)])[0])
        # the held-out text: random token ids (the loss is not the point, the time per token is)
        data = Path(tmp) / "data"
        data.mkdir()
        tokens = np.random.default_rng(0).integers(0, 256, args.eval_tokens + 1, dtype=np.uint16)
        tokens.tofile(data / "val.bin")
        (data / "train.bin").write_bytes(b"")
        (data / "meta.json").write_text(json.dumps({"vocab_size": 256, "dtype": "uint16", "train_tokens": 0,
                                                    "val_tokens": len(tokens), "tokenizer": "bytes"}))
        rates = []
        for _attempt in range(args.runs):
            env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "1", "OMP_NUM_THREADS": str(args.threads)}
            wall, _peak, _out = run(["trainer.evaluate", "--model", str(Path(tmp) / "exports-0"), "--data", str(data),
                                     "--out", str(Path(tmp) / "eval"), "--max-tokens", str(args.eval_tokens),
                                     "--batch-size", "4", "--device", "cpu"], env)
            result = json.loads((Path(tmp) / "eval" / "step_000001.json").read_text())  # one rank: its own sums
            rates.append(result["tokens"] / result["seconds"])
    return {"shape": args.shape, "config": shape, "params": params, "checkpoint_bytes": checkpoint_bytes,
            "export_bytes": export_bytes, "wall_s": spread(seconds), "export_s": spread(own), "peak_mib": spread(peaks),
            "rerun_s": spread(again), "eval_tokens": args.eval_tokens, "eval_threads": args.threads,
            "eval_tokens_per_s": spread(rates), "runs": args.runs}


def fmt(s, digits=1, unit=""):
    return "%.*f%s (min %.*f, max %.*f, n=%d)" % (digits, s["median"], unit, digits, s["min"], digits, s["max"], s["n"])


def render(result, form):
    if form == "json":
        return json.dumps(result, indent=2)
    lines = ["The %s shape (%s; %.1fM parameters, fp32), a fresh initialisation; medians of %d runs, each a "
             "process of its own." % (result["shape"], ", ".join("%s=%s" % kv for kv in result["config"].items()),
                                      result["params"] / 1e6, result["runs"]), ""]
    lines += ["| figure | result |", "|---|---|",
              "| checkpoint (`step_N.pt`, model only) | %.1f MB |" % (result["checkpoint_bytes"] / 1e6),
              "| export directory (safetensors, config, tokenizer) | %.1f MB |" % (result["export_bytes"] / 1e6),
              "| `python -m trainer.export`: wall time, Python's start included | %s |" % fmt(result["wall_s"], 2, " s"),
              "| of which the export itself (its own line's `seconds`: load, convert, write, fsync) | %s |" % fmt(result["export_s"], 2, " s"),
              "| peak memory of the export's process | %s |" % fmt(result["peak_mib"], 0, " MiB"),
              "| a rerun that finds the export (nothing written) | %s |" % fmt(result["rerun_s"], 2, " s"),
              "| `trainer.evaluate`: held-out tokens/s per rank, its model's loading included (CPU, %d thread(s), %s tokens) | %s |" % (
                  result["eval_threads"], format(result["eval_tokens"], ","), fmt(result["eval_tokens_per_s"], 0))]
    lines += ["", "The export reads the checkpoint whole in one process (a sharded one too) and writes the "
              "safetensors file once, tensor by tensor; the tied output matrix is stored once, as GPT-2's files "
              "store it. The evaluation runs the reference model in fp32 with no gradient."]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-124m")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--eval-tokens", type=int, default=16384)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tmp", help="where the checkpoint and the exports go (default: the system's temp dir)")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    args = p.parse_args(argv)
    print(render(measure(args), args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
