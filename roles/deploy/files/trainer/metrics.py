"""The run's records: RUN/metrics.jsonl, RUN/node_times.json, and a loss record's console line.

Owns the metrics log (appended by rank 0, cut back on resume to the records up to the
checkpoint's step, so that it tells one trajectory), the per-node step times a loss record
carries under ddp (each node's work and wait, summarised to fit a record of fixed size) and
node_times.json (every node's over the run, its state carried in each checkpoint), and the
`step N/M loss ...` line that the watch and the report read.
"""

import heapq
import json
import os
import statistics

from .fsio import atomic_file

METRICS_FILE = "metrics.jsonl"
NODE_TIMES_FILE = "node_times.json"
RECORD_BYTES = 1024  # the most a loss record's line takes, its newline included, at any node count
SLOWEST_NODES = 8
SLOW_THRESHOLD = 0.2  # a node's record is slow when its work is over (1 + this) x the record's median


def node_step_times(samples, steps):
    """{node: {"work_ms", "wait_ms"}} per step over the last `steps` steps, from every rank's
    (node, work_s, wait_s): a node's slowest rank (the most work) stands for it."""
    nodes = {}
    for node, work_s, wait_s in samples:
        if node not in nodes or work_s > nodes[node][0]:
            nodes[node] = (work_s, wait_s)
    return {node: {"work_ms": round(1000.0 * work / steps, 2), "wait_ms": round(1000.0 * wait / steps, 2)}
            for node, (work, wait) in sorted(nodes.items())}


def node_times_summary(nodes, room):
    """A loss record's node_times, from node_step_times' map: how many nodes, their median work
    and wait per step, and the nodes with the most work (SLOWEST_NODES at most, as many as fit
    in `room` bytes of JSON: the record stays the same size at any node count)."""
    summary = {"count": len(nodes),
               "median_work_ms": round(statistics.median(t["work_ms"] for t in nodes.values()), 2),
               "median_wait_ms": round(statistics.median(t["wait_ms"] for t in nodes.values()), 2),
               "slowest": {}}
    size = len(json.dumps(summary))
    for node in heapq.nlargest(SLOWEST_NODES, nodes, key=lambda name: nodes[name]["work_ms"]):
        # '"node": {...}' inside slowest's braces, after a ', ' but for the first
        entry = len(json.dumps({node: nodes[node]})) - 2 + (2 if summary["slowest"] else 0)
        if size + entry > room:
            break
        summary["slowest"][node] = nodes[node]
        size += entry
    return summary


class NodeTimes:
    """RUN/node_times.json, rank 0's: per node, its mean work and wait per step over the loss
    records with node times, its last work, and in how many records its work was over
    (1 + threshold) x that record's median work (records where it held the others up). Its
    size grows with the nodes, not with the run. `state` (the file's content, unrounded) goes
    into each checkpoint, so a resumed run counts the records metrics.jsonl keeps, no more."""

    def __init__(self, path, state=None):
        self.path = path
        self.state = state or {"version": 1, "threshold": SLOW_THRESHOLD, "first_step": None, "step": None,
                               "records": 0, "nodes": {}}

    def add(self, step, nodes, median_work_ms):
        """Count the loss record of `step` (node_step_times' map and its median work) and write the file."""
        state = self.state
        if state["first_step"] is None:
            state["first_step"] = step
        state["step"], state["records"] = step, state["records"] + 1
        slow_above = (1.0 + state["threshold"]) * median_work_ms
        for node, times in nodes.items():
            entry = state["nodes"].setdefault(node, {"records": 0, "work_ms": 0.0, "wait_ms": 0.0, "slow_records": 0,
                                                     "last_work_ms": 0.0})
            entry["records"] += 1
            entry["work_ms"] += (times["work_ms"] - entry["work_ms"]) / entry["records"]  # running means
            entry["wait_ms"] += (times["wait_ms"] - entry["wait_ms"]) / entry["records"]
            entry["slow_records"] += int(times["work_ms"] > slow_above)
            entry["last_work_ms"] = times["work_ms"]
        self.write()

    def write(self):
        """The file as the state says; none while the state has no records (a fresh run, or a
        resume from a checkpoint without node times), so no earlier run's file is left."""
        if not self.state["records"]:
            self.path.unlink(missing_ok=True)
            return
        nodes = {node: {key: round(value, 2) if isinstance(value, float) else value for key, value in entry.items()}
                 for node, entry in self.state["nodes"].items()}
        with atomic_file(self.path, "w") as f:
            json.dump({**self.state, "nodes": nodes}, f)


def lines_from_end(f, block=1 << 16):
    """(offset, line) of each line of the binary file f, the last first, read backwards in
    blocks; each line with its newline, but a last one cut short."""
    start = f.seek(0, os.SEEK_END)
    buf, stop = b"", 0  # buf holds the file from start on; its first `stop` bytes are not yielded yet
    while True:
        newline = buf.rfind(b"\n", 0, stop - 1) if stop else -1  # the one before the last line's own
        if newline < 0 and start > 0:
            begin = max(0, start - block)
            f.seek(begin)
            buf, start = f.read(start - begin) + buf[:stop], begin
            stop = len(buf)
            continue
        if not stop:
            return
        yield start + newline + 1, buf[newline + 1:stop]
        stop = newline + 1


def parsed(line):
    """The JSON value of a line of metrics.jsonl, or None where it is none (a line nested too deep
    for the parser too: a script may write any line there)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def kept_record(record, resumed_step):
    """Whether a parsed line of metrics.jsonl is a record a run resumed at resumed_step keeps."""
    step = record.get("step", 0) if isinstance(record, dict) else None
    return isinstance(step, (int, float)) and step <= resumed_step


def loss_step(record):
    """The integer step of a parsed loss record, else None."""
    step = record.get("step") if isinstance(record, dict) and "loss" in record else None
    return step if isinstance(step, int) else None


class MetricsLog:
    """RUN/metrics.jsonl. Records after the step a run resumes from are dropped first,
    so the file always tells one trajectory (and never holds a line cut short by a kill).
    Its records are in step order, so only the lines after the last record it keeps are read."""

    def __init__(self, path, resumed_step):
        # dropped: lines; dropped_to_step: the last step they recorded (trained past the checkpoint)
        self.dropped, self.dropped_to_step = 0, None
        if path.exists():
            with open(path, "r+b") as f:
                keep = 0
                for offset, line in lines_from_end(f):
                    record = parsed(line)
                    if resumed_step and line.endswith(b"\n") and kept_record(record, resumed_step):
                        keep = offset + len(line)
                        break
                    self.dropped += 1
                    step = loss_step(record)
                    if step is not None and (self.dropped_to_step is None or step > self.dropped_to_step):
                        self.dropped_to_step = step
                if self.dropped:
                    f.truncate(keep)
                    os.fsync(f.fileno())
        self.file = open(path, "a")

    def write(self, record):
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()


def format_seconds(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def with_node_times(record, nodes):
    """record with its node_times: the summary of node_step_times' map `nodes` in the room the
    rest of the record leaves in RECORD_BYTES ('{}' stands for node_times)."""
    room = RECORD_BYTES - len("\n") - (len(json.dumps({**record, "node_times": {}})) - len("{}"))
    record["node_times"] = node_times_summary(nodes, room)
    return record


def loss_line(record, tokens_per_s, eta_s):
    """The console line of a loss record: `step N/M loss L[ val V][ mfu U] lr R T tok/s eta H:MM:SS`."""
    extras = "".join([f" val {record['val_loss']:.4f}" if "val_loss" in record else "",
                      f" mfu {record['mfu']:.1%}" if record.get("mfu") else ""])
    return (f"step {record['step']}/{record['total_steps']} loss {record['loss']:.4f}{extras} lr {record['lr']:.2e} "
            f"{tokens_per_s:,.0f} tok/s eta {format_seconds(eta_s)}")
