# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stragglers: a node whose ranks take longer over their own work per step than the others.

A loss record may carry ``nodes``: ``{node: {"work_ms": W, "wait_ms": X}}``, each node's work
per step (its slowest rank's time that is not spent waiting for the others in the gradient
all-reduce) and its wait, averaged over the steps since the record before. The reference
trainer writes them; a script of your own may write the same in its metrics file. In a
synchronous job every step takes as long as its slowest rank: one slow node holds back all.
"""

from __future__ import annotations

import statistics


def timed_records(records):
    """The records that carry step times of at least two nodes."""
    return [r for r in records if isinstance(r.get("nodes"), dict) and len(r["nodes"]) >= 2
            and all(isinstance(v, dict) and isinstance(v.get("work_ms"), (int, float)) for v in r["nodes"].values())]


def slow_nodes(record, threshold):
    """{node: work / median work} of the nodes of one record that took more than (1 + threshold)
    times the median work per step."""
    work = {node: float(times["work_ms"]) for node, times in record["nodes"].items()}
    median = statistics.median(work.values())
    if median <= 0:
        return {}
    return {node: w / median for node, w in work.items() if w > (1.0 + threshold) * median}


def stragglers(records, threshold, intervals):
    """The nodes slower than the median by more than threshold (0.5: 50 %) in each of the last
    `intervals` timed records: [{node, ratio (the least of those records'), work_ms and
    median_ms (the last record's), since_step, step}], slowest first. [] when fewer records
    carry step times."""
    timed = timed_records(records)[-intervals:] if intervals > 0 else []
    if len(timed) < intervals or not timed:
        return []
    slow = [slow_nodes(r, threshold) for r in timed]
    last = timed[-1]
    found = []
    for node in set.intersection(*(set(s) for s in slow)):
        found.append({"node": node, "ratio": round(min(s[node] for s in slow), 2),
                      "work_ms": last["nodes"][node]["work_ms"],
                      "median_ms": round(statistics.median(float(t["work_ms"]) for t in last["nodes"].values()), 2),
                      "since_step": timed[0].get("step"), "step": last.get("step")})
    return sorted(found, key=lambda f: -f["ratio"])


def straggler_line(found):
    """The watch's line for one straggler."""
    return ("straggler: %s took %.1fx the median work per step (%.0f ms against %.0f ms) in every record from step %s "
            "to %s; every rank waits for it at each step" % (found["node"], found["ratio"], found["work_ms"],
                                                             found["median_ms"], found["since_step"], found["step"]))


def node_table(records, threshold):
    """The report's rows, one per node: node, median work and wait per step over the run's timed
    records (ms), work against the median node's, and in how many records it was slow."""
    timed = timed_records(records)
    if not timed:
        return []
    nodes = sorted(set().union(*(r["nodes"] for r in timed)))
    work = {n: [float(r["nodes"][n]["work_ms"]) for r in timed if n in r["nodes"]] for n in nodes}
    wait = {n: [float(r["nodes"][n].get("wait_ms") or 0.0) for r in timed if n in r["nodes"]] for n in nodes}
    median_work = {n: statistics.median(work[n]) for n in nodes}
    typical = statistics.median(median_work.values())
    slow_counts = {n: sum(1 for r in timed if n in slow_nodes(r, threshold)) for n in nodes}
    return [{"node": n, "work_ms": round(median_work[n], 1), "wait_ms": round(statistics.median(wait[n]), 1),
             "ratio": round(median_work[n] / typical, 2) if typical > 0 else None,
             "slow_records": slow_counts[n], "records": len(work[n])} for n in nodes]
