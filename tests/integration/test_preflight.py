"""playbooks/preflight.yml on the local cluster: it asks Slurm and allocates nothing, and names
the variable and the fix for every bad input before any job is submitted. What only a node
can tell (its GPUs against Slurm's GRES) is found by the node check (test_gpu_check.py)."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from cluster import NODES, RUNS, WORKSPACE, job_ids, module, node, run_playbook, slurm, slurm_env
ASKS_SLURM = "Ask Slurm for its partitions and nodes"


def preflight(*extra_vars, check=False):
    args = []
    for name, value in extra_vars:
        args += ["-e", json.dumps({name: value})]
    return run_playbook("preflight.yml", *args, check=check)


def test_preflight_asks_slurm_and_allocates_nothing(local_cluster):
    before = job_ids()
    result = preflight()
    assert job_ids() - before == set()  # no srun, salloc or sbatch: nothing waits for nodes
    assert "srun" not in result.output
    record = json.load(open(os.path.join(WORKSPACE, "local-demo", "preflight.json")))
    assert record["usable_nodes"] == NODES and record["excluded_nodes"] == {}


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
    ("run_gpu_policy", "lenient", "value of run_gpu_policy must be one of: strict, report, got: lenient"),
    ("nccl_env_debug", "LOUD", "nccl_env_debug='LOUD' is not a valid NCCL_DEBUG"),
    ("nccl_env_socket_ifname", "eth0;id", "nccl_env_socket_ifname='eth0;id' is not a valid NCCL_SOCKET_IFNAME"),
    ("nccl_env_ib_hca", "mlx5_0:x", "nccl_env_ib_hca='mlx5_0:x' is not a valid NCCL_IB_HCA"),
    ("pretrain_steps", 0, "pretrain_steps=0 must be a whole number >= 1"),
    ("run_name", "../x", "run_name='../x' must be 1-64 letters"),
    ("inference_prompts", [], "inference_prompts=[] must be a non-empty list"),
    ("slurm_exclude_nodes", ["gpu-1;id"], "slurm_exclude_nodes=['gpu-1;id'] must be a list of node names"),
    ("slurm_node_check_timeout", 5, "slurm_node_check_timeout=5 must be a whole number >= 10"),
    ("run_bad_node_policy", "skip", "value of run_bad_node_policy must be one of: exclude, fail, got: skip"),
    # a later stage's argument spec, checked by preflight through that stage's validate entry point
    ("inference_seed", "abc", "argument 'inference_seed' is of type str and we were unable to convert to int"),
]


@pytest.mark.parametrize("name, value, message", BAD_INPUTS, ids=[b[0] + "=" + str(b[1]) for b in BAD_INPUTS])
def test_bad_input_is_rejected_before_slurm_is_asked(local_cluster, name, value, message):
    result = preflight((name, value), check=False)
    assert result.rc != 0
    assert message in result.output, result.output[-3000:]
    assert ASKS_SLURM not in result.output


@pytest.mark.parametrize("name, value, message", [
    ("slurm_nodes", 5, "slurm_nodes=5 but partition debug has 3 usable node(s) (%s)" % ", ".join(NODES)),
    ("slurm_partition", "gpu", "slurm_partition=gpu does not exist: Slurm has debug"),
    ("slurm_gpus_per_node", 2, "slurm_gpus_per_node=2 but only 0 usable node(s) of debug register that many GPUs"),
    ("slurm_exclude_nodes", [node("[0-1]")],
     "slurm_nodes=3 but partition debug has 1 usable node(s) (%s) besides the excluded ones "
     "(%s: named in slurm_exclude_nodes; %s: named in slurm_exclude_nodes)" % (node(2), node(0), node(1))),
])
def test_what_slurm_cannot_give_is_rejected_before_any_job(local_cluster, name, value, message):
    result = preflight((name, value), check=False)
    assert result.rc != 0 and message in result.output, result.output[-3000:]


@pytest.mark.releases
def test_account_and_qos_are_checked_against_a_real_accounting_database(local_cluster, tmp_path):
    """The local cluster with an accounting database (MariaDB and slurmdbd, AccountingStorageEnforce):
    preflight refuses an account or QoS that root's associations do not allow, naming what they do;
    a pair they allow passes; and Slurm agrees, job by job. Then a short run's ledger (report.md,
    status.yml) is sacct's, and within a minute of node time of the run's own (usage.json)."""
    try:
        run_playbook("local_cluster.yml", "-e", "local_cluster_accounting=true")
        account = preflight(("slurm_account", "physics"), check=False)
        assert account.rc != 0
        assert ("slurm_account=physics is not an account root may use in partition debug; the associations allow "
                "ml-team, root (sacctmgr show assoc user=root).") in account.output, account.output[-3000:]
        qos = preflight(("slurm_account", "ml-team"), ("slurm_qos", "gold"), check=False)
        assert qos.rc != 0
        assert "slurm_qos=gold is not a QoS root may use with account ml-team; allowed: high, normal." in qos.output, \
            qos.output[-3000:]
        good = preflight(("slurm_account", "ml-team"), ("slurm_qos", "high"), check=True)
        assert "not checked" not in good.output
        # what preflight said is what Slurm does
        refused = subprocess.run(["sbatch", "--account=physics", "--wrap=true", "--output=/dev/null"],
                                 env=slurm_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
        assert refused.returncode != 0 and "Invalid account" in refused.stdout, refused.stdout
        job = slurm("sbatch", "--parsable", "--account=ml-team", "--qos=high", "--wrap=true", "--output=/dev/null")
        info = slurm("scontrol", "show", "job", "-o", job.strip())
        assert "Account=ml-team" in info and "QOS=high" in info, info
        the_ledger_is_sacct_s_and_agrees_with_the_runs_own_lines(tmp_path)
    finally:
        run_playbook("local_cluster.yml")
    without = preflight(("slurm_account", "ml-team"), check=True)
    assert "slurm_account not checked: this cluster keeps no accounting database" in without.output


# a run of a few seconds on one node: the stages up to training (the cluster is up, with accounting:
# local_cluster would turn it off; preflight is this module's), no network check, no checkpoints
LEDGER_RUN = dict(slurm_nodes=1, pretrain_steps=5, pretrain_checkpoint_interval=0, pretrain_network_check=False,
                  pretrain_model={"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}, pretrain_batch_size=4,
                  pretrain_extra_args=["--log-interval", "5", "--eval-interval", "0"], deploy_dataset_max_bytes=200000)


def sacct_seconds(job_id):
    """[(elapsed s, nodes, CPUs)] of each start of a job, as sacct has them."""
    out = slurm("sacct", "-X", "--duplicates", "--noheader", "--parsable2", "--format=ElapsedRaw,AllocTRES", "--jobs=" + job_id)
    return [(int(line.split("|")[0]), int(re.search(r"node=(\d+)", line).group(1)), int(re.search(r"cpu=(\d+)", line).group(1)))
            for line in out.splitlines() if line.strip()]


def the_ledger_is_sacct_s_and_agrees_with_the_runs_own_lines(tmp_path):
    run = "ledger-%x" % int(time.time())
    started = time.monotonic()
    run_playbook("pretrain.yml", "--skip-tags", "local_cluster,preflight,inference", "-e",
                 json.dumps(dict(LEDGER_RUN, run_name=run)), timeout=300)
    played = time.monotonic() - started
    try:
        status = run_playbook("status.yml", "-e", "run_name=" + run, timeout=300).output
        statused = time.monotonic() - started - played
        run_dir = os.path.join(WORKSPACE, run)
        with open(os.path.join(run_dir, "train.done.json")) as handle:
            train = str(json.load(handle)["job_id"])
        with open(os.path.join(run_dir, "data", "prepare.done.json")) as handle:
            data = str(json.load(handle)["job_id"])
        with open(os.path.join(run_dir, "usage.json")) as handle:
            usage = json.load(handle)
        starts = sacct_seconds(train)
        node_s, cpu_s = sum(s * n for s, n, _c in starts), sum(s * c for s, _n, c in starts)
        print("ledger: sacct %d node-s, %d CPU-s over %d start(s); usage.json %.1f node-s, %.1f CPU-s; pretrain.yml %.0f s, "
              "status.yml %.0f s" % (node_s, cpu_s, len(starts), usage["node_s"], usage["cpu_s"], played, statused))
        assert abs(node_s - usage["node_s"]) <= 60 and abs(cpu_s - usage["cpu_s"]) <= 60 * starts[0][2], (starts, usage)
        # status.yml's collect wrote the report from the ledger it read: sacct's, the data job apart
        with open(os.path.join(RUNS, run, "facts.json")) as handle:
            ledger = json.load(handle)["ledger"]
        assert ledger["source"] == "sacct" and ledger["train"]["count"] == len(starts), ledger
        assert round(ledger["train"]["node_hours"] * 3600) == node_s and round(ledger["train"]["cpu_hours"] * 3600) == cpu_s
        assert [(o["kind"], o["job_id"]) for o in ledger["others"]] == [("data", data)], ledger
        with open(os.path.join(RUNS, run, "report.md")) as handle:
            report = handle.read()
        section = report.split("## Resources used\n\n", 1)[1].split("\n## ", 1)[0]
        assert ("Total: %.2f node-hours, %.2f CPU-hours, 0.00 GPU-hours over %d start(s) (sacct)."
                % (node_s / 3600.0, cpu_s / 3600.0, len(starts))) in section, section
        assert "| data | %s | 1 |" % data in section, section
        assert ("used: 0.00 GPU-hours, %.2f node-hours, %.2f CPU-hours over %d start(s) (sacct: allocated TRES x elapsed)"
                % (node_s / 3600.0, cpu_s / 3600.0, len(starts))) in status, status[-4000:]
        assert "data job %s:" % data in status, status[-4000:]
        # the status row's figures (shown to 2 decimals above) are sacct's to the second
        row = next(r for r in module("run_status", dict(workspace=WORKSPACE), tmp_path)["runs"] if r["run"] == run)
        assert row["usage"]["source"] == "sacct" and round(row["usage"]["node_hours"] * 3600) == node_s, row["usage"]
        assert round(row["usage"]["cpu_hours"] * 3600) == cpu_s and row["usage"]["gpu_hours"] == 0, row["usage"]
    finally:
        for base in (WORKSPACE, RUNS):
            shutil.rmtree(os.path.join(base, run), ignore_errors=True)
