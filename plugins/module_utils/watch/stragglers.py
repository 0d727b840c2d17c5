# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stragglers: a node whose ranks take longer over their own work per step than the others.

Each node's work per step is its slowest rank's time that is not spent waiting for the others
in the gradient all-reduce; its wait is that waiting; both averaged over the steps since the
record before. A loss record carries them in one of two forms:

- ``node_times``: ``{"count": N, "median_work_ms": M, "median_wait_ms": X, "slowest": {node:
  {"work_ms": W, "wait_ms": X}}}``, the median over all N nodes and the (at most 8) nodes with
  the most work: the reference trainer's, whose record stays small at any node count;
- ``nodes``: ``{node: {"work_ms": W, "wait_ms": X}}``, every node (a script of your own may
  write it in its metrics file).

Each node's history over the run is in ``node_times.json`` beside the metrics file (the
reference trainer's): ``{"version": 1, "threshold": T, "first_step": S0, "step": S, "records": R,
"nodes": {node: {"records": n, "work_ms": mean, "wait_ms": mean, "slow_records": k,
"last_work_ms": W}}}``, where a node is slow in a record when its work is more than (1 + T)
times that record's median. In a synchronous job every step takes as long as its slowest
rank: one slow node holds back all.
"""

from __future__ import annotations

import statistics

NODE_TIMES_VERSION = 1


def _ms(value):
    """A time in ms as a float, None when it is no number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _times(named):
    """{node: (work_ms, wait_ms)} of a {node: {"work_ms", "wait_ms"}} map, None when an entry has no
    work time (a missing wait counts as none)."""
    times = {}
    for node, entry in named.items():
        work = _ms(entry.get("work_ms")) if isinstance(entry, dict) else None
        if work is None:
            return None
        times[node] = (work, _ms(entry.get("wait_ms")) or 0.0)
    return times


def full_times(record):
    """{node: (work_ms, wait_ms)} of every node of a record whose `nodes` map names at least two,
    else None."""
    nodes = record.get("nodes")
    if not isinstance(nodes, dict) or len(nodes) < 2:
        return None
    return _times(nodes)


def step_times(record):
    """(median work ms over all the record's nodes, {node: (work_ms, wait_ms)} of the nodes it
    names) of a loss record with step times of at least two nodes, in either form; else None."""
    times = full_times(record)
    if times is not None:
        return statistics.median(work for work, _wait in times.values()), times
    summary = record.get("node_times")
    if not isinstance(summary, dict) or not isinstance(summary.get("slowest"), dict):
        return None
    count, median = summary.get("count"), _ms(summary.get("median_work_ms"))
    times = _times(summary["slowest"])
    if not isinstance(count, int) or count < 2 or median is None or times is None:
        return None
    return median, times


def slow_nodes(times, threshold):
    """{node: work / median work} of the named nodes of one record's step_times that took more
    than (1 + threshold) times the median work per step."""
    median, named = times
    if median <= 0:
        return {}
    return {node: work / median for node, (work, _wait) in named.items() if work > (1.0 + threshold) * median}


def stragglers(records, threshold, intervals):
    """The nodes slower than the median by more than threshold (0.5: 50 %) in each of the last
    `intervals` timed records: [{node, ratio (the least of those records'), work_ms and
    median_ms (the last record's), since_step, step}], slowest first. [] when fewer records
    carry step times. From `node_times` records only their slowest nodes can be named."""
    timed = []
    for record in reversed(records):
        if len(timed) >= intervals:
            break
        times = step_times(record)
        if times is not None:
            timed.append((record, times))
    if intervals <= 0 or len(timed) < intervals:
        return []
    timed.reverse()
    slow = [slow_nodes(times, threshold) for _record, times in timed]
    last, (median, named) = timed[-1]
    found = [{"node": node, "ratio": round(min(s[node] for s in slow), 2), "work_ms": named[node][0],
              "median_ms": round(median, 2), "since_step": timed[0][0].get("step"), "step": last.get("step")}
             for node in set.intersection(*(set(s) for s in slow))]
    return sorted(found, key=lambda f: (-f["ratio"], f["node"]))


def straggler_line(found):
    """The watch's line for one straggler."""
    return ("straggler: %s took %.1fx the median work per step (%.0f ms against %.0f ms) in every record from step %s "
            "to %s; every rank waits for it at each step" % (found["node"], found["ratio"], found["work_ms"],
                                                             found["median_ms"], found["since_step"], found["step"]))


def add_record(totals, record, threshold):
    """Adds one loss record's full `nodes` map to totals ({node: [records, work sum, wait sum,
    slow records]}): its median is computed once, so a run costs O(records x nodes log nodes).
    True when the record carried one."""
    times = full_times(record)
    if times is None:
        return False
    median = statistics.median([work for work, _wait in times.values()])
    limit = (1.0 + threshold) * median if median > 0 else float("inf")
    for node, (work, wait) in times.items():
        total = totals.get(node)
        if total is None:
            totals[node] = [1, work, wait, int(work > limit)]
        else:
            total[0] += 1
            total[1] += work
            total[2] += wait
            total[3] += work > limit
    return True


def totals_table(totals):
    """The report's rows of add_record's totals (see node_table)."""
    return _rows(dict((node, (n, work / n, wait / n, slow)) for node, (n, work, wait, slow) in totals.items()))


def node_table(records, threshold):
    """The report's rows, one per node, sorted by node: node, its mean work and wait per step over
    the loss records with a full `nodes` map (ms), its mean work against the median node's, and in
    how many of its records it was slow. [] when no record names two nodes or more."""
    totals = {}
    for record in records:
        add_record(totals, record, threshold)
    return totals_table(totals)


def node_times_table(history):
    """The rows of node_table from node_times.json's content, and how many of its node entries
    could not be read. ValueError when it is no version-1 node_times.json."""
    if not isinstance(history, dict) or history.get("version") != NODE_TIMES_VERSION \
            or not isinstance(history.get("nodes"), dict):
        raise ValueError("it is no version-%d node_times.json (an object with version and nodes)" % NODE_TIMES_VERSION)
    means, unreadable = {}, 0
    for node, entry in history["nodes"].items():
        entry = entry if isinstance(entry, dict) else {}
        n, slow = entry.get("records"), entry.get("slow_records")
        work, wait = _ms(entry.get("work_ms")), _ms(entry.get("wait_ms"))
        if isinstance(n, int) and n > 0 and isinstance(slow, int) and work is not None and wait is not None:
            means[node] = (n, work, wait, slow)
        else:
            unreadable += 1
    return _rows(means), unreadable


def _rows(means):
    """Rows of {node: (records, mean work, mean wait, slow records)}; none for fewer than two nodes."""
    if len(means) < 2:
        return []
    typical = statistics.median(work for _n, work, _wait, _slow in means.values())
    return [{"node": node, "work_ms": round(work, 1), "wait_ms": round(wait, 1),
             "ratio": round(work / typical, 2) if typical > 0 else None, "slow_records": slow, "records": n}
            for node, (n, work, wait, slow) in sorted(means.items())]
