import inspect
import json

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.gpu_check import compare
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import SlurmError
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import parse_nodes, usable
from ansible_collections.llmtrain.slurm.plugins.modules import slurm_gpu_check
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, fixture, run


# Recorded on a local cluster with local_cluster_gres_gpus=2, nodes gpu-worker-0..2, and
# gpu-worker-1 drained by hand.
NODES_TEXT = fixture("scontrol_show_node_gres.txt")
PARTITIONS_TEXT = fixture("scontrol_show_partition_gres.txt")


def detection(node, smi=0, torch_count=0, reason=None):
    return dict(hostname=node, slurm_node=node, gpus=[], count=smi or torch_count, source="none",
                nvidia_smi_count=smi, torch_count=torch_count,
                torch=dict(importable=True, version="2.13.0", cuda_version="12.8" if torch_count else None,
                           device_count=torch_count),
                reason=reason)


def node(name="n1", gpus=0, state="idle", flags=(), reason=None):
    return dict(name=name, state=state, state_flags=list(flags), reason=reason,
                gres={"gpu": dict(total=gpus, types={}, untyped=gpus)} if gpus else {}, partitions=["debug"])


def test_recorded_nodes_parse_with_gres_and_drain():
    nodes = {n["name"]: n for n in parse_nodes(NODES_TEXT)}
    assert {n["gres"]["gpu"]["total"] for n in nodes.values()} == {2}
    assert usable(nodes["gpu-worker-0"]) and usable(nodes["gpu-worker-2"])
    assert not usable(nodes["gpu-worker-1"])
    assert nodes["gpu-worker-1"]["reason"].startswith("maintenance by the GPU check test [root@")


def test_honest_zero_matches():
    row = compare(node(gpus=0), detection("n1", reason="nvidia-smi not found"), "python3")
    assert row["match"] and row["registered"] == 0 and row["detected"] == 0


def test_registered_more_than_detected_names_driver_or_gres_fix():
    row = compare(node(gpus=2), detection("n1", reason="nvidia-smi not found"), "python3")
    assert not row["match"]
    assert row["reason"] == "Slurm registers gpu:2, the node detects 0 (nvidia-smi not found)"
    assert "NVIDIA driver on n1" in row["fix"] and "Gres=gpu:0 for NodeName=n1" in row["fix"]


def test_detected_more_than_registered_says_declare_them():
    row = compare(node(gpus=0), detection("n1", smi=4, torch_count=4), "python3")
    assert not row["match"] and "declare them: Gres=gpu:4 for NodeName=n1" in row["fix"]


def test_torch_seeing_fewer_than_nvidia_smi():
    row = compare(node(gpus=8), detection("n1", smi=8, torch_count=0), "/venv/bin/python")
    assert not row["match"] and "torch 2.13.0 in /venv/bin/python sees 0" in row["reason"]
    assert "CUDA build of torch" in row["fix"]


def test_drained_or_inval_node_reports_slurms_reason():
    row = compare(node(gpus=2, state="idle", flags=["drain"],
                       reason="gres/gpu count reported lower than configured (0 < 2)"), None, "python3")
    assert not row["match"]
    assert row["reason"] == "node is IDLE+DRAIN: gres/gpu count reported lower than configured (0 < 2)"
    assert "scontrol update nodename=n1 state=resume" in row["fix"]
    assert not usable(node(state="inval"))


def test_silent_node():
    row = compare(node(), None, "/opt/py")
    assert not row["match"] and "/opt/py exists on n1" in row["fix"]


def test_gres_request_only_when_every_node_registers_the_same_count():
    assert slurm_gpu_check.requested_gres([node(gpus=4), node(gpus=4)], "auto") == 4
    assert slurm_gpu_check.requested_gres([node(gpus=4), node(gpus=2)], "auto") == 0
    assert slurm_gpu_check.requested_gres([node(gpus=4)], "never") == 0
    assert slurm_gpu_check.requested_gres([node(gpus=0)], "auto") == 0


def test_select_nodes_by_partition_and_hostlist():
    nodes = [node("a1"), node("a2"), dict(node("b1"), partitions=["other"])]
    assert [n["name"] for n in slurm_gpu_check.select_nodes(nodes, "debug", None)] == ["a1", "a2"]
    assert [n["name"] for n in slurm_gpu_check.select_nodes(nodes, None, ["a[1-2]", "b1"])] == ["a1", "a2", "b1"]
    with pytest.raises(SlurmError, match="no node named zz"):
        slurm_gpu_check.select_nodes(nodes, None, ["zz"])


def test_detections_keyed_by_slurm_node_name_ignoring_noise():
    out = "srun: warning\n%s\nnot json {\n%s\n" % (json.dumps(detection("n1")), json.dumps(detection("n2")))
    assert sorted(slurm_gpu_check.parse_detections(out)) == ["n1", "n2"]


SCONTROL_NODES = ["/usr/bin/scontrol", "show", "node", "-o"]
SCONTROL_PARTITIONS = ["/usr/bin/scontrol", "show", "partition", "-o"]


def test_one_srun_for_all_usable_nodes_and_strict_failure(monkeypatch, capsys):
    step_out = "\n".join(json.dumps(detection(n, reason="nvidia-smi not found")) for n in ("gpu-worker-0", "gpu-worker-2"))
    srun = ["/usr/bin/srun", "--job-name=llmtrain-gpu-check", "--nodes=2", "--ntasks=2",
            "--ntasks-per-node=1", "--nodelist=gpu-worker-0,gpu-worker-2", "--time=5",
            "--kill-on-bad-exit=0", "--partition=debug", "--gres=gpu:2", "--",
            "/v/bin/python", "-c", inspect.getsource(gpu), "/v/bin/python"]
    commands = Slurm(monkeypatch, [(SCONTROL_NODES, (0, NODES_TEXT, "")), (SCONTROL_PARTITIONS, (0, PARTITIONS_TEXT, "")),
                                   (srun, (0, step_out, ""))], bins=("scontrol", "srun"))
    result = run(slurm_gpu_check.main, dict(partition="debug", python="/v/bin/python", mode="strict"), capsys)
    commands.done()
    assert result["failed"] and result["mismatches"] == ["gpu-worker-0", "gpu-worker-1", "gpu-worker-2"]
    lines = result["msg"].splitlines()
    assert lines[0] == "GPU check failed on 3 of 3 node(s):"
    assert lines[1].startswith("gpu-worker-0: Slurm registers gpu:2, the node detects 0")
    assert lines[2].startswith("gpu-worker-1: node is IDLE+DRAIN: maintenance by the GPU check test")
    assert result["table"][0].split() == ["NODE", "STATE", "SLURM", "NVIDIA-SMI", "TORCH", "MATCH"]


def test_unknown_partition_is_named(monkeypatch, capsys):
    commands = Slurm(monkeypatch, [(SCONTROL_NODES, (0, NODES_TEXT, "")), (SCONTROL_PARTITIONS, (0, PARTITIONS_TEXT, ""))],
                     bins=("scontrol", "srun"))
    result = run(slurm_gpu_check.main, dict(partition="gpu"), capsys)
    commands.done()  # nothing submitted
    assert result["failed"] and result["msg"] == "partition 'gpu' does not exist; Slurm has debug"
