"""The shipped inventories parse, have the shape the roles expect, and hold only values the
input checks accept."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import nccl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKED_PREFIXES = ("slurm_", "preflight_", nccl.PREFIX)


def ansible_inventory():
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    return beside if os.path.exists(beside) else shutil.which("ansible-inventory")


_listed = {}


def listed(name):
    """`ansible-inventory --list` of inventories/<name>, parsed (once per session)."""
    if name not in _listed:
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        result = subprocess.run([ansible_inventory(), "-i", os.path.join("inventories", name), "--list"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        _listed[name] = json.loads(result.stdout)
    return _listed[name]


def hostvars(name, host):
    return listed(name)["_meta"]["hostvars"].get(host, {})


def group_hosts(name, group):
    return listed(name).get(group, {}).get("hosts", [])


def checked_values(values):
    return {k: v for k, v in values.items() if k.startswith(CHECKED_PREFIXES)}


def worker_env(name, host):
    env, errors = nccl.build_env({k: v for k, v in hostvars(name, host).items() if k.startswith(nccl.PREFIX)})
    assert errors == [], "%s/%s: %s" % (name, host, errors)
    return env


@pytest.mark.parametrize("name", ["local", "example", "k8s"])
def test_inventory_shape(name):
    assert len(group_hosts(name, "slurm_login")) == 1
    assert group_hosts(name, "slurm_workers") == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]


@pytest.mark.parametrize("name", ["example", "k8s"])
def test_inventory_values_pass_the_input_checks(name):
    login = group_hosts(name, "slurm_login")[0]
    values = hostvars(name, login)
    assert inputs.validate(checked_values(values)) == []
    assert values["local_cluster_enabled"] is False
    assert values["slurm_nodes"] == len(group_hosts(name, "slurm_workers"))
    assert values["slurm_gpus_per_node"] == values["slurm_procs_per_node"] == 4
    assert values["ansible_python_interpreter"] == "/usr/bin/python3"
    assert set(values["pretrain_model"]) == {"n_layer", "n_head", "n_embd", "block_size"}
    assert values["pretrain_model"]["n_embd"] % values["pretrain_model"]["n_head"] == 0
    assert values["run_force"] is False
    for worker in group_hosts(name, "slurm_workers"):
        env = worker_env(name, worker)
        assert env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_IB_DISABLE"] == "0"
        assert "NCCL_DEBUG" not in env  # off until asked for


def test_example_per_node_override():
    default, override = worker_env("example", "slurm-worker-0"), worker_env("example", "slurm-worker-2")
    assert default["NCCL_IB_HCA"] == "ib7s"
    assert default["UCX_NET_DEVICES"] == "ib7s400p0:1,ib7s400p1:1"
    assert override["NCCL_IB_HCA"] != default["NCCL_IB_HCA"]
    assert override["UCX_NET_DEVICES"] != default["UCX_NET_DEVICES"]
    assert override["NCCL_SOCKET_IFNAME"] == default["NCCL_SOCKET_IFNAME"]


def test_example_login_is_reached_by_ssh():
    values = hostvars("example", group_hosts("example", "slurm_login")[0])
    assert values.get("ansible_connection", "ssh") == "ssh"
    assert values["ansible_user"]


def test_k8s_login_is_the_client_pod_as_user():
    values = hostvars("k8s", group_hosts("k8s", "slurm_login")[0])
    assert values["ansible_connection"] == "kubernetes.core.kubectl"
    assert values["ansible_kubectl_pod"].startswith("slurm-client-")
    assert values["ansible_become"] is True
    assert values["ansible_become_method"] == "su"
    assert values["ansible_become_user"] == "user"
    assert values["slurm_workspace"].startswith("/home/user/")


def test_requirements_declare_kubernetes_core():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(ROOT, "requirements.yml")) as handle:
        requirements = yaml.safe_load(handle)
    names = {c["name"]: c.get("version") for c in requirements["collections"]}
    assert names["kubernetes.core"] == ">=3.0.0"
