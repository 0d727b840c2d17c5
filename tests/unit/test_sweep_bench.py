"""bench/sweep_bench.py: a small sweep measured the way it measures a thousand members - every
member's run directory made, one array submitted, every member found pending by the poll, then
status.yml's module over it once it trained a while (the table, and the members with sweep=NAME) -
and its table names each figure."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import sweep_bench  # noqa: E402  pylint: disable=wrong-import-position


def test_a_small_sweep_is_made_submitted_polled_and_shown_by_the_status():
    # the status's module checks what it found against the members' files and the queue (3 done, 1
    # running) and raises otherwise; the playbook is left out here (ansible-playbook's start is seconds)
    row = sweep_bench.measure(4, playbook=False)
    assert row["members"] == 4 and row["files"] > 4 * 20
    assert row["submit_s"] == row["action_s"] + row["module_s"] and row["poll_ms"] > row["poll_action_ms"] > 0
    assert row["status_ms"] > 0 and row["status_sweep_ms"] > 0 and row["status_sweep_kb"] > row["status_kb"] > 0
    assert row["playbook_s"] is None and not row["sacct_asked"]
    text = sweep_bench.table([row], markdown=True)
    assert text.splitlines()[0].startswith("| members | action s") and "| 4 |" in text
    assert "| status.yml's module ms (the table) | with sweep=NAME ms (the members) |" in text.splitlines()[0]
    assert text.splitlines()[2].endswith(" | - |")
    assert sweep_bench.verdict([row]) == "At 1000 members: not measured."
    assert "sacct is not asked" in sweep_bench.status_note([row])


def test_the_verdict_names_each_target():
    row = dict(members=1000, submit_s=4.0, poll_ms=90.0, status_ms=250.0, status_sweep_ms=2100.0)
    assert sweep_bench.verdict([row]) == (
        "At 1000 members: submitted in 4.00 s against at most 5 s: met; a poll in 90.00 ms against at most 200 ms: met; "
        "status.yml's module (the table) in 250.00 ms against at most 2000 ms: met; "
        "with sweep=NAME in 2100.00 ms against at most 2000 ms: missed.")


def test_a_grid_has_the_members_asked_for():
    for size in (4, 10, 100, 1000):
        grid = sweep_bench.grid(size)
        assert len(grid["pretrain_learning_rate"]) * len(grid["pretrain_batch_size"]) == size
