"""The local_cluster role's input check and its node list (plugins/filter/local_cluster.py,
module_utils/inputs/local_cluster.py), against the role's own defaults."""

import os

import pytest
import yaml

from ansible_collections.llmtrain.slurm.plugins.filter.local_cluster import local_cluster_errors, local_cluster_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def defaults(**changed):
    with open(os.path.join(ROOT, "roles/local_cluster/defaults/main.yml"), encoding="utf-8") as handle:
        values = yaml.safe_load(handle)
    values.update(changed)
    return values


def test_the_defaults_as_root_pass():
    assert local_cluster_errors(defaults(), "0", "2") == []
    assert local_cluster_errors(defaults(local_cluster_release="24.11", local_cluster_accounting=True), "0\n", "2") == []


def test_another_user_is_refused_naming_the_uid_and_the_fix():
    assert local_cluster_errors(defaults(), "1000", "2") == [
        "local_cluster: the role must run as root (it runs as uid 1000): run as root or with become: true"]


@pytest.mark.parametrize("name, value, says", [
    ("local_cluster_nodes", 0, "must be a number from 1 to 245"),
    ("local_cluster_nodes", 246, "must be a number from 1 to 245"),
    ("local_cluster_nodes", "three", "must be a number from 1 to 245"),
    ("local_cluster_cpus_per_node", 0, "must be a whole number >= 1, or null"),
    ("local_cluster_gres_gpus", 17, "must be a number from 0 to 16"),
    ("local_cluster_gres_gpu_type", "a100 80gb", "must be a GPU type name"),
    ("local_cluster_sched_interval", 0, "whole number of seconds >= 1"),
    ("local_cluster_cred_expire", 4, "must be at least 5"),
    ("local_cluster_node_prefix", "Node_", "it becomes a hostname"),
    ("local_cluster_partition", "debug queue", "only letters, digits, - and _"),
    ("local_cluster_dir", "var/lib/c", "must be an absolute path"),
    ("local_cluster_dir", "/var/lib/c\nPartitionName=x", "must be an absolute path"),
    ("local_cluster_subnet_prefix", "10.300.0", "three octets"),
    ("local_cluster_subnet_prefix", "10.0.0.1", "three octets"),
    ("local_cluster_netns_prefix", "llmtrain-nodes-", "1 to 9 characters"),
    ("local_cluster_bridge", "br-0", "1 to 15 characters of a-z and 0-9"),
    ("local_cluster_roots_dir", "/var/cache/../x y", "must be an absolute path"),
    ("local_cluster_release", "24.11/../..", "must be system or a Slurm release"),
    ("local_cluster_release", "23.02", "names a Debian suite for: 24.11, 26.05"),
])
def test_a_bad_value_is_refused_naming_the_variable_and_the_value(name, value, says):
    found = local_cluster_errors(defaults(**{name: value}), "0", "2")
    assert len(found) == 1 and found[0].startswith("local_cluster: %s=%s must" % (name, value)) and says in found[0], found


def test_more_cpus_than_the_machine_binds_is_refused_with_task_affinity_only():
    found = local_cluster_errors(defaults(local_cluster_cpus_per_node=4), "0", "2")
    assert len(found) == 1 and "more than the 2 CPUs of this machine" in found[0] and "set it to at most 2" in found[0]
    assert local_cluster_errors(defaults(local_cluster_cpus_per_node=4, local_cluster_task_plugin="task/none"), "0", "2") == []


def test_a_release_root_needs_its_suite_and_for_accounting_its_slurmdbd():
    suites = {"24.11": "trixie", "26.05": "Forky Fox"}
    assert local_cluster_errors(defaults(local_cluster_release="26.05", local_cluster_release_suites=suites), "0", "2") == [
        "local_cluster: local_cluster_release_suites must name a Debian suite (such as trixie) for each release"]
    found = local_cluster_errors(defaults(local_cluster_release="24.11", local_cluster_accounting=True,
                                          local_cluster_release_packages=["slurmctld", "slurmd"]), "0", "2")
    assert len(found) == 1 and "add slurmdbd to it" in found[0]
    # this machine's Slurm has no root of its own to lack it
    assert local_cluster_errors(defaults(local_cluster_accounting=True, local_cluster_release_packages=[]), "0", "2") == []


def test_every_wrong_value_is_said_at_once():
    found = local_cluster_errors(defaults(local_cluster_nodes=0, local_cluster_bridge="x.y", local_cluster_cred_expire=1), "0", "2")
    assert [message.split("=")[0] for message in found] == [
        "local_cluster: local_cluster_nodes", "local_cluster: local_cluster_cred_expire", "local_cluster: local_cluster_bridge"]


def test_node_i_has_its_name_address_namespace_veth_and_pid_file():
    nodes = local_cluster_nodes(3, "slurm-worker-", "10.213.0", "llmt-", "/var/lib/c")
    assert nodes[2] == {"name": "slurm-worker-2", "ip": "10.213.0.12", "namespace": "llmt-slurm-worker-2", "veth": "llmtv2",
                        "pidfile": "/var/lib/c/run/slurmd-slurm-worker-2.pid"}
    assert [node["name"] for node in nodes] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
    assert local_cluster_nodes("2", "n", "10.1.2", "a-b-", "/c", netns=True) == [
        {"namespace": "a-b-n0", "veth": "abv0", "address": "10.1.2.10/24"},
        {"namespace": "a-b-n1", "veth": "abv1", "address": "10.1.2.11/24"}]
    # a count that is no number makes none here: the input check names it
    assert local_cluster_nodes("three", "n", "10.1.2", "p", "/c") == []
