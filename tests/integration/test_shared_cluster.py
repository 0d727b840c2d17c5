"""A busy, shared cluster: other people's jobs hold nodes, some nodes are bad. The run never
waits for nodes it will not use, each job checks the nodes it got (its first step), bad ones
are excluded and the run goes on, and two runs share the cluster without meeting."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

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
    """A 2-node run on the 3-node partition, node 0 bad through its host vars: the job starts on the
    first nodes, node 0 among them, and the third is free for it to move to."""
    run = fresh("shared-bad")
    two = dict(slurm_nodes=2)
    # data first, with an inventory that is right, so that the training job meets the bad node
    run_playbook("deploy.yml", *values(run, **two))
    bad = bad_node_inventory(tmp_path, node(0))
    # the stages from preflight to training (the cluster is the session's; inference is not what is tested)
    result = run_playbook("pretrain.yml", "--skip-tags", "local_cluster,inference", *bad, *values(run, **two))
    reason = "no network interface ib0 on %s (it has eth0, lo)" % node(0)
    assert re.search(r"node check excluded %s \(%s" % (re.escape(node(0)), re.escape(reason)), result.output), \
        result.output[-5000:]
    name, state, nodes, excluded = training_job(run)
    assert state == "COMPLETED" and node_set(nodes) == {node(1), node(2)}, (nodes, excluded)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    kept_off = report.split("Nodes the run keeps off", 1)[1]
    assert "| %s | %s" % (node(0), reason) in kept_off, report
    assert "Steps: 20 of 20" in report
    recorded = json.load(open(os.path.join(WORKSPACE, run, "bad_nodes.json")))
    assert recorded[node(0)]["reason"].startswith(reason)

    # run_bad_node_policy=fail: the job ends at its check, naming the node; nothing trained
    os.unlink(os.path.join(WORKSPACE, run, "bad_nodes.json"))
    failed = run_playbook("pretrain.yml", "--skip-tags", "local_cluster,inference", *bad,
                          *values(run, run_force=True, run_bad_node_policy="fail", **two), check=False)
    assert failed.rc != 0
    assert "Its node check found bad node(s) and started nothing" in failed.output, failed.output[-5000:]
    assert "  %s: %s" % (node(0), reason) in failed.output
    assert not os.path.exists(os.path.join(WORKSPACE, run, "metrics.jsonl"))  # archived; no new training

    # a forced rerun keeps off the recorded bad node from the start: no exclusion, no requeue
    again = run_playbook("pretrain.yml", "--skip-tags", "local_cluster,inference", *bad,
                         *values(run, run_force=True, **two))
    assert "node check excluded" not in again.output
    name, state, nodes, excluded = training_job(run)
    assert state == "COMPLETED" and node(0) not in node_set(nodes) and excluded == node(0)


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


@pytest.mark.releases
def test_what_the_site_requires_reaches_every_job_and_a_bad_value_stops_the_run_before_any(local_cluster):
    """A reservation of two nodes, features on them, and more of what a site asks of a job: every
    job of the run (data, training, samples) carries them; a value Slurm would refuse or never
    schedule is refused by preflight, naming the variable, before any job."""
    run = fresh("site")
    known = set(jobs_of(run))  # the controller remembers the jobs of an earlier test run a while
    reserved = "%s,%s" % (node(0), node(1))
    slurm("scontrol", "create", "reservation", "ReservationName=llm-site", "StartTime=now", "Duration=60",
          "Nodes=" + reserved, "Users=root")
    try:
        for name in (node(0), node(1)):
            slurm("scontrol", "update", "NodeName=" + name, "AvailableFeatures=site,ib", "ActiveFeatures=site,ib")

        # refused by the input check: an option the collection sets itself, named with its variable
        owned = run_playbook("pretrain.yml", *values(run, slurm_sbatch_options={"nodes": 3, "time": "5"}), check=False)
        assert owned.rc != 0
        assert "slurm_sbatch_options: nodes is one the collection sets for every job: set slurm_nodes instead." \
            in owned.output, owned.output[-3000:]
        assert "slurm_sbatch_options: time is one the collection sets for every job: set slurm_time_limit" \
            in owned.output
        # refused by preflight, from what Slurm has: no such reservation, a feature no node has
        missing = run_playbook("pretrain.yml", *values(run, slurm_reservation="llm-nope", slurm_constraint="site&h200"),
                               check=False)
        assert missing.rc != 0
        assert "slurm_reservation=llm-nope does not exist; Slurm has llm-site" in missing.output, missing.output[-3000:]
        assert ("slurm_constraint=site&h200 names feature h200, which no usable node of partition debug has; "
                "their features: ib (2 nodes), site (2 nodes).") in missing.output
        # more nodes than the reservation holds
        big = run_playbook("preflight.yml", *values(run, slurm_reservation="llm-site", slurm_nodes=3), check=False)
        assert big.rc != 0 and "slurm_reservation=llm-site holds 2 usable nodes of partition debug" in big.output
        assert set(jobs_of(run)) == known  # nothing was submitted

        # one process per node on one CPU: it gets one thread (torch.distributed.run would leave it every
        # CPU of the machine, two here)
        site = dict(slurm_nodes=2, slurm_procs_per_node=1, slurm_cpus_per_task=1, slurm_reservation="llm-site",
                    slurm_constraint="site&ib", slurm_account="ml-team", slurm_exclusive=True, slurm_mail_type="END,FAIL", slurm_mail_user="ada@example.org",
                    slurm_sbatch_options={"nice": 7})
        result = run_playbook("pretrain.yml", *values(run, **site))
        # the local cluster keeps no accounting: the account is not checked, and preflight says so
        assert "slurm_account not checked: this cluster keeps no accounting database" in result.output, \
            result.output[-3000:]
        jobs = dict((job_id, job) for job_id, job in jobs_of(run).items() if job_id not in known)
        names = sorted(name for name, _state, _nodes, _excluded in jobs.values())
        assert names == sorted(["llmtrain-%s" % run, "llmtrain-export-%s" % run, "llmtrain-generate-%s" % run,
                                "llmtrain-prepare-%s" % run]), names
        for job_id, (name, state, nodes, _excluded) in jobs.items():
            info = slurm("scontrol", "show", "job", "-o", job_id)
            fields = dict(re.findall(r"(\w+)=(\S*)", info))
            assert state == "COMPLETED", (name, state)
            assert (fields["Reservation"], fields["Features"], fields["Account"], fields["Nice"],
                    fields["OverSubscribe"], fields["MailType"], fields["MailUser"]) == (
                "llm-site", "site&ib", "ml-team", "7", "NO", "END,FAIL", "ada@example.org"), (name, info)
            assert node_set(nodes) <= {node(0), node(1)}, (name, nodes)
        assert "Steps: 20 of 20" in open(os.path.join(RUNS, run, "report.md")).read()
        logs = os.path.join(RUNS, run, "logs")
        training_log = "".join(open(os.path.join(logs, name)).read() for name in os.listdir(logs)
                               if name.startswith("llmtrain-%s-" % run))
        assert "2 rank(s) (ddp) on cpu (1 CPU thread(s) per rank)" in training_log, training_log[-3000:]
        # the same inputs again: nothing to do
        again = run_playbook("pretrain.yml", *values(run, **site))
        assert "no stage runs" in again.output, again.output[-3000:]
    finally:
        slurm("scontrol", "delete", "ReservationName=llm-site")
        for name in (node(0), node(1)):
            slurm("scontrol", "update", "NodeName=" + name, "AvailableFeatures=", "ActiveFeatures=")


def debian_mirror():
    """The Debian mirror this machine's apt uses (the image is made from it, and from nothing else)."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            text = open(path).read()
        except OSError:
            continue
        found = re.search(r"(?m)^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+/debian)/?\s", text)
        if found:
            return found.group(1)
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="module")
def image(local_cluster):
    """A Debian 13 image for ch-run, made by debootstrap from Debian's packages (the local cluster
    installs both): minbase and python3 (whose libraries the bound Python needs), and a directory
    for each mount of the run below (ch-run mounts only onto directories the image has)."""
    base = tempfile.mkdtemp(prefix="llmtrain-image-", dir="/var/tmp")
    path = os.path.join(base, "trixie")
    made = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", "trixie", path, debian_mirror()],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=900, check=False)
    assert made.returncode == 0, made.stdout[-3000:]
    for target in (WORKSPACE, sys.base_prefix, "/opt/llmtrain-venv"):
        os.makedirs(path + target, exist_ok=True)
    yield path
    shutil.rmtree(base, ignore_errors=True)


def test_every_python_of_a_run_runs_in_its_container(image):
    """slurm_container_runtime=charliecloud: the node and network checks, the data preparation, the
    training and the samples all run in the image (ch-run on each node). slurm_python is a path that
    only the image has (this machine's venv mounted at /opt/llmtrain-venv), so a Python started on
    the node itself fails the job; the node checks' records name the image's system, Debian 13,
    where the nodes run Debian 12. What no job could use is refused by preflight, before any job."""
    run = fresh("container")
    known = set(jobs_of(run))
    inside = "/opt/llmtrain-venv/bin/python"
    assert not os.path.exists(inside)
    settings = dict(slurm_container_runtime="charliecloud", slurm_container_image=image,
                    slurm_container_mounts=[sys.base_prefix, sys.prefix + ":/opt/llmtrain-venv"], slurm_python=inside,
                    slurm_nodes=2, slurm_procs_per_node=1, pretrain_network_check=True)

    # refused before any job: a mount target the image lacks; pyxis, which this cluster's srun lacks
    lacking = dict(settings)
    lacking["slurm_container_mounts"] = settings["slurm_container_mounts"] + ["/var/tmp:/llmtrain-data"]
    lacking = run_playbook("preflight.yml", *values(run, **lacking), check=False)
    assert lacking.rc != 0
    assert ("slurm_container_image=%s has no directory /llmtrain-data to mount /var/tmp on: ch-run mounts only onto directories the "
            "image has. Make it in the image (mkdir -p %s/llmtrain-data)" % (image, image)) in lacking.output, lacking.output[-3000:]
    pyxis = dict(settings)
    pyxis.update(slurm_container_runtime="pyxis", slurm_container_image="nvcr.io#nvidia/pytorch:25.01-py3",
                 slurm_container_mounts=[])
    pyxis = run_playbook("preflight.yml", *values(run, **pyxis), check=False)
    assert pyxis.rc != 0
    assert "slurm_container_runtime=pyxis, but srun on this node has no --container-image option" in pyxis.output, \
        pyxis.output[-3000:]
    assert set(jobs_of(run)) == known

    result = run_playbook("pretrain.yml", *values(run, **settings))
    jobs = dict((job_id, job) for job_id, job in jobs_of(run).items() if job_id not in known)
    assert sorted(name for name, _state, _nodes, _excluded in jobs.values()) == sorted(
        ["llmtrain-%s" % run, "llmtrain-export-%s" % run, "llmtrain-generate-%s" % run, "llmtrain-prepare-%s" % run]), \
        result.output[-3000:]
    assert {state for _name, state, _nodes, _excluded in jobs.values()} == {"COMPLETED"}
    checks = os.path.join(WORKSPACE, run, "node_check")
    for name in os.listdir(checks):  # the node check of every job: on every node, in the image
        for record in json.load(open(os.path.join(checks, name)))["nodes"]:
            assert (record["python"], record["os"], record["ok"]) == (inside, "Debian GNU/Linux 13 (trixie)", True), record
    network = json.load(open(os.path.join(WORKSPACE, run, "network_check", "llmtrain-%s.json" % run)))
    assert (network["ranks"], network["verdict"]) == (2, "ok"), network
    assert "Steps: 20 of 20" in open(os.path.join(RUNS, run, "report.md")).read()
    assert json.load(open(os.path.join(WORKSPACE, run, "samples.json")))  # the samples, made in the image too
    # the export and the evaluation's ranks too (an srun step through ch-run), on one node (inference_nodes)
    evaluation = json.load(open(os.path.join(RUNS, run, "model.json")))["evaluation"]
    assert evaluation["ranks"] == 1 and evaluation["tokens"] > 0, evaluation
    again = run_playbook("pretrain.yml", *values(run, **settings))
    assert "no stage runs" in again.output, again.output[-3000:]
