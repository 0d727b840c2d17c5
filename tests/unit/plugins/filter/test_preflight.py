from ansible_collections.llmtrain.slurm.plugins.filter import preflight
from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs

FOUND = dict(node="n1", python="/v/bin/python", python_version="3.11.7",
             torch=dict(importable=True, version="2.13.0+cpu"), interfaces=["eth0", "lo"],
             missing_interfaces=[], workspace_shared=True, workspace_writable=True)


def test_a_healthy_node():
    assert preflight.probe_errors("n1", {"n1": FOUND}, "/v/bin/python", "/w") == []
    assert preflight.probe_summary("n1", {"n1": FOUND}).split() == ["ok", "3.11.7/2.13.0+cpu", "ok"]


def test_each_finding_names_the_variable_and_fix():
    bad = dict(FOUND, torch=dict(importable=False, error="ModuleNotFoundError: No module named 'torch'"),
               missing_interfaces=["ib0"], workspace_shared=False, workspace_writable=False)
    errors = preflight.probe_errors("n1", {"n1": bad}, "/v/bin/python", "/w")
    assert [e.split(" ")[0] for e in errors] == ["slurm_python=/v/bin/python", "no", "slurm_workspace=/w",
                                                 "slurm_workspace=/w"]
    assert "no network interface ib0 on n1 (it has eth0, lo)" in errors[1]
    assert preflight.probe_summary("n1", {"n1": bad}).split() == ["NOT", "SHARED", "3.11.7/NO", "TORCH", "missing", "ib0"]


def test_a_silent_node():
    assert preflight.probe_errors("n2", {"n1": FOUND}, "py", "/w") == [
        "n2 printed nothing in the probe step: check that slurm_python=py runs there (after slurm_env_setup)."]
    assert preflight.probe_summary("n2", {"n1": FOUND}) == "no answer"


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
