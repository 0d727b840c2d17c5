"""Run the benchmarks, print their figures and write docs/benchmarks.md.

    python bench/report.py                    # what `make bench` runs
    python bench/report.py --only Trainer     # rerun the sections whose title has "Trainer";
                                              # keep the others as docs/benchmarks.md has them

Each benchmark is a script in this directory that prints a markdown section with
`--format markdown`; this file adds the machine, the date and the commands.
"""

import argparse
import datetime
import os
import re
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = [
    ("Pipeline on the local cluster", [sys.executable, "bench/pipeline_bench.py", "--format", "markdown"]),
    ("Network check on the local cluster", [sys.executable, "bench/network_bench.py", "--format", "markdown"]),
    ("Serving: the job's start to its first token", [sys.executable, "bench/serve_bench.py", "--format", "markdown"]),
    ("Local clusters of 3 to 245 nodes", [sys.executable, "bench/cluster_scale_bench.py", "--format", "markdown"]),
    ("Slurm releases on the local cluster: bring-up and the pipeline",
     [sys.executable, "bench/release_bench.py", "--format", "markdown"]),
    ("Data preparation (bytes, BPE)", [sys.executable, "bench/prepare_bench.py", "--format", "markdown"]),
    ("Trainer overhead on CPU", [sys.executable, "bench/trainer_bench.py", "--format", "markdown"]),
    ("FSDP against DDP on CPU (memory per rank, tokens/s)", [sys.executable, "bench/fsdp_bench.py", "--format", "markdown"]),
    ("Trainer on GPU (GPT-2 124M, bf16, compile)", [sys.executable, "bench/trainer_gpu.py", "--format", "markdown"]),
    ("Batch inference on CPU (GPT-2 124M shape): tokens/s per rank", [sys.executable, "bench/batch_bench.py", "--format", "markdown"]),
    ("TensorBoard event files: a poll against the file's size",
     [sys.executable, "bench/event_files_bench.py", "--format", "markdown"]),
    ("Notifications (run_notify): event to message, a hanging webhook, the end's figures at 2,048 nodes",
     [sys.executable, "bench/notify_bench.py", "--format", "markdown"]),
    ("After training: export and evaluation of GPT-2 124M on CPU",
     [sys.executable, "bench/after_training_bench.py", "--format", "markdown"]),
    ("Sweeps of 10 to 1,000 members: submission, a poll of the watch and status.yml",
     [sys.executable, "bench/sweep_bench.py", "--format", "markdown"]),
    ("Scale: the collection's code at up to 8,192 nodes, on generated inputs",
     [sys.executable, "bench/scale_bench.py", "--format", "markdown"]),
]


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return "%s, %d cores, %.0f GiB, %s, Python %s" % (
        cpu, os.cpu_count(), memory, platform.platform(), platform.python_version())


def kept_sections(path):
    """{title: section text} of an existing benchmarks file."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {part.split("\n", 1)[0]: "## " + part.strip() for part in parts}


def kept_machine(path):
    """The machine an existing benchmarks file names in its header, or None."""
    try:
        found = re.search(r"^Machine: (.*)\.$", path.read_text(), flags=re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="rerun only the benchmarks whose title contains TEXT (repeatable)")
    args = parser.parse_args(argv)
    out = ROOT / "docs" / "benchmarks.md"
    kept = kept_sections(out)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    # the machine of the sections kept from the file stays in its header; a section measured
    # now on another machine names its own
    here = machine()
    header = kept_machine(out) if args.only else None
    header = header or here
    where = "" if here == header else ", on %s" % here
    sections = []
    for title, argv_ in BENCHMARKS:
        if args.only and not any(text.lower() in title.lower() for text in args.only):
            if title not in kept:
                sys.exit("%s is not in %s: run it too (drop --only)" % (title, out.relative_to(ROOT)))
            sections.append(kept[title])
            continue
        print("== %s: %s" % (title, " ".join(argv_[1:])), flush=True)
        proc = subprocess.run(argv_, cwd=ROOT, stdout=subprocess.PIPE, universal_newlines=True, check=False)
        print(proc.stdout, flush=True)
        if proc.returncode != 0:
            sys.exit("%s failed with exit code %d" % (" ".join(argv_[1:]), proc.returncode))
        sections.append("## %s\n\nCommand: `python %s`, on %s%s.\n\n%s" % (title, " ".join(argv_[1:]), now, where,
                                                                           proc.stdout.strip()))
    text = "# Benchmarks\n\nWritten by `make bench`; each section says when it was measured.\n\nMachine: %s.\n\n%s\n" % (
        header, "\n\n".join(sections))
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print("wrote %s" % out.relative_to(ROOT))


if __name__ == "__main__":
    main()
