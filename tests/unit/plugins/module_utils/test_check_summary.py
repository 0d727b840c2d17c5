from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import check_summary

PATH = "/w/run/node_check/llmtrain-big.json"


def node_check_record(count, bad):
    names = ["n%04d" % i for i in range(count)]
    return dict(job_id="42", restart=2, time="2026-11-30T10:00:00Z", nodes=[dict(node=n) for n in names],
                bad=dict((n, "no network interface ib1 on %s" % n) for n in names[:bad]),
                table=["NODE   VERDICT"] + ["%s  %s" % (n, "BAD" if i < bad else "ok") for i, n in enumerate(names)])


def test_every_bad_node_of_a_misconfigured_cluster_is_counted_the_first_named():
    summary = check_summary.node_check_summary(node_check_record(2048, 2048), PATH)
    assert (summary["checked"], summary["bad_count"], len(summary["bad"])) == (2048, 2048, 32)
    assert sorted(summary["bad"]) == ["n%04d" % i for i in range(32)]
    assert summary["table"][1:33] == ["n%04d  BAD" % i for i in range(32)]
    assert summary["table"][33] == "(0 other node(s) passed, 2016 more not shown; every node's line is in %s)" % PATH
    assert len(summary["table"]) == 34


def test_a_table_of_32_nodes_is_whole():
    record = node_check_record(32, 1)
    summary = check_summary.node_check_summary(record, PATH)
    assert summary["table"] == record["table"] and summary["bad_count"] == 1


def test_a_slow_fabric_named_by_every_node_is_cut():
    reasons = "; ".join("n%04d 0.5 GB/s with its ring neighbours, 1%% of its 50 GB/s link" % i for i in range(2048))
    record = dict(job_id="42", verdict="slow_fabric", busbw=0.4, slow={}, slow_fabric="every node is slow: " + reasons,
                  table=["NODE"] + ["n%04d  ok" % i for i in range(2048)])
    summary = check_summary.network_check_summary(record, PATH)
    assert len(summary["slow_fabric"]) == check_summary.MAX_TEXT_CHARS + len(" [...]")
    assert summary["slow_fabric"].startswith("every node is slow: n0000 0.5 GB/s")
    assert (summary["verdict"], summary["checked"], summary["slow_count"], summary["limit"]) == ("slow_fabric", 2048, 0, None)
