from ansible_collections.llmtrain.slurm.plugins.filter import preflight
from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs


def test_excluded_reason_of_a_node_the_node_check_found_bad():
    bad_nodes = {"n2": dict(reason="no network interface ib0 on n2 (it has eth0, lo)", job_id="42",
                            time="2026-11-30T10:00:00Z")}
    assert preflight.excluded_reason("n2", bad_nodes) == (
        "no network interface ib0 on n2 (it has eth0, lo) (node check of job 42, 2026-11-30T10:00:00Z)")
    assert preflight.FilterModule().filters()["excluded_reason"] is preflight.excluded_reason


def test_excluded_reason_of_a_node_only_the_user_named():
    bad_nodes = {"n2": dict(reason="x", job_id="42", time="t")}
    assert preflight.excluded_reason("n7", bad_nodes) == "named in slurm_exclude_nodes"
    assert preflight.excluded_reason("n7", None) == "named in slurm_exclude_nodes"
    # an entry without a reason (edited by hand) is not taken for a node check's verdict
    assert preflight.excluded_reason("n2", {"n2": {}}) == "named in slurm_exclude_nodes"
    assert preflight.excluded_reason("n2", {"n2": "bad"}) == "named in slurm_exclude_nodes"


def test_the_probe_filters_are_gone():
    filters = preflight.FilterModule().filters()
    assert "probe_errors" not in filters and "probe_summary" not in filters


def test_per_node_nccl_values_are_checked_and_attributed():
    errors = preflight.input_errors(dict(slurm_nodes=2), {"n1": dict(nccl_env_socket_ifname="ib0"),
                                                          "n2": dict(nccl_env_ib_hca="mlx5_0:x", other=1)})
    assert len(errors) == 1 and errors[0].startswith("nccl_env_ib_hca='mlx5_0:x'")
    assert errors[0].endswith("(host vars of n2)")


def test_gpu_mismatch_line():
    assert preflight.gpu_mismatch_line(dict(name="n1", reason="r", fix="f")) == "n1: r. Likely fix: f."


def test_usable_nodes_of_a_partition():
    nodes = [dict(name="a", state="idle", state_flags=[], partitions=["debug"]),
             dict(name="b", state="idle", state_flags=["drain"], partitions=["debug"]),
             dict(name="c", state="mixed", state_flags=[], partitions=["gpu", "debug"]),
             dict(name="d", state="down", state_flags=[], partitions=["debug"]),
             dict(name="e", state="idle", state_flags=[], partitions=["gpu"])]
    assert [n["name"] for n in preflight.usable_nodes(nodes, "debug")] == ["a", "c"]


def test_out_of_service_nodes_are_the_rest_of_the_partition():
    nodes = [dict(name="a", state="idle", state_flags=[], partitions=["debug"]),
             dict(name="b", state="idle", state_flags=["drain"], partitions=["debug"]),
             dict(name="c", state="allocated", state_flags=["draining"], partitions=["debug"]),
             dict(name="d", state="down", state_flags=["not_responding"], partitions=["debug"]),
             dict(name="e", state="down", state_flags=[], partitions=["gpu"]),
             dict(name="f", state="mixed", state_flags=[], partitions=["debug"])]
    lost = preflight.out_of_service_nodes(nodes, "debug")
    assert [n["name"] for n in lost] == ["b", "c", "d"]
    usable = preflight.usable_nodes(nodes, "debug")
    assert sorted(n["name"] for n in lost + usable) == ["a", "b", "c", "d", "f"]
    assert preflight.FilterModule().filters()["out_of_service_nodes"] is preflight.out_of_service_nodes


def test_workspace_need_filter():
    run = dict(pretrain_model=dict(n_layer=2, n_head=2, n_embd=64, block_size=64), slurm_nodes=3,
               slurm_procs_per_node=2)
    need = preflight.workspace_need(run)
    assert need == dict(zip(("bytes", "how"), inputs.workspace_need(run)))
    assert need["bytes"] > 4 * 1567623 and need["how"].startswith("4 checkpoints of about ")
    assert preflight.workspace_need(dict(run, pretrain_script="/shared/train.py")) is None
    assert preflight.workspace_need({}) is None
    assert preflight.FilterModule().filters()["workspace_need"] is preflight.workspace_need
