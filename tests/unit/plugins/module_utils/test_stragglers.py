import statistics

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.stragglers import (node_table, node_times_table,
                                                                                      straggler_line, stragglers)


def record(step, **work):
    """A loss record with each node's work per step (ms); wait is what the slowest leaves the others."""
    slowest = max(work.values())
    return {"step": step, "loss": 2.0, "nodes": {node: {"work_ms": w, "wait_ms": slowest - w} for node, w in work.items()}}


# an ordinary spread between nodes (about +-10 %), then node n1 slowed by 0.25 s a step
ORDINARY = [record(5, n0=212.4, n1=240.9, n2=198.3), record(10, n0=231.0, n1=205.5, n2=219.8),
            record(15, n0=207.7, n1=226.1, n2=243.0)]
SLOWED = [record(20, n0=221.3, n1=478.2, n2=209.9), record(25, n0=215.0, n1=466.7, n2=230.6),
          record(30, n0=240.1, n1=489.0, n2=217.4)]


def test_no_straggler_in_an_ordinary_spread():
    assert stragglers(ORDINARY, 0.5, 3) == []
    assert stragglers(ORDINARY, 0.1, 1) == []  # n2 at 243.0 is 1.05x the median 226.1 at step 15


def test_a_node_slow_in_every_one_of_the_last_records_is_named_with_its_numbers():
    found = stragglers(ORDINARY + SLOWED, 0.5, 3)
    assert found == [{"node": "n1", "ratio": 2.02, "work_ms": 489.0, "median_ms": 240.1, "since_step": 20, "step": 30}]
    assert straggler_line(found[0]) == (
        "straggler: n1 took 2.0x the median work per step (489 ms against 240 ms) in every record from step 20 to 30; "
        "every rank waits for it at each step")


def test_slow_in_fewer_records_than_asked_is_not_a_straggler_yet():
    assert stragglers(ORDINARY + SLOWED[:2], 0.5, 3) == []
    assert stragglers(ORDINARY + SLOWED[:2] + [record(35, n0=220.0, n1=230.0, n2=225.0)], 0.5, 2) == []  # recovered
    assert stragglers(SLOWED[:2], 0.5, 3) == []  # not enough records yet
    assert stragglers(SLOWED, 0.5, 0) == []  # turned off


def test_records_without_step_times_are_skipped_and_one_node_gives_none():
    mixed = [SLOWED[0], {"event": "checkpoint", "step": 20}, {"step": 21, "loss": 2.0}, SLOWED[1], SLOWED[2]]
    assert [f["node"] for f in stragglers(mixed, 0.5, 3)] == ["n1"]
    single = [{"step": s, "loss": 1.0, "nodes": {"n0": {"work_ms": 100.0, "wait_ms": 0.0}}} for s in range(3)]
    assert stragglers(single, 0.5, 1) == [] and node_table(single, 0.5) == []
    assert stragglers([{"step": 1, "loss": 1.0, "nodes": "n0 n1"}], 0.5, 1) == []


def test_two_slow_nodes_are_both_named_slowest_first():
    both = [record(s, n0=200.0, n1=420.0, n2=210.0, n3=650.0, n4=205.0) for s in (5, 10)]
    assert [(f["node"], f["ratio"]) for f in stragglers(both, 0.5, 2)] == [("n3", 3.1), ("n1", 2.0)]


def test_the_report_table_counts_the_slow_records_per_node():
    rows = node_table(ORDINARY + SLOWED, 0.5)
    assert [(r["node"], r["slow_records"], r["records"]) for r in rows] == [("n0", 0, 6), ("n1", 3, 6), ("n2", 0, 6)]
    # means of each node's six records: n0 1327.5 / 6 (the median node), n1 2106.4 / 6, n2 1319.0 / 6
    assert [(r["work_ms"], r["ratio"]) for r in rows] == [(221.2, 1.0), (351.1, 1.59), (219.8, 0.99)]


def summarized(record, slowest=8):
    """The record as the reference trainer writes it: the median over all nodes and its slowest nodes."""
    nodes = record["nodes"]
    work = sorted(nodes, key=lambda n: -nodes[n]["work_ms"])
    return {"step": record["step"], "loss": record["loss"], "node_times": {
        "count": len(nodes), "median_work_ms": statistics.median(t["work_ms"] for t in nodes.values()),
        "median_wait_ms": statistics.median(t["wait_ms"] for t in nodes.values()),
        "slowest": {n: nodes[n] for n in work[:slowest]}}}


def history(records, threshold):
    """node_times.json as the reference trainer keeps it over these records."""
    nodes = {}
    for r in records:
        median = statistics.median(t["work_ms"] for t in r["nodes"].values())
        for node, t in r["nodes"].items():
            h = nodes.setdefault(node, {"records": 0, "work_ms": 0.0, "wait_ms": 0.0, "slow_records": 0})
            h["records"] += 1
            h["work_ms"] += t["work_ms"]
            h["wait_ms"] += t["wait_ms"]
            h["slow_records"] += t["work_ms"] > (1 + threshold) * median
            h["last_work_ms"] = t["work_ms"]
    for h in nodes.values():
        h["work_ms"] /= h["records"]
        h["wait_ms"] /= h["records"]
    return {"version": 1, "threshold": threshold, "first_step": records[0]["step"], "step": records[-1]["step"],
            "records": len(records), "nodes": nodes}


def test_a_straggler_is_found_from_the_trainers_summaries_as_from_the_full_maps():
    trainer = [summarized(r, slowest=2) for r in ORDINARY + SLOWED]
    assert stragglers(trainer, 0.5, 3) == stragglers(ORDINARY + SLOWED, 0.5, 3)
    assert stragglers(trainer, 0.5, 3)[0]["node"] == "n1"
    assert stragglers(trainer[:-1], 0.5, 3) == [] and stragglers([summarized(r) for r in ORDINARY], 0.1, 1) == []
    # a summary of one node, or with no median, times nothing
    alone = [dict(t, node_times=dict(t["node_times"], count=1)) for t in trainer]
    assert stragglers(alone, 0.5, 1) == []
    assert stragglers([dict(trainer[-1], node_times=dict(trainer[-1]["node_times"], median_work_ms=None))], 0.5, 1) == []


def test_node_times_json_and_the_full_maps_give_the_same_rows():
    records = ORDINARY + SLOWED
    assert node_times_table(history(records, 0.5)) == (node_table(records, 0.5), 0)
    # the trainer's records name only the slowest nodes: the table comes from node_times.json, not from them
    assert node_table([summarized(r) for r in records], 0.5) == []


def test_node_times_json_entries_that_cannot_be_read_are_counted_and_left_out():
    kept = history(ORDINARY + SLOWED, 0.5)
    kept["nodes"].update({"n9": {"records": 3, "work_ms": "fast"}, "n8": "gone"})
    rows, unreadable = node_times_table(kept)
    assert [r["node"] for r in rows] == ["n0", "n1", "n2"] and unreadable == 2
    for wrong in ([], {"version": 2, "nodes": {}}, {"version": 1}):
        with pytest.raises(ValueError, match="no version-1 node_times.json"):
            node_times_table(wrong)


def test_the_table_of_2048_nodes_over_200_records():
    nodes = ["node-%04d" % n for n in range(2048)]
    records = [{"step": s, "loss": 2.0, "nodes": {n: {"work_ms": 200.0 + (i % 7) + (300.0 if n == "node-0042" else 0.0),
                                                      "wait_ms": 5.0} for i, n in enumerate(nodes)}}
               for s in range(200)]
    rows = node_table(records, 0.2)
    assert len(rows) == 2048 and rows[42]["node"] == "node-0042"
    # 500 ms against the median node's 203 ms, slow in every record; no other node is slow in any
    assert (rows[42]["slow_records"], rows[42]["records"], rows[42]["ratio"]) == (200, 200, 2.46)
    assert sum(r["slow_records"] for r in rows) == 200
    assert node_times_table(history(records, 0.2)) == (rows, 0)
