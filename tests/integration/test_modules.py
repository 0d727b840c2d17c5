"""sbatch, slurm_job_info, slurm_cluster_info and the job_progress callback on the local
cluster, driven the way a user drives them: `ansible` and `ansible-playbook` from the
repository root."""

import json
import os
import re
import subprocess
import time
import uuid

import pytest

from cluster import BIN, NODE_RE, NODES, ROOT, ansible_env, module, slurm

# Small jobs: several share a node.
SMALL = {"mem": "50M", "partition": "debug"}


def playbook(text, tmp_path, *extra):
    path = tmp_path / "play.yml"
    path.write_text(text)
    return subprocess.run([os.path.join(BIN, "ansible-playbook"), str(path)] + list(extra), cwd=ROOT,
                          env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=180, check=False)


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def jobs_named(name):
    out = slurm("squeue", "--noheader", "--states=all", "--name=" + name, "--format=%i %T")
    return [line.split() for line in out.splitlines()]


def scontrol_job(job_id):
    return dict(re.findall(r"(\w+)=(\S*)", slurm("scontrol", "show", "job", "-o", str(job_id))))


@pytest.fixture
def name(local_cluster):
    name = unique("it")
    yield name
    subprocess.run(["scancel", "--name=" + name], env=dict(os.environ), check=False)


def test_submit_is_idempotent_and_changes_make_new_jobs(name, tmp_path):
    # The jobs sleep far longer than the test can take under load (module starts of several
    # seconds each): state=absent must find both still there to cancel; the fixture cancels
    # them whatever happens.
    args = dict(name=name, content="#!/bin/bash\nsleep 600\n", options=SMALL)
    first = module("sbatch", args, tmp_path)
    assert first["changed"] and first["job_id"], first["_output"]
    again = module("sbatch", args, tmp_path)
    assert not again["changed"] and again["job_id"] == first["job_id"]
    assert len(jobs_named(name)) == 1
    assert scontrol_job(first["job_id"])["Comment"] == "llmtrain:" + first["fingerprint"]

    changed = module("sbatch", dict(args, content="#!/bin/bash\nsleep 601\n"), tmp_path)
    assert changed["changed"] and changed["job_id"] != first["job_id"]
    assert changed["fingerprint"] != first["fingerprint"]

    checked = module("sbatch", dict(args, content="#!/bin/bash\nsleep 602\n"), tmp_path, check=True)
    assert checked["changed"] and checked["job_id"] is None and checked["cmd"][1] == "--parsable"
    assert len(jobs_named(name)) == 2

    gone = module("sbatch", dict(name=name, state="absent"), tmp_path)
    assert gone["changed"] and sorted(gone["cancelled"]) == sorted([first["job_id"], changed["job_id"]])
    assert not module("sbatch", dict(name=name, state="absent"), tmp_path)["changed"]


def test_done_file_records_the_completed_job_and_removing_it_runs_it_again(name, tmp_path):
    done_file = tmp_path / "done.json"
    args = dict(name=name, content="#!/bin/bash\ntrue\n", options=SMALL, wait=True, done_file=str(done_file))
    done = module("sbatch", args, tmp_path)
    assert done["changed"] and done["state"] == "COMPLETED" and done["exit_code"] == 0, done["_output"]
    assert json.loads(done_file.read_text())["job_id"] == done["job_id"]
    again = module("sbatch", args, tmp_path)
    assert not again["changed"] and again["done"] and again["job_id"] == done["job_id"]
    done_file.unlink()  # Slurm still knows the completed job, yet it runs again
    rerun = module("sbatch", args, tmp_path)
    assert rerun["changed"] and rerun["job_id"] != done["job_id"]
    assert len(jobs_named(name)) == 2


def test_failing_job_fails_with_exit_code_and_log_tail(name, tmp_path):
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/bash\nfor i in 1 2 3 4 5; do echo out $i; done\necho broken >&2\nexit 3\n")
    result = module("sbatch", dict(name=name, script=str(script), chdir=str(tmp_path), options=SMALL, wait=True,
                                   log_tail_lines=3), tmp_path)
    assert result["failed"] and result["state"] == "FAILED" and result["exit_code"] == 3, result["_output"]
    assert "FAILED" in result["msg"] and "exit code 3" in result["msg"] and "NonZeroExitCode" in result["msg"]
    assert result["log_tail"] == ["out 4", "out 5", "broken"]
    assert result["stdout_path"] == str(tmp_path / ("slurm-%s.out" % result["job_id"]))


def test_wait_timeout_fails_and_cancels(name, tmp_path):
    result = module("sbatch", dict(name=name, content="#!/bin/bash\nsleep 60\n", options=SMALL, wait=True,
                                   wait_timeout=2), tmp_path)
    assert result["failed"] and "after 2s (wait_timeout); cancelled it" in result["msg"], result["_output"]
    assert result["cancelled"] == [result["job_id"]]
    deadline = time.time() + 10
    while scontrol_job(result["job_id"])["JobState"] != "CANCELLED" and time.time() < deadline:
        time.sleep(0.5)
    assert scontrol_job(result["job_id"])["JobState"] == "CANCELLED"


def test_wait_notices_the_end_within_a_second(name, tmp_path):
    result = module("sbatch", dict(name=name, content="#!/bin/bash\nsleep 3\n", options=SMALL, wait=True), tmp_path)
    returned = time.time()
    assert result["state"] == "COMPLETED", result["_output"]
    end = time.mktime(time.strptime(scontrol_job(result["job_id"])["EndTime"], "%Y-%m-%dT%H:%M:%S"))
    # EndTime is whole seconds; polling once a second plus Ansible's own exit stay under 2.5 s.
    assert returned - end < 2.5, returned - end


def test_metacharacters_are_inert(local_cluster, tmp_path):
    marker = tmp_path / "MARK"
    name = unique("it") + '; touch %s $(touch %s) `touch %s` "q\' x' % (marker, marker, marker)
    env = {"WEIRD": "a,b=c 'sq' \"dq\" $(touch %s) `touch %s`\nline2;" % (marker, marker), "PLAIN": "1,2"}
    script = "#!/bin/bash\nprintf '%s' \"$WEIRD\" > weird.txt\nprintf '%s' \"$PLAIN\" > plain.txt\n"
    try:
        result = module("sbatch", dict(name=name, content=script, chdir=str(tmp_path), env=env, wait=True,
                                       options=dict(SMALL, output=str(tmp_path / "$(touch MARK)-%j.out"))), tmp_path)
        assert result["state"] == "COMPLETED", result["_output"]
        assert (tmp_path / "weird.txt").read_text() == env["WEIRD"]
        assert (tmp_path / "plain.txt").read_text() == "1,2"
        assert scontrol_job(result["job_id"])["JobId"] == result["job_id"]
        assert (tmp_path / ("$(touch MARK)-%s.out" % result["job_id"])).exists()
        assert not marker.exists() and not (tmp_path / "MARK").exists() and not os.path.exists(os.path.join(ROOT, "MARK"))
        info = module("slurm_job_info", dict(job_id=[result["job_id"]]), tmp_path)
        assert info["jobs"][0]["name"] == name
    finally:
        module("sbatch", dict(name=name, state="absent"), tmp_path)


def test_errors_are_clear(name, tmp_path):
    bad = module("sbatch", dict(name=name, content="#!/bin/bash\n", options={"partition": "nope"}), tmp_path)
    assert bad["failed"] and bad["msg"].startswith("sbatch rejected the job: sbatch: error: invalid partition")
    unknown = module("sbatch", dict(name=name, content="#!/bin/bash\n", options={"no-such-option": 1}), tmp_path)
    assert unknown["failed"] and "no-such-option is not an sbatch option" in unknown["msg"]
    missing = module("sbatch", dict(name=name, script=str(tmp_path / "nope.sh")), tmp_path)
    assert missing["failed"] and "nope.sh cannot be read" in missing["msg"]
    assert jobs_named(name) == []


def test_job_info_by_name_with_metrics(name, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(dict(step=s, total_steps=10, loss=3.0 - s / 10.0, tokens_per_s=1000.0,
                                               eta_s=10 - s)) + "\n" for s in range(1, 5)))
    job = module("sbatch", dict(name=name, content="#!/bin/bash\ntrue\n", options=SMALL, wait=True), tmp_path)
    info = module("slurm_job_info", dict(name=name, metrics_file=str(metrics)), tmp_path)
    assert [j["job_id"] for j in info["jobs"]] == [job["job_id"]] and info["finished"]
    assert info["jobs"][0]["state"] == "COMPLETED" and info["jobs"][0]["nodes"]
    assert info["progress"]["step"] == 4 and info["progress"]["percent"] == 40.0


def test_cluster_info_and_facts(local_cluster, tmp_path):
    result = playbook("""
- hosts: slurm_login
  gather_facts: false
  tasks:
    - llmtrain.slurm.slurm_cluster_info:
    - ansible.builtin.assert:
        that:
          - ansible_facts.slurm_cluster.version is version('22.05', '>=')
          - ansible_facts.slurm_cluster.nodes | map(attribute='name') | list == %s
          - (ansible_facts.slurm_cluster.partitions | selectattr('default') | first).nodes | length == 3
""" % json.dumps(NODES), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]


def test_callback_prints_progress_per_retry(name, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    script = ("#!/bin/bash\nfor s in 1 2 3 4 5; do echo '{\"step\": '$s', \"total_steps\": 5, \"loss\": 2.5, "
              "\"tokens_per_s\": 1234.4, \"eta_s\": 75}' >> %s; sleep 1; done\n" % metrics)
    result = playbook("""
- hosts: slurm_login
  gather_facts: false
  tasks:
    - llmtrain.slurm.sbatch:
        name: %s
        content: "{{ script }}"
        chdir: %s
        options: {mem: 50M}
      register: job
    - llmtrain.slurm.slurm_job_info:
        job_id: "{{ job.job_id }}"
        metrics_file: %s
      register: watch
      until: watch.finished
      retries: 30
      delay: 1
""" % (name, tmp_path, metrics), tmp_path, "-e", json.dumps(dict(script=script)))
    assert result.returncode == 0, result.stdout[-3000:]
    lines = re.findall(r"^\[localhost\] job \d+ .*$", result.stdout, re.M)
    assert lines, result.stdout[-3000:]
    assert any(re.search(r"job \d+ RUNNING on " + NODE_RE + r": step \d/5, loss 2.5, 1234 tokens/s, ETA 1m15s \(retry \d+/30\)$", line)
               for line in lines), lines
    assert "FAILED - RETRYING" not in result.stdout  # the progress line stands in for the retry noise


@pytest.mark.parametrize("plugin", [["llmtrain.slurm.sbatch"], ["llmtrain.slurm.slurm_job_info"],
                                    ["llmtrain.slurm.slurm_cluster_info"], ["-t", "callback", "llmtrain.slurm.job_progress"],
                                    ["-t", "callback", "llmtrain.slurm.default"], ["-t", "role", "llmtrain.slurm.run"]])
def test_docs_render(plugin):
    proc = subprocess.run([os.path.join(BIN, "ansible-doc")] + plugin, cwd=ROOT, env=ansible_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60,
                          check=False)
    assert proc.returncode == 0 and "ERROR" not in proc.stdout, proc.stdout
    assert plugin[-1] in proc.stdout
