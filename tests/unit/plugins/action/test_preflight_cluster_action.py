"""The preflight_cluster action: one call of slurm_cluster_info (what it finds given here, judged and
preflight.json written by the module's own code), the run's partition and usable nodes, the task
failing with every message at once, what the jobs wait for as warnings, and preflight.json
written in the same call (never in check mode)."""

import json
import os

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmtrain.slurm.plugins.action.preflight_cluster import ActionModule
from ansible_collections.llmtrain.slurm.plugins.modules import slurm_cluster_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_collect_run_action import Templar
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_fetch_files_action import Connection, Loader, Task


def node(name, state="idle", flags=(), gpus=0, partitions=("debug",)):
    return dict(name=name, state=state, state_flags=list(flags), partitions=list(partitions),
                gres={"gpu": dict(total=gpus, types={})} if gpus else {})


NODES = [node("n0"), node("n1", "mixed"), node("n2", flags=["drain"]), node("n3"), node("g0", gpus=8, partitions=["gpu"])]
CLUSTER = dict(version="24.11.1", partitions=[dict(name="debug", state="up", default=True),
                                              dict(name="gpu", state="up", default=False)],
               nodes=NODES, bad_nodes={"n3": dict(reason="no GPU", job_id="7", time="2026-12-01T10:00:00Z")})


def preflight(tmp_path, cluster=None, check_mode=False, args=None, **more):
    """The action's result, the arguments of each module call, and the run directory."""
    (tmp_path / "ws" / "tiny").mkdir(parents=True, exist_ok=True)
    task_vars = {"run_name": "tiny", "slurm_workspace": str(tmp_path / "ws"), "slurm_partition": None, "slurm_nodes": 2,
                 "slurm_gpus_per_node": 0, "slurm_exclude_nodes": [], "slurm_container_runtime": "none",
                 "run_gpu_policy": "strict", "slurm_reservation": None, "slurm_account": None, "slurm_qos": None}
    task_vars.update(more)
    task = Task(args or {}, check_mode)
    task.action = "llmtrain.slurm.preflight_cluster"
    plugin = ActionModule(task, Connection(), None, Loader(str(tmp_path)), Templar(), None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append((module_name, module_args))
        assert module_name == "llmtrain.slurm.slurm_cluster_info"
        found = json.loads(json.dumps(cluster or CLUSTER))
        found["judged"], problem = slurm_cluster_info.judged(found, json.loads(json.dumps(module_args["judge"])),
                                                             module_args["bad_nodes"], check_mode)
        assert problem is None
        return found

    plugin._execute_module = execute_module
    return plugin.run(task_vars=task_vars), calls, tmp_path / "ws" / "tiny"


def test_a_run_that_fits_is_recorded_in_preflight_json(tmp_path):
    result, calls, run_dir = preflight(tmp_path)
    assert not result.get("failed") and not result["changed"], result
    assert calls[0] == ("llmtrain.slurm.slurm_cluster_info", {
        "bad_nodes": str(run_dir / "bad_nodes.json"), "reservations": False, "associations": False,
        "judge": {"slurm_nodes": 2, "slurm_gpus_per_node": 0, "slurm_constraint": None, "slurm_gpu_type": None,
                  "slurm_reservation": None, "slurm_account": None, "slurm_qos": None, "slurm_sbatch_options": None,
                  "slurm_partition": None, "slurm_exclude_nodes": [], "run_gpu_policy": "strict",
                  "record_dir": str(run_dir)}})
    assert len(calls) == 1  # preflight.json is written by the same call
    # the drained node is not usable; the one the node check found bad is excluded, with why
    assert result["partition"] == "debug" and result["usable_nodes"] == ["n0", "n1"]
    record = json.loads((run_dir / "preflight.json").read_text())
    assert record["usable_nodes"] == ["n0", "n1"] and record["busy_nodes"] == ["n1"]
    assert record["excluded_nodes"] == {"n3": "no GPU (node check of job 7, 2026-12-01T10:00:00Z)"}
    assert record["slurm_version"] == "24.11.1" and record["gpu_policy"] == "strict" and record["slurm_partition"] == "debug"
    assert oct(os.stat(run_dir / "preflight.json").st_mode & 0o777) == "0o644"


def test_check_mode_asks_slurm_and_writes_nothing(tmp_path):
    result, calls, run_dir = preflight(tmp_path, check_mode=True)
    assert not result.get("failed") and [call[0] for call in calls] == ["llmtrain.slurm.slurm_cluster_info"]
    assert not (run_dir / "preflight.json").exists()


def test_what_slurm_cannot_give_fails_with_every_message_and_writes_nothing(tmp_path):
    result, calls, run_dir = preflight(tmp_path, slurm_nodes=3, slurm_exclude_nodes=["n[0-0]"], slurm_gpus_per_node=1)
    assert result["failed"] and len(calls) == 1 and not (run_dir / "preflight.json").exists()
    assert result["errors"][0].startswith("slurm_nodes=3 but partition debug has 1 usable node(s) (n1) besides the "
                                          "excluded ones (n0: named in slurm_exclude_nodes; n3: no GPU (node check of job 7")
    assert result["errors"][1].startswith("slurm_gpus_per_node=1 but only 0 usable node(s) of debug")
    assert result["msg"] == "\n".join(result["errors"])
    result, _calls, _run_dir = preflight(tmp_path, slurm_partition="h100")
    assert result["failed"] and result["msg"] == "slurm_partition=h100 does not exist: Slurm has debug, gpu."
    assert result["partition"] is None


def test_a_named_partition_its_gpus_and_a_container_are_asked_for(tmp_path):
    result, calls, _run_dir = preflight(tmp_path, slurm_partition="gpu", slurm_nodes=1, slurm_gpus_per_node=8,
                                        slurm_qos="high", slurm_container_runtime="pyxis",
                                        slurm_container_image="nvcr.io/nvidia/pytorch:24.05-py3")
    assert not result.get("failed") and result["usable_nodes"] == ["g0"], result
    args = calls[0][1]
    assert args["associations"] is True and args["container"]["runtime"] == "pyxis"
    assert args["container"]["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"


def test_the_module_s_warnings_and_the_notes_are_the_task_s_warnings(tmp_path):
    cluster = dict(CLUSTER, warnings=["bad_nodes.json cannot be used: it keeps no node off"],
                   container={"errors": [], "notes": ["pyxis: not checked on the login node"]})
    result, _calls, _run_dir = preflight(tmp_path, cluster=cluster, slurm_container_runtime="pyxis",
                                         slurm_container_image="img")
    assert result["warnings"] == ["bad_nodes.json cannot be used: it keeps no node off",
                                  "pyxis: not checked on the login node"]
    assert result["notes"] == ["pyxis: not checked on the login node"]


def test_options_are_refused(tmp_path):
    with pytest.raises(AnsibleActionFail, match="takes no options"):
        preflight(tmp_path, args={"partition": "gpu"})
