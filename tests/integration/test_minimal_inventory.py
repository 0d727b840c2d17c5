"""An inventory that sets only what the README calls required runs the whole pipeline on the
local cluster, from a login shell with umask 002 (RHEL and Ubuntu with user-private groups):
every other value comes from the roles' defaults, owned by the run role, nothing the run makes
is writable by the user's group, and the runs after the first are not refused. With
run_script set it gets past preflight too. Training again with --tags pretrain alone
writes a report with the same sections, read from the run's artifacts rather than from facts
of earlier plays. A misspelt or renamed variable, which the roles would ignore, is refused
before anything is made or submitted."""

import os
import re
import shutil
import subprocess
import sys
import uuid

import pytest

from cluster import ROOT, WORKSPACE, ansible_env, job_ids, login_umask, node, writable_by_others

RUN = "pretrain"  # the default run name


def sections(report):
    return re.findall(r"^## (.+)$", report, flags=re.M)


@pytest.fixture(scope="module")
def minimal(local_cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("minimal")
    # inside the stream's workspace: a release's cluster (make test-releases) shares it with its nodes
    workspace = os.path.join(WORKSPACE, "minimal-%s" % uuid.uuid4().hex[:8])
    inventory = home / "hosts.yml"
    inventory.write_text(
        "all:\n"
        "  children:\n"
        "    slurm_login:\n"
        "      hosts:\n"
        "        localhost: {ansible_connection: local, ansible_python_interpreter: %s}\n"
        "  vars:\n"
        "    slurm_partition: debug\n"
        "    slurm_nodes: 2\n"
        "    slurm_gpus_per_node: 0\n"
        "    slurm_procs_per_node: 1\n"
        "    slurm_workspace: %s\n"
        "    slurm_python: %s\n"
        "    nccl_env_socket_ifname: eth0\n" % (sys.executable, workspace, sys.executable))
    env = dict(ansible_env(), PWD=str(home))  # runs/ lands beside the inventory, as for a user there

    def play(playbook, *extra, check=True):
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                os.path.join(ROOT, "playbooks", playbook)] + list(extra)
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=1200, check=False, preexec_fn=login_umask(0o002))
        assert not check or proc.returncode == 0, proc.stdout[-6000:]
        return proc

    play.home, play.workspace = home, workspace
    yield play
    shutil.rmtree(workspace, ignore_errors=True)


@pytest.mark.releases(on=0)
def test_a_minimal_inventory_trains_reports_and_generates(minimal):
    # 50 steps, not the default 200, and the export's evaluation over 20,000 tokens, not a million: what
    # this test checks (the stages, the report, the samples, the modes under umask 002) needs a trained
    # checkpoint and every stage run, not a good model or a precise loss
    result = minimal("pretrain.yml", "-e", "pretrain_steps=50", "-e", "inference_eval_max_tokens=20000")
    assert "Traceback" not in result.stdout
    run_dir = os.path.join(minimal.workspace, RUN)
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "step_000050.pt"))
    local = minimal.home / "runs" / RUN
    report = (local / "report.md").read_text()
    assert "Steps: 50 of 50" in report, report
    samples = (local / "samples.txt").read_text()
    assert len(re.findall(r"^=== prompt \d+: ", samples, flags=re.M)) == 3  # inference_prompts' default
    # what the stages and the jobs made (node_check/, checkpoints, logs, ...) under umask 002
    assert writable_by_others(minimal.workspace) == []
    # --tags pretrain alone: the report's sections come from run artifacts, not from earlier plays
    # the second run checks the run directory the first one made, and trains
    again = minimal("pretrain.yml", "--tags", "pretrain", "-e", "run_force=true", "-e", "pretrain_steps=20")
    assert "Submit the training job" in again.stdout and "is writable by" not in again.stdout
    retrained = (local / "report.md").read_text()
    assert sections(retrained) == sections(report), (sections(retrained), sections(report))
    section = "NCCL / UCX / Gloo environment"
    body = retrained.split("## " + section, 1)[1].split("\n## ", 1)[0]
    assert body == report.split("## " + section, 1)[1].split("\n## ", 1)[0], section
    for text in (report, retrained):  # each training job's check of the 2 nodes it got
        check = text.split("## Node check", 1)[1].split("\n## ", 1)[0]
        rows = [line.split() for line in check.splitlines() if line.startswith(node(""))]
        assert len(rows) == 2 and all(row[-1] == "ok" for row in rows), check
    assert "NCCL_SOCKET_IFNAME | eth0" in retrained


def test_a_minimal_inventory_with_its_own_script_gets_past_preflight(minimal):
    script = minimal.home / "train.py"
    script.write_text("print('my own training script')\n")
    result = minimal("preflight.yml", "-e", "run_script=%s" % script)
    assert "failed=0" in result.stdout


def test_a_misspelt_or_renamed_variable_is_refused_before_any_job(minimal):
    """slurm_node would leave the run on slurm_nodes' value, pretrain_run_name (run_name since the
    rename) train the default run, and a compute node's misspelt override give it the cluster's
    value: each is refused by the first stage, naming the variable meant, and nothing is made."""
    workspace = minimal.workspace + "-refused"
    extra = minimal.home / "refused.yml"
    extra.write_text("all:\n"
                     "  children:\n"
                     "    slurm_workers:\n"
                     "      hosts:\n"
                     "        %s:\n"
                     "          nccl_env_socket_ifnam: eth1\n"
                     "  vars:\n"
                     "    slurm_workspace: %s\n"
                     "    slurm_node: 3\n"
                     "    pretrain_run_name: myrun\n" % (node(1), workspace))
    before = job_ids()
    result = minimal("pretrain.yml", "-i", str(extra), check=False)
    assert result.returncode != 0 and "failed=1" in result.stdout, result.stdout[-6000:]
    for message in ("slurm_node is not a variable of llmtrain.slurm: did you mean slurm_nodes?",
                    "pretrain_run_name was renamed to run_name: set run_name instead.",
                    "nccl_env_socket_ifnam is not a variable of llmtrain.slurm: did you mean nccl_env_socket_ifname? "
                    "(host vars of %s)" % node(1)):
        assert "\n" + message + "\n" in result.stdout, result.stdout[-6000:]
    print(result.stdout[result.stdout.index("fatal:"):])  # what the user reads
    # refused by the first stage's first check: no run directory (no job script, no data), no job
    assert not os.path.exists(workspace)
    assert job_ids() - before == set()
