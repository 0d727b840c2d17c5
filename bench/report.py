"""Run the benchmarks, print their figures and write docs/benchmarks.md.

    python bench/report.py            # what `make bench` runs

Each benchmark is a script in this directory that prints a markdown section with
`--format markdown`; this file adds the machine, the date and the commands.
"""

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = [
    ("Pipeline on the local cluster", [sys.executable, "bench/pipeline_bench.py", "--format", "markdown"]),
    ("Trainer overhead on CPU", [sys.executable, "bench/trainer_bench.py", "--format", "markdown"]),
    ("Trainer on GPU (GPT-2 124M, bf16, compile)", [sys.executable, "bench/trainer_gpu.py", "--format", "markdown"]),
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


def main():
    sections = []
    for title, argv in BENCHMARKS:
        print("== %s: %s" % (title, " ".join(argv[1:])), flush=True)
        proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, universal_newlines=True, check=False)
        print(proc.stdout, flush=True)
        if proc.returncode != 0:
            sys.exit("%s failed with exit code %d" % (" ".join(argv[1:]), proc.returncode))
        sections.append("## %s\n\nCommand: `python %s`\n\n%s" % (title, " ".join(argv[1:]), proc.stdout.strip()))
    text = "# Benchmarks\n\nWritten by `make bench` on %s.\n\nMachine: %s.\n\n%s\n" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), machine(),
        "\n\n".join(sections))
    out = ROOT / "docs" / "benchmarks.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    print("wrote %s" % out.relative_to(ROOT))


if __name__ == "__main__":
    main()
