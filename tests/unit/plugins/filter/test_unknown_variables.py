from collections.abc import Mapping

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.filter import variables
from ansible_collections.llmtrain.slurm.plugins.filter.variables import unknown_variables


class NamesOnly(Mapping):
    """A compute node's host vars whose values must not be read (hostvars templates a value on access)."""

    def __init__(self, *names):
        self.names = names

    def __iter__(self):
        return iter(self.names)

    def __len__(self):
        return len(self.names)

    def __getitem__(self, name):
        raise AssertionError("%s read: only the names of a compute node's host vars are needed" % name)


def test_the_filter_is_registered():
    assert variables.FilterModule().filters()["unknown_variables"] is unknown_variables


def test_the_prefixes_are_the_roles_names():
    assert sorted(variables.prefixes()) == ["deploy_", "inference_", "local_cluster_", "nccl_env_", "preflight_",
                                            "pretrain_", "run_", "slurm_", "status_", "sweep_"]


def test_a_misspelt_name_is_refused_naming_the_closest():
    assert unknown_variables(["slurm_node", "pretrain_step", "slurm_partition", "pretrain_steps"]) == [
        "pretrain_step is not a variable of llmtrain.slurm: did you mean pretrain_steps?",
        "slurm_node is not a variable of llmtrain.slurm: did you mean slurm_nodes?"]


def test_a_name_close_to_none_is_refused_naming_the_roles_reference():
    # a shared prefix alone is no likeness: pretrain_watch is not suggested
    assert unknown_variables(["pretrain_xyzzy"]) == [
        "pretrain_xyzzy is not a variable of llmtrain.slurm: remove it, or find the one meant in "
        "ansible-doc -t role llmtrain.slurm.pretrain."]
    assert unknown_variables(["nccl_env_zzzzzzzz"])[0].endswith("ansible-doc -t role llmtrain.slurm.nccl_env.")


def test_a_renamed_name_is_refused_naming_its_new_name():
    assert unknown_variables(["pretrain_run_name", "deploy_extra_files", "preflight_gpu_policy"]) == [
        "deploy_extra_files was renamed to run_extra_files: set run_extra_files instead.",
        "preflight_gpu_policy was renamed to run_gpu_policy: set run_gpu_policy instead.",
        "pretrain_run_name was renamed to run_name: set run_name instead."]
    assert unknown_variables(["pretrain_container_image"]) == [
        "pretrain_container_image was removed: set slurm_container_runtime: pyxis and slurm_container_image instead."]


def test_every_former_name_is_undeclared_and_every_new_name_declared():
    declared = set().union(*variables.declared().values())
    assert sorted((set(variables.RENAMED) | set(variables.REMOVED)) & declared) == []
    assert sorted(set(variables.RENAMED.values()) - declared) == []
    assert len(unknown_variables(sorted(variables.RENAMED) + sorted(variables.REMOVED))) == (
        len(variables.RENAMED) + len(variables.REMOVED))


def test_declared_and_computed_names_pass():
    assert unknown_variables(["slurm_nodes", "run_name", "nccl_env_ib_hca", "local_cluster_state", "status_log_lines",
                              "run_dir", "run_pipeline", "run_training_pending"]) == []


def test_facts_are_no_settings():
    """slurm_cluster_info returns the fact slurm_cluster: the plays after preflight have it as a variable."""
    assert unknown_variables(["slurm_cluster", "slurm_nodes"], None, ["slurm_cluster", "discovered_interpreter_python"]) == []
    assert unknown_variables(["slurm_cluster"])[0].startswith("slurm_cluster is not a variable of llmtrain.slurm")


def test_other_names_and_private_ones_are_left_alone():
    assert unknown_variables(["my_template_value", "runtime", "slurmish", "inventory_hostname", "ansible_host",
                              "_run_names", "_private", "_slurm_node", "hostvars"]) == []


def test_a_compute_nodes_misspelt_host_var_is_refused_once_naming_the_nodes():
    workers = dict(("n%d" % i, NamesOnly("nccl_env_socket_ifnam", "nccl_env_ib_hca", "slurm_nodes", "my_label",
                                         "inventory_hostname")) for i in range(1, 6))
    workers["n0"] = NamesOnly("nccl_env_ib_hcas", "nccl_env_ib_hca")
    assert unknown_variables(["slurm_nodes"], workers) == [
        "nccl_env_ib_hcas is not a variable of llmtrain.slurm: did you mean nccl_env_ib_hca? (host vars of n0)",
        "nccl_env_socket_ifnam is not a variable of llmtrain.slurm: did you mean nccl_env_socket_ifname? "
        "(host vars of n1, n2, n3 and 2 more)"]


def test_a_name_of_the_play_host_that_the_nodes_share_is_told_once():
    """Group vars of `all` reach every compute node too: one message, not one per node."""
    workers = dict(("n%d" % i, NamesOnly("slurm_node", "slurm_nodes")) for i in range(2048))
    assert unknown_variables(["slurm_node", "slurm_nodes"], workers) == [
        "slurm_node is not a variable of llmtrain.slurm: did you mean slurm_nodes?"]


def test_the_input_must_be_names():
    with pytest.raises(AnsibleFilterError, match="list of variable names"):
        unknown_variables("slurm_node")
    assert unknown_variables([], None) == []
