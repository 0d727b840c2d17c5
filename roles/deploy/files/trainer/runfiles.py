"""The run directory's shared files that the trainer writes beside the job script and the
collection's tools: rank_failures.jsonl (a line per rank whose step raised) and starts.jsonl (the
job script's line per Slurm start, to which rank 0 adds where the start resumed)."""

import json
import os
import re
import sys
from datetime import datetime, timezone

RANK_FAILURES_FILE = "rank_failures.jsonl"
STARTS_FILE = "starts.jsonl"  # the job script's line per start (Slurm); rank 0 adds where the start resumed
FAILURES_TAIL_BYTES = 65536
FAILURES_NAMED = 8


def env_count(name):
    """The count an environment variable holds in ASCII digits (18 at most), else 0: isdigit() and int()
    also take other scripts' digits, and int() '1_0'."""
    text = os.environ.get(name) or ""
    return int(text) if re.fullmatch(r"[0-9]{1,18}", text) else 0


def slurm_start():
    """{job_id, start} of the Slurm job this runs in (start 1, then one more per requeue), {} outside one."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return {}
    return {"job_id": job_id, "start": env_count("SLURM_RESTART_COUNT") + 1}


def record_failure(path, rank, node, step, error):
    """One line for the rank whose step raised: appended, so that ranks failing together keep theirs."""
    text = (f"{type(error).__name__}: {error}".strip().splitlines() or [type(error).__name__])[0][:500]
    line = {"rank": rank, "node": node, "step": step, "error": text,
            "restart_in_job": env_count("TORCHELASTIC_RESTART_COUNT"),
            "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **slurm_start()}
    append_line(path, line)


def append_line(path, record):
    """One JSON line appended to path; a file that cannot be written is said, and the run goes on."""
    try:
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError as e:
        print(f"train: cannot add to {path}: {e}", file=sys.stderr, flush=True)


def recent_failures(path, job_id, start):
    """The last FAILURES_NAMED failures of this job's start in path (its last FAILURES_TAIL_BYTES):
    [{rank, node, step, error}]."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - FAILURES_TAIL_BYTES))
            lines = handle.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the first, cut by the seek, a line still being written, or one nested too deep to parse
        if isinstance(record, dict) and record.get("job_id") == job_id and record.get("start") == start:
            found.append({key: record.get(key) for key in ("rank", "node", "step", "error")})
    return found[-FAILURES_NAMED:]


def add_start_line(out_dir, event):
    """Where this Slurm start resumed, beside the job script's line of it in starts.jsonl (for the watch)."""
    if event.get("job_id"):
        append_line(out_dir / STARTS_FILE, {key: event[key] for key in (
            "job_id", "start", "event", "step", "checkpoint", "restart_in_job", "failed_ranks",
            "discarded_records", "steps_lost") if key in event})
