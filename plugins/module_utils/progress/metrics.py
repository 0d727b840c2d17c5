# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A training run's metrics file (JSONL, one object a line) and the progress it shows."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.job_log import read_back
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

# A record is read whole up to untrusted.METRICS_RECORD_MAX_BYTES; a longer line is counted as unreadable.
MAX_RECORD_BYTES = untrusted.METRICS_RECORD_MAX_BYTES
# What one poll reads at most from the end of the file: a few records of the largest size.
MAX_TAIL_BYTES = 4 * MAX_RECORD_BYTES


def tail_records(path, count=16, block=65536):
    """(records, unreadable) from the last `count` lines of a JSONL file, read backwards from
    its end, at most MAX_TAIL_BYTES: the JSON objects in file order, and how many lines were
    no JSON object the collection reads (untrusted.record: too long, too deep, an integer beyond 64
    bits) or longer than MAX_RECORD_BYTES. A last line without its line break that does not parse is
    being written, and is neither. A loss of NaN or an infinity is read: a diverged run says so."""
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
    return untrusted.record(line, MAX_RECORD_BYTES, nonfinite=True)


def records_from_start(path, max_bytes, state):
    """Each line's JSON object of a JSONL file from its start, in order, up to max_bytes read: None for
    a line that holds none the collection reads, or is longer than MAX_RECORD_BYTES (read past in
    pieces of that size, never held whole). state["truncated"] is set when the file goes on past
    max_bytes; the line that crosses it is not given."""
    read = 0
    with open(path, "rb") as handle:
        while True:
            line = handle.readline(MAX_RECORD_BYTES + 1)
            if not line:
                return
            read += len(line)
            overlong = len(line) > MAX_RECORD_BYTES
            while line and not line.endswith(b"\n") and overlong:
                line = handle.readline(MAX_RECORD_BYTES + 1)
                read += len(line)
            if read > max_bytes:
                state["truncated"] = True
                return
            if overlong:
                yield None
            elif line.strip():
                yield _record(line)


def unreadable_message(path, unreadable):
    """What a user reads when lines of the metrics file's tail could not be read."""
    return ("%s: %d of its last lines hold no complete JSON object, nest deeper than %d levels, hold an integer "
            "beyond 64 bits or are longer than %d KiB; progress and stragglers are read from the other lines. "
            "Write one JSON object per line (a loss record under 1 KB: per-node data belongs in files of its own) "
            "to LLMTRAIN_METRICS_FILE" % (path, unreadable, untrusted.MAX_DEPTH, MAX_RECORD_BYTES // 1024))


# The fields of a record that progress shows, each of the type it must have: a field of another
# type (a step of "5", an ETA of Infinity) is absent. A loss may be NaN or infinite (shown so).
METRIC_FIELDS = dict(step=untrusted.COUNT, total_steps=untrusted.COUNT, loss=untrusted.REAL, val_loss=untrusted.REAL,
                     lr=untrusted.NUMBER, tokens_per_s=untrusted.NUMBER, elapsed_s=untrusted.NUMBER,
                     eta_s=untrusted.NUMBER)
METRIC_KEYS = tuple(METRIC_FIELDS)


def progress_of(records):
    """Progress from the tail of a metrics file: the metrics of the last loss record (one whose loss
    is a number), and the last record's `event` (e.g. checkpoint, preempted, done) with its step;
    each field of the type METRIC_FIELDS gives it, or None."""
    if not records:
        return None
    metrics = next((r for r in reversed(records) if untrusted.field(r.get("loss"), untrusted.REAL) is not None),
                   records[-1])
    typed = untrusted.fields(metrics, METRIC_FIELDS)
    progress = {k: typed.get(k) for k in METRIC_KEYS}
    if progress["step"] is not None and progress["total_steps"]:
        progress["percent"] = round(100.0 * progress["step"] / progress["total_steps"], 1)
    last = records[-1]
    progress["event"] = untrusted.field(last.get("event"), untrusted.TEXT)
    progress["event_step"] = untrusted.field(last.get("step"), untrusted.COUNT)
    return progress
