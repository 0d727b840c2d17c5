"""A requeued job's wait asks Slurm for its partition's nodes counted per state (sinfo): one
short answer whatever the cluster's size. On the local cluster it counts the usable nodes as
`scontrol show node` lists them, nodes drained or down left out."""

import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import (
    SINFO_STATE_FORMAT, parse_nodes, parse_state_counts, usable_count, usable_nodes)

from cluster import node, slurm


def usable_both_ways(partition):
    counted = usable_count(parse_state_counts(slurm("sinfo", "--partition=" + partition, "--noheader",
                                                    "--format=" + SINFO_STATE_FORMAT)))
    listed = len(usable_nodes(parse_nodes(slurm("scontrol", "show", "node", "-o")), partition))
    return counted, listed


def test_sinfo_counts_the_usable_nodes_scontrol_lists(local_cluster):
    try:
        assert usable_both_ways("debug") == (3, 3)
        slurm("scontrol", "update", "nodename=" + node(1), "state=drain", "reason=partition states test")
        assert usable_both_ways("debug") == (2, 2)
        slurm("scontrol", "update", "nodename=" + node(2), "state=down", "reason=partition states test")
        assert usable_both_ways("debug") == (1, 1)
    finally:
        # their slurmds never stopped: resuming them puts them back in service at once
        slurm("scontrol", "update", "nodename=%s[1-2]" % node(""), "state=resume")
        deadline = time.monotonic() + 60
        while usable_both_ways("debug") != (3, 3) and time.monotonic() < deadline:
            time.sleep(1)
        assert usable_both_ways("debug") == (3, 3)
