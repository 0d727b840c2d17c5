"""playbooks/preflight.yml on the local cluster: a per-node table when all is well, and a
message naming the variable and the fix for every bad input, before any job is submitted."""

import json
import re

import pytest

from cluster import run_playbook, slurm

NODES = ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
ASKS_SLURM = "Ask Slurm for its partitions and nodes"
PROBES = "Probe every usable node"


def preflight(*extra_vars, check=False):
    args = []
    for name, value in extra_vars:
        args += ["-e", json.dumps({name: value})]
    return run_playbook("preflight.yml", *args, check=check)


def test_local_cluster_passes_with_a_table_of_every_node(local_cluster):
    result = preflight()
    table = re.findall(r'"(slurm-worker-\d[^"]*)"', result.output)
    assert [row.split()[0] for row in table] == NODES, result.output
    for row in table:
        # node, state, Slurm GPUs, nvidia-smi, torch, match, workspace, python/torch, interfaces
        assert row.split()[1:] == ["idle", "0", "0", "0", "yes", "ok", row.split()[7], "ok"], row
        assert row.split()[7].startswith("3.") and "/2.13.0" in row.split()[7]  # torch as the nodes import it


def test_gpu_mismatch_fails_strict_naming_each_node_and_passes_report(local_cluster):
    try:
        run_playbook("local_cluster.yml", "-e", "local_cluster_gres_gpus=2")
        strict = preflight(check=False)
        assert strict.rc != 0
        for name in NODES:
            assert "%s: Slurm registers gpu:2, the node detects 0" % name in strict.output
        report = preflight(("preflight_gpu_policy", "report"))
        assert report.rc == 0, report.output[-3000:]
        rows = re.findall(r'"(slurm-worker-\d[^"]*)"', report.output)
        assert [row.split()[2:6] for row in rows] == [["2", "0", "0", "NO"]] * 3, report.output[-3000:]
    finally:
        run_playbook("local_cluster.yml")


BAD_INPUTS = [
    ("slurm_nodes", 0, "slurm_nodes=0 must be a whole number >= 1"),
    ("slurm_nodes", "many", "argument 'slurm_nodes' is of type str and we were unable to convert to int"),
    ("slurm_partition", "gpu;id", "slurm_partition='gpu;id' is not a partition name"),
    ("slurm_procs_per_node", 0, "slurm_procs_per_node=0 must be a whole number >= 1"),
    ("slurm_cpus_per_task", -2, "slurm_cpus_per_task=-2 must be a whole number >= 1"),
    ("slurm_mem_per_cpu", "8GB", "slurm_mem_per_cpu='8GB' is not a Slurm memory size"),
    ("slurm_time_limit", "4h", "slurm_time_limit='4h' is not a Slurm time"),
    ("slurm_master_port", 80, "slurm_master_port=80 must be auto"),
    ("slurm_workspace", "relative/dir", "slurm_workspace='relative/dir' must be an absolute path"),
    ("slurm_python", "", "slurm_python='' must name the Python interpreter"),
    ("slurm_env_setup", "module load cuda", "slurm_env_setup='module load cuda' must be a list of shell lines"),
    ("preflight_gpu_policy", "lenient", "value of preflight_gpu_policy must be one of: strict, report, got: lenient"),
    ("nccl_env_debug", "LOUD", "nccl_env_debug='LOUD' is not a valid NCCL_DEBUG"),
    ("nccl_env_socket_ifname", "eth0;id", "nccl_env_socket_ifname='eth0;id' is not a valid NCCL_SOCKET_IFNAME"),
    ("nccl_env_ib_hca", "mlx5_0:x", "nccl_env_ib_hca='mlx5_0:x' is not a valid NCCL_IB_HCA"),
    ("pretrain_steps", 0, "pretrain_steps=0 must be a whole number >= 1"),
    ("pretrain_run_name", "../x", "pretrain_run_name='../x' must be 1-64 letters"),
    ("inference_prompts", [], "inference_prompts=[] must be a non-empty list"),
    # a later stage's argument spec, checked by preflight through that stage's validate entry point
    ("inference_seed", "abc", "argument 'inference_seed' is of type str and we were unable to convert to int"),
]


@pytest.mark.parametrize("name, value, message", BAD_INPUTS, ids=[b[0] + "=" + str(b[1]) for b in BAD_INPUTS])
def test_bad_input_is_rejected_before_slurm_is_asked(local_cluster, name, value, message):
    result = preflight((name, value), check=False)
    assert result.rc != 0
    assert message in result.output, result.output[-3000:]
    assert ASKS_SLURM not in result.output and PROBES not in result.output


@pytest.mark.parametrize("name, value, message", [
    ("slurm_nodes", 5, "slurm_nodes=5 but partition debug has 3 usable node(s) (slurm-worker-0, slurm-worker-1, slurm-worker-2)"),
    ("slurm_partition", "gpu", "slurm_partition=gpu does not exist: Slurm has debug"),
    ("slurm_gpus_per_node", 2, "slurm_gpus_per_node=2 but only 0 usable node(s) of debug register that many GPUs"),
])
def test_what_slurm_cannot_give_is_rejected_before_any_job(local_cluster, name, value, message):
    result = preflight((name, value), check=False)
    assert result.rc != 0 and message in result.output, result.output[-3000:]
    assert PROBES not in result.output


@pytest.mark.parametrize("name, value, message", [
    ("nccl_env_socket_ifname", "ib0", "no network interface ib0 on slurm-worker-0 (it has eth0, lo)"),
    ("slurm_python", "/nonexistent/python", "slurm_python=/nonexistent/python did not run on the nodes"),
])
def test_what_the_nodes_lack_is_named(local_cluster, name, value, message):
    result = preflight((name, value), check=False)
    assert result.rc != 0 and message in result.output, result.output[-3000:]


def test_no_job_is_left_behind(local_cluster):
    assert slurm("squeue", "--noheader", "--name=llmtrain-preflight,llmtrain-gpu-check").strip() == ""
