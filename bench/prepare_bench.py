"""Throughput of trainer.prepare: bytes, and BPE (training the tokenizer offline, then encoding).

The corpus is this interpreter's standard library (the pipeline's default input), capped at
--max-bytes. Each tokenizer runs --runs times in a fresh process with --force; the figures
are medians with their range, and MB/s counts the corpus bytes over the whole command (for
BPE: reading twice, training the tokenizer, encoding, writing).

    python bench/prepare_bench.py                    # text
    python bench/prepare_bench.py --format markdown  # a section for docs/benchmarks.md
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FILES_DIR = Path(__file__).resolve().parents[1] / "roles" / "deploy" / "files"
CASES = [("bytes", []), ("bpe, 8,192 tokens", ["--tokenizer", "bpe", "--vocab-size", "8192"]),
         ("bpe, 32,768 tokens", ["--tokenizer", "bpe", "--vocab-size", "32768"])]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(args):
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CASES:
            seconds, training, meta = [], [], None
            for _run in range(args.runs):
                out = Path(tmp) / name.split(",", maxsplit=1)[0]
                started = time.perf_counter()
                printed = subprocess.run([sys.executable, "-m", "trainer.prepare", "--input", "stdlib", "--out", str(out),
                                          "--max-bytes", str(args.max_bytes), "--force", *flags], cwd=FILES_DIR,
                                         check=True, stdout=subprocess.PIPE, universal_newlines=True,
                                         env=dict(os.environ, PYTHONPATH=str(FILES_DIR))).stdout
                seconds.append(time.perf_counter() - started)
                trained = re.search(r"the tokenizer trained in ([0-9.]+)s", printed)
                training.append(float(trained.group(1)) if trained else 0.0)
                meta = json.loads((out / "meta.json").read_text())
            corpus = min(args.max_bytes, meta["train_tokens"] + meta["val_tokens"]) if name == "bytes" else None
            results.append({"tokenizer": name, "seconds": spread(seconds), "training_s": spread(training), "meta": meta,
                            "corpus_bytes": corpus})
    corpus = results[0]["corpus_bytes"]
    for r in results:
        seconds = r["seconds"]
        r["mb_per_s"] = spread([corpus / 1e6 / seconds[key] for key in ("min", "median", "max")])
        r["bytes_per_token"] = corpus / (r["meta"]["train_tokens"] + r["meta"]["val_tokens"])
    return {"corpus_bytes": corpus, "runs": args.runs, "cpus": os.cpu_count(), "results": results}


def render(result, form):
    if form == "json":
        return json.dumps(result, indent=2)
    lines = ["Corpus: the standard library's .py files, first %s bytes; %d run(s) each, %d CPU(s); medians "
             "(min, max)." % (format(result["corpus_bytes"], ","), result["runs"], result["cpus"]), ""]
    lines += ["| tokenizer | seconds | of which training the tokenizer | MB/s | bytes per token | token type |",
              "|---|---|---|---|---:|---|"]
    for r in result["results"]:
        s, m = r["seconds"], r["mb_per_s"]
        t = r["training_s"]
        lines.append("| %s | %.1f (%.1f, %.1f) | %s | %.1f (%.1f, %.1f) | %.2f | %s |" % (
            r["tokenizer"], s["median"], s["min"], s["max"],
            "%.1f (%.1f, %.1f)" % (t["median"], t["min"], t["max"]) if t["max"] else "-",
            m["median"], m["min"], m["max"], r["bytes_per_token"], r["meta"]["dtype"]))
    lines += ["", "The seconds are the whole command, Python's start-up included. Hugging "
              "Face `tokenizers` trains and encodes on every core. A run's corpus is prepared once and skipped "
              "while unchanged."]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--max-bytes", type=int, default=20_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    args = p.parse_args(argv)
    print(render(measure(args), args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
