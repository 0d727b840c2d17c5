"""bench/sweep_bench.py: a small sweep measured the way it measures a thousand members - every
member's run directory made, one array submitted, every member found pending by the poll - and its
table names each figure."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import sweep_bench  # noqa: E402  pylint: disable=wrong-import-position


def test_a_small_sweep_is_made_submitted_and_polled():
    row = sweep_bench.measure(4)
    assert row["members"] == 4 and row["files"] > 4 * 20
    assert row["submit_s"] == row["action_s"] + row["module_s"] and row["poll_ms"] > row["poll_action_ms"] > 0
    text = sweep_bench.table([row], markdown=True)
    assert text.splitlines()[0].startswith("| members | action s") and "| 4 |" in text
    assert sweep_bench.verdict([row]) == "At 1000 members: not measured."


def test_a_grid_has_the_members_asked_for():
    for size in (4, 10, 100, 1000):
        grid = sweep_bench.grid(size)
        assert len(grid["pretrain_learning_rate"]) * len(grid["pretrain_batch_size"]) == size
