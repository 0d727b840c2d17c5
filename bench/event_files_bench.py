"""What the watch's poll of a TensorBoard event file costs, against the file's size; and what the
collect step's whole read of one costs.

    python bench/event_files_bench.py                       # a table on stdout
    python bench/event_files_bench.py --format markdown     # a section for docs/benchmarks.md

Each file is a run's scalars as the Hugging Face Trainer writes them (five tags a logged step, one
record each) up to the size named: a week of a run logging every step is about 100 MB. Measured
with the collection's own reader (plugins/module_utils/node/event_files.py): the first poll of a file
(no state: its last MiB, where the first record is found by its CRCs), a poll after the trainer
logged 20 more steps (the state the watch keeps: only those records are read), and the collect
step's read of the whole file.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "roles", "deploy", "files"))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from trainer.events import event, tf_record  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files  # noqa: E402  pylint: disable=wrong-import-position

TAGS = ("train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "train/train_tokens_per_second")


def logged(step):
    """The records of one logged step: a scalar event per tag, as the Trainer's TensorBoardCallback writes."""
    return b"".join(tf_record(event(1.7e9 + step, step=step, scalars={tag: 1.0 + 1.0 / step})) for tag in TAGS)


def write(path, size):
    """A file of about size bytes of logged steps; the next step."""
    block_steps = 1000
    block = b"".join(logged(step) for step in range(1, block_steps + 1))
    step = 1
    with open(path, "wb") as handle:
        handle.write(tf_record(event(1.7e9, step=0, file_version="brain.Event:2")))
        while handle.tell() + len(block) <= size:
            handle.write(block)  # the steps repeat: the reader does not care
            step += block_steps
        while handle.tell() < size:
            handle.write(logged(step))
            step += 1
    return step


def timed(function, repeat=5):
    """(the least wall time in ms of repeat calls, the last call's result)."""
    best, result = None, None
    for _time in range(repeat):
        start = time.perf_counter()
        result = function()
        elapsed = (time.perf_counter() - start) * 1000
        best = elapsed if best is None else min(best, elapsed)
    return best, result


def whole(path):
    """The collect step's read of the whole file (event_files.metrics_of), in a Python of its own:
    {whole_s, whole_mb_s, whole_mb_peak (its peak memory), records}."""
    code = ("import json, resource, sys, time; sys.path[:0] = %r\n"
            "from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files\n"
            "start = time.perf_counter(); found = event_files.metrics_of([%r])\n"
            "print(json.dumps(dict(s=time.perf_counter() - start, records=len(found['records']),\n"
            "    unreadable=found['unreadable'], rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)))"
            % ([os.path.join(ROOT, ".collections"), os.path.join(ROOT, "roles", "deploy", "files")], path))
    measured = json.loads(subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, check=True,
                                         universal_newlines=True).stdout)
    assert measured["unreadable"] == 0 and measured["records"] > 0, measured
    size_mb = os.path.getsize(path) / 1048576.0
    return dict(whole_s=measured["s"], whole_mb_s=size_mb / measured["s"], whole_mb_peak=measured["rss"],
                records=measured["records"])


def measure(sizes_mb, whole_max_mb):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size_mb in sizes_mb:
            log_dir = os.path.join(tmp, "runs", "%gMB" % size_mb)
            os.makedirs(log_dir)
            path = os.path.join(log_dir, "events.out.tfevents.1700000000.node.1.0")
            step = write(path, int(size_mb * 1048576))
            first_ms, (progress, state, _w) = timed(lambda: event_files.poll([tmp], {}, now=0))
            assert progress is not None and progress["tag"] == "train/loss"
            kept = json.loads(json.dumps(state))
            with open(path, "ab") as handle:
                for extra in range(step, step + 20):
                    handle.write(logged(extra))
            grown = os.path.getsize(path) - kept["read"][path]["offset"]

            def again():
                return event_files.poll([tmp], json.loads(json.dumps(kept)), now=1)
            next_ms, (progress, state, _w) = timed(again)
            assert progress["step"] == step + 19, progress
            row = dict(size_mb=size_mb, first_poll_ms=first_ms, next_poll_ms=next_ms, appended_kb=grown / 1024.0,
                       state_bytes=len(json.dumps(state)), whole_s=None, whole_mb_s=None, whole_mb_peak=None)
            if size_mb <= whole_max_mb:
                row.update(whole(path))
            rows.append(row)
            os.unlink(path)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument("--sizes", default="1,16,256,1024", help="file sizes in MB, comma-separated")
    parser.add_argument("--whole-max", type=float, default=256, help="read whole only files up to this many MB")
    args = parser.parse_args(argv)
    rows = measure([float(s) for s in args.sizes.split(",")], args.whole_max)
    header = ["file", "first poll (its last MiB)", "a poll after 20 more steps", "read then",
              "watch state", "whole read (collect)"]
    lines = []
    for r in rows:
        lines.append(["%g MB" % r["size_mb"], "%.1f ms" % r["first_poll_ms"], "%.2f ms" % r["next_poll_ms"],
                      "%.1f KB" % r["appended_kb"], "%d bytes" % r["state_bytes"],
                      "%.1f s (%.1f MB/s), %d records, peak %.0f MB" % (
                          r["whole_s"], r["whole_mb_s"], r["records"], r["whole_mb_peak"]) if r["whole_s"] else "-"])
    if args.format == "markdown":
        print("The watch's poll of a TensorBoard event file, by the collection's own reader "
              "(`plugins/module_utils/node/event_files.py`), against the file's size: the Hugging Face Trainer's five "
              "scalars a logged step. Best of 5. Target: a poll's cost flat in the file's size.\n")
        print("| %s |" % " | ".join(header))
        print("|%s" % ("---|" * len(header)))
        for line in lines:
            print("| %s |" % " | ".join(line))
        growth = rows[-1]["first_poll_ms"] / rows[0]["first_poll_ms"] if len(rows) > 1 else 1.0
        print("\nFrom %g MB to %g MB the first poll's time changes %.2fx, a later poll's %.2fx (it reads what was "
              "appended, %.1f KB). The collect step reads each fetched file whole, once (in a Python of its own "
              "here, its peak memory shown: it keeps the loss records and the arrays of the tags progress shows)."
              % (rows[0]["size_mb"], rows[-1]["size_mb"], growth, rows[-1]["next_poll_ms"] / rows[0]["next_poll_ms"],
                 rows[-1]["appended_kb"]))
    else:
        for line in [header] + lines:
            print("  ".join("%-28s" % cell for cell in line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
