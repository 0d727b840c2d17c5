"""The sweep action's look at the cluster before anything is made: the members whose partition, nodes
or site settings differ from the sweep's (which preflight checked) judged as preflight judges a run,
in one call of slurm_cluster_info, each message naming the members; a sweep whose members all share
the sweep's settings asks Slurm nothing more."""

import json
import os

from ansible_collections.llmtrain.slurm.plugins.action.sweep import JUDGED, ActionModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.site_check import SITE_VARIABLES
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_collect_run_action import Templar
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_fetch_files_action import Connection, Loader, Task
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_preflight_cluster_action import CLUSTER
from ansible_collections.llmtrain.slurm.tests.unit.jobs import golden  # the roles' defaults, as the job scripts take them

VALUES = {"run_name": "sizes", "slurm_workspace": "/ws", "slurm_partition": None, "slurm_nodes": 1, "slurm_gpus_per_node": 0,
          "slurm_exclude_nodes": [], "run_gpu_policy": "strict"}


def cluster_errors(tmp_path, grid):
    found, errors = members({"name": "sizes", "grid": grid}, list(JUDGED) + ["pretrain_learning_rate"], VALUES)
    assert errors == []
    plugin = ActionModule(Task({}, False), Connection(), None, Loader(str(tmp_path)), Templar(), None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append((module_name, module_args))
        return json.loads(json.dumps(CLUSTER))

    plugin._execute_module = execute_module
    return plugin.cluster_errors(found, VALUES, {}), calls


def test_the_judged_variables_are_preflights():
    assert set(SITE_VARIABLES) <= set(JUDGED) and {"slurm_partition", "slurm_exclude_nodes", "run_gpu_policy"} <= set(JUDGED)


def test_a_member_whose_nodes_exceed_the_partition_is_refused_naming_it_and_the_fix(tmp_path):
    errors, calls = cluster_errors(tmp_path, {"slurm_nodes": [1, 2, 3], "pretrain_learning_rate": [1e-3, 3e-3]})
    # debug has n0 and n1 usable (n2 drained, n3 a bad node): 3 nodes do not fit, 2 do
    assert len(calls) == 1 and calls[0][1]["bad_nodes"] == "/ws/sizes/bad_nodes.json"
    assert len(errors) == 1 and errors[0].startswith(
        "sweep members sizes-learning_rate0.001-nodes3, sizes-learning_rate0.003-nodes3: slurm_nodes=3 but partition "
        "debug has 2 usable node(s) (n0, n1"), errors
    assert "lower slurm_nodes" in errors[0]


def test_a_member_on_a_partition_of_another_kind_is_judged_by_its_own(tmp_path):
    errors, _calls = cluster_errors(tmp_path, {"slurm_partition": ["gpu", "nope"]})
    assert len(errors) == 1 and errors[0].startswith("sweep member sizes-partitionnope: "), errors


def test_members_that_share_the_sweeps_settings_ask_slurm_nothing_more(tmp_path):
    assert cluster_errors(tmp_path, {"pretrain_learning_rate": [1e-3, 3e-3]}) == ([], [])


def watched(tmp_path, polls):
    """The action's state=watch, curves=end over a sweep of two members, the module answering polls
    (one result per call, in order): (the action's result, the module calls' states and curves)."""
    task_vars = dict(golden.variables("ours"), sweep={"name": "lr", "grid": {"pretrain_learning_rate": [1e-3, 3e-3]}},
                     sweep_parallel=2, sweep_retries=1, run_results_dir=str(tmp_path / "runs"))
    plugin = ActionModule(Task({"state": "watch", "curves": "end"}, False), Connection(), None, Loader(str(tmp_path)),
                          Templar(), None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append((module_args["state"], module_args["curves"]))
        return json.loads(json.dumps(polls[len(calls) - 1]))

    plugin._execute_module = execute_module
    return plugin.run(task_vars=task_vars), calls


def poll(*states, **history):
    names = ["lr-learning_rate0.001", "lr-learning_rate0.003"]
    members = [dict(name=name, state=state, tries=2 if state == "failed" else 1, progress=dict(step=10, loss=2.0 + i),
                    ended=["90_1 FAILED, exit code 1:0, its log /ws/%s/logs/llmtrain-%s-91.out" % (name, name)]
                    if state == "failed" else [], **history) for i, (name, state) in enumerate(zip(names, states))]
    return dict(changed=False, members=members, counts=dict((s, list(states).count(s)) for s in ("running", "pending", "failed")))


def test_the_watch_reads_the_history_once_at_its_last_poll_and_fails_naming_each_member_still_failed(tmp_path):
    result, calls = watched(tmp_path, [poll("running", "pending")])
    assert calls == [("watch", False)] and not result.get("failed") and "members.json" in os.listdir(result["local_dir"])
    history = dict(curve=[[10, 2.0]], final_loss=2.0, source="metrics")
    result, calls = watched(tmp_path, [poll("done", "failed"), poll("done", "failed", **history)])
    assert calls == [("watch", False), ("status", True)]
    assert result["failed"] and result["msg"].startswith(
        "1 member(s) of sweep lr failed: lr-learning_rate0.003 (90_1 FAILED, exit code 1:0, its log "), result["msg"]
    assert result["msg"].endswith("runs/lr/sweep.md compares the members.")
    assert sorted(os.listdir(result["local_dir"])) == ["members.json", "sweep.md", "sweep.png"]
