from ansible_collections.llmtrain.slurm.plugins.module_utils.stragglers import (node_table, straggler_line,
                                                                                stragglers)


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
    # medians of each node's six records: n0 218.15, n1 (240.9 + 466.7) / 2, n2 218.6 (the median node)
    assert [(r["work_ms"], r["ratio"]) for r in rows] == [(218.2, 1.0), (353.8, 1.62), (218.6, 1.0)]
