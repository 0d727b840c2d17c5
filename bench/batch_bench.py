"""Batch inference tokens/s per rank on CPU for the GPT-2 124M shape (trainer.batch).

A GPT-2 124M-shaped model (12 layers, 12 heads, 768 wide, a 1,024-token context, 50,304 rows of
vocabulary; random weights: speed does not depend on them) is exported the way trainer.export
writes it, then `python -m trainer.batch` generates a few prompts on 1 rank, and on as many ranks as
the machine has cores, each rank a process of its own with its share of the cores (OMP_NUM_THREADS),
as the batch job's ranks on a node. The figures come from the batch's summary.json: tokens/s per rank
(its tokens over its seconds of generation) and overall (every token over the busiest rank's seconds),
and the seconds each rank took to start and load the model.

    python bench/batch_bench.py                     # text
    python bench/batch_bench.py --format markdown   # a section for docs/benchmarks.md
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
FILES_DIR = BENCH_DIR.parent / "roles" / "deploy" / "files"
MODEL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 50304, "dropout": 0.0, "bias": True}
PROMPT = "def fibonacci(n):\n    \"\"\"The n-th Fibonacci number.\"\"\"\n"


def write_model(target):
    """The 124M shape as trainer.export writes a checkpoint (random weights, the byte tokenizer)."""
    sys.path.insert(0, str(FILES_DIR))
    import torch  # pylint: disable=import-outside-toplevel
    from trainer import export  # pylint: disable=import-outside-toplevel
    from trainer.model import GPT, GPTConfig  # pylint: disable=import-outside-toplevel
    torch.manual_seed(0)
    model = GPT(GPTConfig(**MODEL))
    state = {"step": 0, "model": model.state_dict(), "model_config": dict(MODEL), "tokenizer": None}
    record = {"checkpoint": "bench", "step": 0}
    out = Path(target) / "step_000000"
    export.write_export(out, Path(target) / "step_000000.pt", state, record)
    return out, model.num_params()


def run_batch(model_dir, prompts_file, out, world, threads):
    """Every rank of a batch at once (a process each), then the merge; the summary and each rank's wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(FILES_DIR), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    common = ["--prompts", str(prompts_file), "--out", str(out)]
    begin = time.monotonic()
    ranks = [subprocess.Popen([sys.executable, "-m", "trainer.batch", "--model", str(model_dir), *common, "--device", "cpu",
                               "--max-new-tokens", "1000000", "--rank", str(rank), "--world", str(world)],
                              cwd=FILES_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for rank in range(world)]
    walls = []
    for proc in ranks:
        _out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise SystemExit("trainer.batch failed:\n" + err[-2000:])
        walls.append(time.monotonic() - begin)
    merged = subprocess.run([sys.executable, "-m", "trainer.batch", "--merge", *common], cwd=FILES_DIR, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    if merged.returncode != 0:
        raise SystemExit("trainer.batch --merge failed:\n" + merged.stderr[-2000:])
    summary = json.loads((Path(out) / "summary.json").read_text())
    # what a rank spent before it generated: Python, torch, reading and building the model
    starts = [wall - rank["seconds"] for wall, rank in zip(walls, summary["per_rank"])]
    return summary, starts


def measure(args):
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, params = write_model(tmp)
        size = sum(f.stat().st_size for f in model_dir.iterdir())
        prompts_file = Path(tmp) / "prompts.jsonl"
        prompts_file.write_text("".join(json.dumps({"prompt": PROMPT, "max_new_tokens": args.tokens, "seed": i}) + "\n"
                                        for i in range(args.prompts)))
        runs = []
        for world in sorted({1, max(1, min(cores, args.max_ranks))}):
            threads = max(1, cores // world)
            summary, starts = run_batch(model_dir, prompts_file, Path(tmp) / ("w%d" % world), world, threads)
            runs.append({"ranks": world, "threads_per_rank": threads, "prompts": summary["prompts"], "tokens": summary["tokens"],
                         "tokens_per_second": summary["tokens_per_second"],
                         "per_rank": [r["tokens_per_second"] for r in summary["per_rank"]],
                         "start_seconds": [round(s, 1) for s in starts]})
    return {"model": MODEL, "parameters": params, "export_bytes": size, "prompt_bytes": len(PROMPT.encode()),
            "tokens_per_prompt": args.tokens, "cores": cores, "runs": runs}


def render(result, form):
    rows = [(r["ranks"], r["threads_per_rank"], r["prompts"], r["tokens"],
             " / ".join("%.1f" % t for t in r["per_rank"]), "%.1f" % r["tokens_per_second"],
             " / ".join("%.1f" % s for s in r["start_seconds"])) for r in result["runs"]]
    head = ("ranks", "threads a rank", "prompts", "tokens", "tokens/s per rank", "tokens/s overall", "start s per rank")
    intro = ("GPT-2 124M shape (%.1fM parameters, a %.0f MB export), CPU, float32; each prompt %d bytes (the byte "
             "tokenizer) and %d new tokens, sampled (temperature 0.8, top-k 50); %d cores."
             % (result["parameters"] / 1e6, result["export_bytes"] / 1e6, result["prompt_bytes"], result["tokens_per_prompt"],
                result["cores"]))
    if form == "json":
        return json.dumps(result, indent=1)
    if form == "markdown":
        lines = [intro, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        lines += ["", "Tokens/s per rank: a rank's tokens over its seconds of generation (summary.json); overall: every "
                  "token over the busiest rank's seconds. The reference model recomputes the whole context for each "
                  "token (no key-value cache), so a token costs more the longer the text; ranks on one machine share "
                  "its cores and memory bandwidth. Start: a rank's seconds before it generates (Python, torch, the "
                  "model read from its safetensors)."]
        return "\n".join(lines)
    return intro + "\n" + "\n".join("  ".join(str(c) for c in row) for row in [head] + rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=16, help="new tokens per prompt")
    p.add_argument("--max-ranks", type=int, default=2, help="the most ranks of the second run (at most the cores)")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    args = p.parse_args(argv)
    print(render(measure(args), args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
