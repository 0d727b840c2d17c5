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
    assert preflight.workspace_need(dict(run, run_script="/shared/train.py")) is None
    assert preflight.workspace_need({}) is None
    assert preflight.FilterModule().filters()["workspace_need"] is preflight.workspace_need


# cluster_errors: the expected messages are what the preflight role's Jinja expression made
# of the same inputs before it became this filter.
DEBUG = dict(name="debug", state="up", default=True)
CLUSTER = dict(partitions=[DEBUG, dict(name="cpu", state="up", default=False)], bad_nodes={
    "n3": dict(reason="no network interface ib0 on n3 (it has eth0, lo)", job_id="42", time="2026-11-30T10:00:00Z")})
BAD_NODES_FILE = "/ws/runs/r/bad_nodes.json"


def node(name, gpus=None, state="idle"):
    return dict(name=name, state=state, gres={} if gpus is None else {"gpu": dict(total=gpus, types={})})


def cluster_errors(partition, usable, excluded=(), slurm_partition="debug", slurm_nodes=1, slurm_gpus_per_node=0):
    return preflight.cluster_errors(CLUSTER, partition, usable, list(excluded), slurm_partition, slurm_nodes,
                                    slurm_gpus_per_node, BAD_NODES_FILE)


def test_cluster_errors_none_when_the_run_fits():
    assert cluster_errors(DEBUG, [node("n1", 2), node("n2", 2, "mixed")], slurm_partition="", slurm_nodes=2,
                          slurm_gpus_per_node=2) == []
    assert preflight.FilterModule().filters()["cluster_errors"] is preflight.cluster_errors


def test_cluster_errors_of_a_partition_slurm_does_not_have():
    assert cluster_errors(None, [], slurm_partition="gpu", slurm_nodes=2, slurm_gpus_per_node=2) == [
        "slurm_partition=gpu does not exist: Slurm has debug, cpu."]
    assert cluster_errors(None, [], slurm_partition="") == [
        "slurm_partition=(default) does not exist: Slurm has debug, cpu."]


def test_cluster_errors_of_a_partition_that_is_not_up():
    assert cluster_errors(dict(DEBUG, state="down"), [node("n1")]) == [
        "slurm_partition=debug is DOWN: ask the administrators, or pick another partition."]


def test_cluster_errors_of_too_few_usable_nodes():
    assert cluster_errors(DEBUG, [node("n1"), node("n2")], slurm_nodes=5) == [
        "slurm_nodes=5 but partition debug has 2 usable node(s) (n1, n2): lower slurm_nodes or pick a larger "
        "partition."]


def test_cluster_errors_name_the_excluded_nodes_and_why():
    assert cluster_errors(DEBUG, [], ["n3", "n4"], slurm_partition="", slurm_nodes=3) == [
        "slurm_nodes=3 but partition debug has 0 usable node(s) (none) besides the excluded ones (n3: no network "
        "interface ib0 on n3 (it has eth0, lo) (node check of job 42, 2026-11-30T10:00:00Z); n4: named in "
        "slurm_exclude_nodes): repair them and remove them from /ws/runs/r/bad_nodes.json or slurm_exclude_nodes, "
        "or lower slurm_nodes."]
    # values as the inventory may give them, strings
    assert cluster_errors(DEBUG, [node("n1")], ["n3"], slurm_partition="", slurm_nodes="3",
                          slurm_gpus_per_node="0") == [
        "slurm_nodes=3 but partition debug has 1 usable node(s) (n1) besides the excluded ones (n3: no network "
        "interface ib0 on n3 (it has eth0, lo) (node check of job 42, 2026-11-30T10:00:00Z)): repair them and "
        "remove them from /ws/runs/r/bad_nodes.json or slurm_exclude_nodes, or lower slurm_nodes."]


def test_cluster_errors_of_too_few_nodes_with_the_gpus():
    assert cluster_errors(DEBUG, [node("n1", 1), node("n2"), node("n3", 4)], slurm_nodes=2, slurm_gpus_per_node=2) == [
        "slurm_gpus_per_node=2 but only 1 usable node(s) of debug register that many GPUs (gres/gpu): lower "
        "slurm_gpus_per_node, use 0 for CPU nodes (gloo), or fix Gres= in slurm.conf."]


def test_cluster_errors_all_at_once():
    assert cluster_errors(dict(DEBUG, state="drain"), [node("n1", 1)], slurm_nodes="2", slurm_gpus_per_node="2") == [
        "slurm_partition=debug is DRAIN: ask the administrators, or pick another partition.",
        "slurm_nodes=2 but partition debug has 1 usable node(s) (n1): lower slurm_nodes or pick a larger partition.",
        "slurm_gpus_per_node=2 but only 0 usable node(s) of debug register that many GPUs (gres/gpu): lower "
        "slurm_gpus_per_node, use 0 for CPU nodes (gloo), or fix Gres= in slurm.conf."]
