"""A busy, shared cluster: other people's jobs hold nodes, some nodes are bad. The run never
waits for nodes it will not use, each job checks the nodes it got (its first step), bad ones
are excluded and the run goes on, and two runs share the cluster without meeting."""

import json
import os
import re
import shutil
import subprocess

import pytest

from cluster import BIN, INVENTORY, ROOT, RUNS, WORKSPACE, ansible_env, node, run_playbook, slurm
# short runs: what is tested here is where the jobs run, not what they learn (nor the fabric they
# got: the network check, which test_fabric.py tests, would add about 5 s to each job start)
QUICK = dict(pretrain_steps=20, pretrain_checkpoint_interval=0, pretrain_extra_args=["--log-interval", "5"],
             inference_prompts=["def "], inference_max_new_tokens=8, pretrain_network_check=False)


def fresh(run):
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    return run


def values(run, **more):
    return ["-e", json.dumps(dict(QUICK, run_name=run, **more))]


def bad_node_inventory(tmp_path, node):
    """The local inventory, plus host vars that tell NCCL/Gloo to use an interface node lacks."""
    extra = tmp_path / "bad_node.yml"
    extra.write_text("all:\n  children:\n    slurm_workers:\n      hosts:\n"
                     "        %s:\n          nccl_env_socket_ifname: ib0\n" % node)
    return ["-i", INVENTORY, "-i", str(extra)]


def jobs_of(run):
    """{job id: (state, node list, excluded nodes)} of the run's jobs the controller knows."""
    found = {}
    for line in slurm("squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%N").splitlines():
        job_id, name, state, nodes = line.split("|")
        if name.endswith("-" + run) or name == "llmtrain-" + run:
            info = slurm("scontrol", "show", "job", "-o", job_id)
            excluded = re.search(r"ExcNodeList=(\S*)", info).group(1)
            found[job_id] = (name, state, nodes, excluded)
    return found


def training_job(run):
    jobs = [(int(i), v) for i, v in jobs_of(run).items() if v[0] == "llmtrain-" + run]
    return max(jobs)[1] if jobs else None


def node_set(hostlist):
    return set(slurm("scontrol", "show", "hostnames", hostlist).split()) if hostlist else set()


@pytest.fixture
def foreign_job(local_cluster):
    """Someone else's job holding node 2 for the whole test."""
    job_id = slurm("sbatch", "--parsable", "--job-name=someone-else", "--nodelist=" + node(2), "--exclusive",
                   "--output=/dev/null", "--wrap", "sleep 900").strip()
    for _attempt in range(30):
        if slurm("squeue", "--noheader", "--jobs", job_id, "--format=%T").strip() == "RUNNING":
            break
        subprocess.run(["sleep", "1"], check=True)
    yield job_id
    slurm("scancel", job_id)


def test_a_busy_node_is_never_waited_for_and_two_runs_share_the_cluster(foreign_job):
    # the survey lists the busy node and checks the others, without waiting for it
    survey = run_playbook("node_check.yml", timeout=120)
    assert re.search(r'"%s  not checked: ALLOCATED' % re.escape(node(2)), survey.output), survey.output[-3000:]
    assert len(re.findall(r'"%s[01] [^"]* ok"' % re.escape(node("")), survey.output)) == 2, survey.output[-3000:]

    first, second = fresh("shared-a"), fresh("shared-b")
    plays = [subprocess.Popen([os.path.join(BIN, "ansible-playbook"), "playbooks/pretrain.yml"] + values(run, slurm_nodes=n),
                              cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
             for run, n in ((first, 2), (second, 1))]
    outputs = [play.communicate(timeout=600)[0] for play in plays]
    for play, output in zip(plays, outputs):
        assert play.returncode == 0, output[-5000:]
    for run in (first, second):
        name, state, nodes, _excluded = training_job(run)
        assert state == "COMPLETED" and node(2) not in node_set(nodes), (run, nodes)
        local = os.path.join(RUNS, run)
        assert "Steps: 20 of 20" in open(os.path.join(local, "report.md")).read()
        assert open(os.path.join(local, "samples.txt")).read().startswith('=== prompt 1: "def "')
    # neither run's files are the other's
    assert open(os.path.join(WORKSPACE, first, "scripts", "pretrain.sbatch")).read().count(first) > 0
    assert first not in open(os.path.join(WORKSPACE, second, "scripts", "pretrain.sbatch")).read()
    assert slurm("squeue", "--noheader", "--jobs", foreign_job, "--format=%T").strip() == "RUNNING"


def test_a_bad_node_is_excluded_the_run_goes_on_and_stays_off_it(local_cluster, tmp_path):
    """Four nodes, slurm_nodes=3, node 0 bad through its host vars."""
    run = fresh("shared-bad")
    four = dict(slurm_nodes=3, local_cluster_nodes=4)
    try:
        run_playbook("local_cluster.yml", *values(run, **four))
        # data first, with an inventory that is right, so that the training job meets the bad node
        run_playbook("deploy.yml", *values(run, **four))
        bad = bad_node_inventory(tmp_path, node(0))
        # the stages from preflight to training (the cluster was made above; inference is not what is tested)
        result = run_playbook("pretrain.yml", "--skip-tags", "local_cluster,inference", *bad, *values(run, **four))
        reason = "no network interface ib0 on %s (it has eth0, lo)" % node(0)
        assert re.search(r"node check excluded %s \(%s" % (re.escape(node(0)), re.escape(reason)), result.output), \
            result.output[-5000:]
        name, state, nodes, excluded = training_job(run)
        assert state == "COMPLETED" and node_set(nodes) == {node(1), node(2), node(3)}, \
            (nodes, excluded)
        report = open(os.path.join(RUNS, run, "report.md")).read()
        kept_off = report.split("Nodes the run keeps off", 1)[1]
        assert "| %s | %s" % (node(0), reason) in kept_off, report
        assert "Steps: 20 of 20" in report
        recorded = json.load(open(os.path.join(WORKSPACE, run, "bad_nodes.json")))
        assert recorded[node(0)]["reason"].startswith(reason)

        # run_bad_node_policy=fail: the job ends at its check, naming the node; nothing trained
        os.unlink(os.path.join(WORKSPACE, run, "bad_nodes.json"))
        failed = run_playbook("pretrain.yml", "--skip-tags", "local_cluster,inference", *bad,
                              *values(run, run_force=True, run_bad_node_policy="fail", **four), check=False)
        assert failed.rc != 0
        assert "Its node check found bad node(s) and started nothing" in failed.output, failed.output[-5000:]
        assert "  %s: %s" % (node(0), reason) in failed.output
        assert not os.path.exists(os.path.join(WORKSPACE, run, "metrics.jsonl"))  # archived; no new training

        # a forced rerun keeps off the recorded bad node from the start: no exclusion, no requeue
        again = run_playbook("pretrain.yml", "--skip-tags", "local_cluster,inference", *bad,
                             *values(run, run_force=True, **four))
        assert "node check excluded" not in again.output
        name, state, nodes, excluded = training_job(run)
        assert state == "COMPLETED" and node(0) not in node_set(nodes) and excluded == node(0)
    finally:
        run_playbook("local_cluster.yml")


def test_every_node_bad_fails_naming_each_and_leaves_nothing_queued(local_cluster):
    run = fresh("shared-all-bad")
    result = run_playbook("pretrain.yml", *values(run, nccl_env_socket_ifname="ib0"), check=False)
    assert result.rc != 0
    assert "The job is cancelled; nothing of this run is left queued. Bad nodes:" in result.output, result.output[-5000:]
    for n in range(3):
        assert "  %s: no network interface ib0 on %s (it has eth0, lo)" % (node(n), node(n)) in result.output
    assert all(state not in ("PENDING", "RUNNING") for _name, state, _n, _e in jobs_of(run).values()), jobs_of(run)
    assert training_job(run) is None  # the training job was never submitted
    # a rerun stops at preflight, before any job: every node of the partition is recorded bad
    again = run_playbook("preflight.yml", *values(run, nccl_env_socket_ifname="ib0"), check=False)
    assert "slurm_nodes=3 but partition debug has 0 usable node(s) (none) besides the excluded ones" in again.output


def test_a_python_that_does_not_run_fails_the_first_job_naming_it(local_cluster):
    run = fresh("shared-no-python")
    result = run_playbook("pretrain.yml", *values(run, slurm_python="/nonexistent/python"), check=False)
    assert result.rc != 0
    assert "slurm_python=/nonexistent/python does not run on " + node("") in result.output, result.output[-5000:]
    assert training_job(run) is None
