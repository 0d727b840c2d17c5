"""Notifications (run_notify): how long after its event a message arrives, what a webhook that hangs
costs the training, and what the end's figures cost at 2,048 nodes after a week of starts.

    python bench/notify_bench.py                     # text
    python bench/notify_bench.py --format markdown   # a section for docs/benchmarks.md

The job is the shipped one (llmtrain_node.job, run as its job script runs it, with scontrol and
scancel answering from small scripts on PATH), the webhook a real HTTP server on 127.0.0.1. Delays:
- start: from the job's process start to the start message's arrival (the job's start-up, its
  start line, the sender process's start and its post);
- end: from the training step's last instruction to the end message's arrival (the step's exit,
  the end line, the figures, the sender);
- training start, webhook hanging: from the job's process start to the training step's first
  instruction, with a webhook that never answers (its sender gives up after 10 s), against one that
  answers at once.
The hours (run_files.usage_totals of usage.json, what the end message and the status show: one
small file whatever the run's length) and the report's rows (run_files.usage of starts.jsonl) are
timed after a week's starts of a 2,048-node job (a start every 2 hours, each start line with a
fragmented host list of its nodes).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "tests")]

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import ledger, node_package  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files  # noqa: E402
from webhook_receiver import Receiver  # noqa: E402

RUNS = 5
HANGING_RUNS = 2
NODES, DAYS, START_EVERY_S = 2048, 7, 7200
SCONTROL = r'''#!/usr/bin/env python3
import sys
args = sys.argv[1:]
if args[:2] == ["show", "hostnames"]:
    print("\n".join("n%d" % i for i in range(1, 4)))
elif args[:2] == ["show", "job"]:
    print("JobId=%s JobState=RUNNING" % args[-1])
'''


def job_dir(tmp):
    run = Path(tmp) / "run"
    (run / "scripts").mkdir(parents=True)
    for name, text in node_package.files(str(run / "scripts") + "/").items():
        os.makedirs(os.path.dirname(name), exist_ok=True)
        Path(name).write_text(text)
    bin_dir = Path(tmp) / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", SCONTROL), ("scancel", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return run, bin_dir


def hooks(run, url):
    path = run / run_files.NOTIFY_HOOKS
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps([dict(url=url, format="json")]))
    path.chmod(0o600)


def one_job(run, bin_dir, marks):
    """Runs the job once -> (its start time, the step's first and last instruction's times)."""
    for name in (run_files.STARTS, run_files.NOTIFY_SENT):
        if (run / name).exists():
            (run / name).unlink()
    config = dict(run_dir=str(run), run_name="bench", requeue_max=1, uncounted_max=1, done_file=str(run / "done.json"),
                  checks=[], script_chdir=None, wandb_run=None, hang=None, notify=True, gpus_per_node=8)
    step = ["sh", "-c", "date +%%s.%%N > %s; date +%%s.%%N > %s" % (marks / "first", marks / "last")]
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n[1-3]",
               MASTER_PORT="29500", PYTHONPATH=str(run / "scripts"))
    began = time.time()
    subprocess.run([sys.executable, "-m", "llmtrain_node.job", json.dumps(config), "--"] + step, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=120)
    return began, float((marks / "first").read_text()), float((marks / "last").read_text())


def delays(runs):
    with tempfile.TemporaryDirectory() as tmp:
        run, bin_dir = job_dir(tmp)
        marks = Path(tmp)
        quick = Receiver("127.0.0.1")
        try:
            hooks(run, quick.url())
            start_ms, end_ms, train_ms = [], [], []
            for _run in range(runs):
                quick.posts.clear()
                began, first, last = one_job(run, bin_dir, marks)
                arrived = {body["event"]: at for _path, body, at in quick.posts}
                start_ms.append((arrived["start"] - began) * 1000)
                end_ms.append((arrived["end"] - last) * 1000)
                train_ms.append((first - began) * 1000)
        finally:
            quick.close()
        hold = marks / "never"
        slow = Receiver("127.0.0.1", hold=str(hold))
        try:
            hooks(run, slow.url())
            slow_train_ms = []
            for _run in range(HANGING_RUNS):  # each waits out its senders at its end (2 x 10 s)
                began, first, _last = one_job(run, bin_dir, marks)
                slow_train_ms.append((first - began) * 1000)
        finally:
            slow.close()
    return dict(start_ms=statistics.median(start_ms), end_ms=statistics.median(end_ms),
                train_ms=statistics.median(train_ms), slow_train_ms=statistics.median(slow_train_ms), runs=runs)


def fragmented(nodes, start):
    """A host list of `nodes` nodes with a gap every 16 (the fragmentation a busy cluster gives)."""
    parts, index = [], start
    while nodes > 0:
        take = min(15, nodes)
        parts.append("%04d-%04d" % (index, index + take - 1))
        nodes -= take
        index += 16
    return "gpu[%s]" % ",".join(parts)


def end_figures():
    """The end's and the status's hours (usage.json, and the running start) and the report's rows (a
    start line and an end line per start) on a week of starts of a 2,048-node job."""
    with tempfile.TemporaryDirectory() as tmp:
        starts = os.path.join(tmp, run_files.STARTS)
        first = 1_790_000_000
        count = DAYS * 86400 // START_EVERY_S
        with open(starts, "w") as f:
            for index in range(count):
                at = first + index * START_EVERY_S
                f.write(json.dumps(run_files.start_record("9", index + 1, fragmented(NODES, index % 7), "",
                                                          time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)), NODES))
                        + "\n")
                f.write(json.dumps(run_files.end_record("9", index + 1, "requeued", 0, time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(at + START_EVERY_S - 60)))) + "\n")
                run_files.add_usage(tmp, "9", index + 1, at, at + START_EVERY_S - 60, NODES, 8)
        size = os.path.getsize(starts)
        now = first + count * START_EVERY_S
        clock = time.process_time()
        for _run in range(RUNS):
            totals = run_files.usage_totals(run_files.read_usage(tmp), None, now)
        totals_ms = (time.process_time() - clock) * 1000 / RUNS
        clock = time.process_time()
        for _run in range(RUNS):
            rows = run_files.usage(run_files.records(starts), now)
        rows_ms = (time.process_time() - clock) * 1000 / RUNS
        usage_bytes = os.path.getsize(os.path.join(tmp, run_files.USAGE))
    # sacct's answer for the same week (-X --duplicates: a line per start of the training job, the data
    # and samples jobs' lines), read into the ledger the status and the report show
    tres = "billing=%d,cpu=%d,gres/gpu=%d,mem=%dG,node=%d" % (NODES * 96, NODES * 96, NODES * 8, NODES * 1024, NODES)
    lines = [FIELD_SEP.join(["9", "9", "REQUEUED", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(first + i * START_EVERY_S)),
                             str(START_EVERY_S - 60), tres]) for i in range(count)]
    lines += [FIELD_SEP.join([j, j, "COMPLETED", "2026-12-01T00:00:00", "300", "billing=1,cpu=1,mem=2G,node=1"]) for j in ("7", "11")]
    answer = "\n".join(lines) + "\n"
    kinds = dict([("9", "train"), ("7", "data"), ("11", "samples")])
    clock = time.process_time()
    for _run in range(RUNS):
        book = ledger.ledger(ledger.parse_usage(answer), kinds)
    sacct_ms = (time.process_time() - clock) * 1000 / RUNS
    return dict(starts=count, size_kb=size / 1024, totals_ms=totals_ms, rows_ms=rows_ms, usage_bytes=usage_bytes,
                sacct_kb=len(answer) / 1024, sacct_ms=sacct_ms, sacct_gpu_hours=book["train"]["gpu_hours"],
                counted=len(rows), gpu_hours=totals["gpu_hours"], row_gpu_hours=sum(
                    r["seconds"] * r["node_count"] for r in rows) * 8 / 3600)


def render(result, form):
    d, e = result["delays"], result["end"]
    rows = [
        ("start: job process start -> start message", "%.0f ms" % d["start_ms"]),
        ("end: training step's last instruction -> end message", "%.0f ms" % d["end_ms"]),
        ("training start after the job's process start, webhook answering at once", "%.0f ms" % d["train_ms"]),
        ("training start after the job's process start, webhook not answering",
         "%.0f ms" % d["slow_train_ms"]),
        ("hours for the end message and the status: usage.json (%d bytes) after %d starts of %d nodes" % (
            e["usage_bytes"], e["starts"], NODES), "%.2f ms CPU" % e["totals_ms"]),
        ("the report's rows: a week's starts.jsonl (%.0f KiB, a start every %d h)" % (
            e["size_kb"], START_EVERY_S // 3600), "%.1f ms CPU, %d starts" % (e["rows_ms"], e["counted"])),
        ("the ledger from sacct for the status and the report: one answer of %.0f KiB (a line per start, the data and "
         "samples jobs) read into it" % e["sacct_kb"], "%.2f ms CPU, %.0f GPU-hours" % (e["sacct_ms"], e["sacct_gpu_hours"])),
    ]
    if form == "markdown":
        head = "Medians of %d runs of the shipped job on this machine (%d with the webhook not answering)." % (
            d["runs"], HANGING_RUNS)
        lines = [head, "", "| what | figure |", "|---|---|"]
        lines += ["| %s | %s |" % row for row in rows]
        return "\n".join(lines)
    return "\n".join("%-100s %s" % row for row in rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--runs", type=int, default=RUNS)
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    args = p.parse_args(argv)
    print(render(dict(delays=delays(args.runs), end=end_figures()), args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
