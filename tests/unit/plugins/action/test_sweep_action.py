"""The sweep action's look at the cluster before anything is made: the members whose partition, nodes
or site settings differ from the sweep's (which preflight checked) judged as preflight judges a run,
in one call of slurm_cluster_info, each message naming the members; a sweep whose members all share
the sweep's settings asks Slurm nothing more."""

import json

from ansible_collections.llmtrain.slurm.plugins.action.sweep import JUDGED, ActionModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.site_check import SITE_VARIABLES
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_collect_run_action import Templar
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_fetch_files_action import Connection, Loader, Task
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_preflight_cluster_action import CLUSTER

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
