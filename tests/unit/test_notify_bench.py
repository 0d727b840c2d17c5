"""bench/notify_bench.py: the week of starts it times the end's figures on is what it says, and the
ledger counts it whole."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import notify_bench  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files  # noqa: E402


def test_the_host_lists_are_fragmented_and_name_every_node():
    hosts = notify_bench.fragmented(40, 0)
    assert hosts == "gpu[0000-0014,0016-0030,0032-0041]" and run_files.HOST_LIST.match(hosts)


def test_a_week_of_starts_of_2048_nodes_is_counted_whole_by_both_ways():
    figures = notify_bench.end_figures()
    starts = 7 * 86400 // notify_bench.START_EVERY_S
    assert figures["starts"] == figures["counted"] == starts
    # each start ran to a minute before the next: its hours x 2,048 nodes x 8 GPUs
    expected = starts * (notify_bench.START_EVERY_S - 60) / 3600 * 2048 * 8
    assert abs(figures["gpu_hours"] - expected) < 1e-6 and abs(figures["row_gpu_hours"] - expected) < 1e-6
