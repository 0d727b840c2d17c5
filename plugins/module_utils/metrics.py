# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A training run's metrics file (JSONL, one object a line) and the progress it shows."""

from __future__ import annotations

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.job_log import read_back

# A record is read whole up to this size (the reference trainer's are under 1 KB, a script of
# one's own may write more); a longer line is counted as unreadable, never cut into garbage.
MAX_RECORD_BYTES = 1024 * 1024
# What one poll reads at most from the end of the file: a few records of the largest size.
MAX_TAIL_BYTES = 4 * MAX_RECORD_BYTES


def tail_records(path, count=16, block=65536):
    """(records, unreadable) from the last `count` lines of a JSONL file, read backwards from
    its end, at most MAX_TAIL_BYTES: the JSON objects in file order, and how many lines were
    no complete JSON object or longer than MAX_RECORD_BYTES. A last line without its line
    break that does not parse is being written, and is neither."""
    if count <= 0:
        return [], 0
    data, position, _breaks = read_back(path, count, lambda chunk, _after: chunk.count(b"\n"), MAX_TAIL_BYTES, block)
    lines = data.split(b"\n")
    unreadable = 0
    if position > 0:
        # begins before what was read: counted only when it is too long to be read anyway
        unreadable += len(lines.pop(0)) >= MAX_RECORD_BYTES
        if not lines:
            return [], unreadable
    last = lines.pop()  # after the last line break: a line being written, or nothing
    lines = [line for line in lines if line.strip()][-count:]
    records = []
    for line in lines:
        record = _record(line)
        if record is None:
            unreadable += 1
        else:
            records.append(record)
    if last.strip():
        record = _record(last)
        if record is not None:
            records.append(record)
        elif len(last) > MAX_RECORD_BYTES:
            unreadable += 1
    return records[-count:], unreadable


def _record(line):
    """The JSON object a line holds, or None."""
    if len(line) > MAX_RECORD_BYTES:
        return None
    try:
        record = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def unreadable_message(path, unreadable):
    """What a user reads when lines of the metrics file's tail could not be read."""
    return ("%s: %d of its last lines hold no complete JSON object or are longer than %d KiB; progress and "
            "stragglers are read from the other lines. Write one JSON object per line (a loss record under 1 KB: "
            "per-node data belongs in files of its own) to LLMTRAIN_METRICS_FILE"
            % (path, unreadable, MAX_RECORD_BYTES // 1024))


METRIC_KEYS = ("step", "total_steps", "loss", "val_loss", "lr", "tokens_per_s", "elapsed_s", "eta_s")


def progress_of(records):
    """Progress from the tail of a metrics file: the metrics of the last loss record, and the
    last record's `event` (e.g. checkpoint, preempted, done) with its step."""
    if not records:
        return None
    metrics = next((r for r in reversed(records) if "loss" in r), records[-1])
    progress = {k: metrics.get(k) for k in METRIC_KEYS}
    if progress["step"] is not None and progress["total_steps"]:
        progress["percent"] = round(100.0 * progress["step"] / progress["total_steps"], 1)
    progress["event"] = records[-1].get("event")
    progress["event_step"] = records[-1].get("step")
    return progress
