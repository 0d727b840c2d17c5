"""Runs nobody sits and watches, on a cluster another user shares: pretrain.yml with
pretrain_watch=false submits and returns; playbooks/status.yml shows every run (queued behind the
other user's job, running, finished, failed, stopped) and collects one; playbooks/stop.yml stops a
run with a checkpoint, never touching the other user's job of the same name; pretrain.yml resumes
the stopped run with every step once."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from cluster import RELEASE, RUNS, WORKSPACE, as_user, run_playbook, slurm, slurm_env, wait_for
from test_reliability import STAGES, SESSION, assert_every_step_once, checkpoints, events, run_vars, training_step

FAILING_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "files", "fails", "train.py")
OTHER_USER = "nobody"


def fresh(name):
    run = "ops-%s-%s" % (name, SESSION)
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    return run


def as_other_user(*argv):
    """A Slurm command run as another user of this machine (the local cluster's munge knows every uid)."""
    proc = subprocess.run(as_user(OTHER_USER, argv), env=slurm_env(),
                          cwd="/tmp", stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def state_of(job_id):
    return slurm("squeue", "--noheader", "--states=all", "--jobs", job_id, "--format=%T").strip()


def shown(output, task):
    """The lines a debug task whose name starts with `task` showed (the JSON results' msg)."""
    found = re.search(r"TASK \[[^\]]*%s.*?=> (\{\n.*?\n\})\n" % re.escape(task), output, re.S)
    assert found, output[-4000:]
    return json.loads(found.group(1))["msg"].split("\n")


def table_rows(output):
    """{run: its line of the status table} from a status.yml output."""
    lines = shown(output, "Show every run")
    assert lines[0].split()[:3] == ["run", "state", "job"], lines
    return dict((line.split()[0], line) for line in lines[2:])


def status(*extra):
    return run_playbook("status.yml", *extra, timeout=300).output


def play(playbook, values, tags=None, timeout=600):
    return run_playbook(playbook, "-e", json.dumps(values), *(["--tags", tags] if tags else []), timeout=timeout)


@pytest.fixture
def other_users_job(local_cluster):
    """Another user's job (started by the test) holding every node, under the job name of a run of
    ours (llmtrain-<run>); cancelled at the end, with whatever the test left queued."""
    run = fresh("a")
    started = []

    def start():
        job_id = as_other_user("sbatch", "--parsable", "--job-name=llmtrain-" + run, "--nodes=3", "--exclusive",
                               "--output=/dev/null", "--wrap", "sleep 900")
        started.append(job_id)
        wait_for(lambda: state_of(job_id) == "RUNNING", 60, "the other user's job to run")
        return job_id
    yield run, start
    if started:
        slurm("scancel", *started)
    runs = [run] + ["ops-%s-%s" % (name, SESSION) for name in ("b", "c")]
    leftover = slurm("squeue", "--noheader", "--user=root", "--name=" + ",".join("llmtrain-" + r for r in runs),
                     "--format=%i").split()
    if leftover:
        slurm("scancel", *leftover)
    for name in ("a", "b", "c"):
        fresh(name)


@pytest.mark.releases
def test_runs_submitted_without_a_watch_are_followed_stopped_collected_and_resumed(other_users_job):
    run_a, start_other_users_job = other_users_job
    run_b, run_c = fresh("b"), fresh("c")
    # a: 2 nodes, 60 steps of about 0.3 s, stopped midway; b: a script of your own that fails; c: finishes
    # (with restarts inside the job: its launchers must not restart the ranks that stopped on the notice)
    # 0.6 s a step: from step 10 the status and stop plays have 30 s to stop it, under a loaded machine too
    values_a = run_vars(run_a, steps=60, pause=0.6, interval=0, slurm_nodes=2, pretrain_signal_lead=60,
                        pretrain_restarts_in_job=1, pretrain_watch=False)
    values_b = run_vars(run_b, steps=5, pause=0, slurm_nodes=1, run_script=FAILING_SCRIPT, pretrain_watch=False)
    # c: a new run, its whole pipeline queued at once (one queue wait): the data job, the training job
    # behind it, the samples job behind that (inference_after_training)
    values_c = run_vars(run_c, steps=20, pause=0, slurm_nodes=1, pretrain_watch=False, inference_after_training=True)

    # a's and b's data jobs first (the deploy stage waits for them), while the cluster is free
    for values in (values_a, values_b):
        play("pretrain.yml", dict(values, pretrain_watch=True), tags="nccl_env,deploy")
    foreign = start_other_users_job()

    # stop.yml finds no job of ours in the run: the other user's job of that name is not touched
    stopped = play("stop.yml", dict(run_name=run_a), timeout=120)
    assert "has no queued or running job (llmtrain-%s) of this user: nothing to stop" % run_a in stopped.output
    assert state_of(foreign) == "RUNNING"

    # submit and return, no watch and no inference (c: the whole pipeline, a and b: the pretrain stage)
    for values in (values_a, values_b, values_c):
        result = play("pretrain.yml", values, tags=None if values is values_c else "pretrain")
        assert "and not watched (pretrain_watch=false)" in result.output, result.output[-4000:]
        assert not os.path.exists(os.path.join(RUNS, values["run_name"], "samples.txt"))
    # c's play returned before its data job ran (the other user's job holds every node): its training
    # job is queued behind the data job, and its samples job behind the training job
    data_c = slurm("squeue", "--noheader", "--states=all", "--name=llmtrain-prepare-" + run_c, "--format=%i %T").split()
    assert len(data_c) == 2 and data_c[1] == "PENDING", data_c
    train_c = slurm("squeue", "--noheader", "--name=llmtrain-" + run_c, "--format=%i %r %E").split()
    # Slurm's reason is Dependency, or (seen on 26.05) Resources while the data job waits for nodes
    assert train_c[1] in ("Dependency", "Resources") and train_c[2:] == ["afterok:%s(unfulfilled)" % data_c[0]], train_c
    assert "behind job(s) %s of the deploy stage; the pipeline ends here" % data_c[0] in result.output, result.output[-4000:]
    assert "is queued behind training job %s (inference_after_training)" % train_c[0] in result.output, result.output[-4000:]
    rows = table_rows(status())
    for run in (run_a, run_b):
        assert re.match(r"%s +queued \((Resources|Priority)\) +\d+ " % run, rows[run]), rows
    assert re.match(r"%s +queued \(waiting for the data job %s\) +%s " % (run_c, data_c[0], train_c[0]), rows[run_c]), rows
    # nor the other user's job, as a job id (a word of its own: its digits may well be part of a
    # run's tokens/s or of a time, as on a new controller whose job ids are small)
    assert foreign not in " ".join(rows.values()).split(), rows

    # the other user's job ends: a and b start, c waits for a node
    slurm("scancel", foreign)
    wait_for(lambda: training_step(run_a) >= 10, 300, "run a to pass step 10")
    rows = table_rows(status())
    assert re.match(r"%s +running +\d+ +2: \S+ +\d+/60 +\d" % run_a, rows[run_a]), rows

    # stop a: it saves a checkpoint at the step it stopped, within pretrain_signal_lead, and is not requeued
    asked = time.monotonic()
    result = play("stop.yml", dict(run_name=run_a), timeout=300)
    stop_play_s = time.monotonic() - asked
    preempted = events(run_a, "preempted")
    assert len(preempted) == 1 and checkpoints(run_a) == [preempted[0]["step"]], (preempted, checkpoints(run_a))
    stop_step = preempted[0]["step"]
    print("operate: stop.yml ran %.0f s (pretrain_signal_lead 60), the job stopped at step %d of 60 with a checkpoint"
          % (stop_play_s, stop_step))
    said = shown(result.output, "Say where the run stopped")
    assert said[0] == "Run %s: stopped" % run_a, said
    assert "  newest checkpoint: %s/%s/checkpoints/step_%06d.pt" % (WORKSPACE, run_a, stop_step) in said, said

    # b failed, c finished: the table says so, and b's detail shows its log and the failing rank
    wait_for(lambda: '"how": "finished"' in open(os.path.join(WORKSPACE, run_c, "starts.jsonl")).read(), 300,
             "run c to finish")
    rows = table_rows(status())
    assert rows[run_a].split()[1] == "stopped" and "ended stopped" in rows[run_a], rows
    failed = re.match(r"%s +failed \(exit 1\) +(\d+) .*ended failed" % run_b, rows[run_b])
    assert failed, rows
    assert re.match(r"%s +finished +\d+ +\S+ +20/20 " % run_c, rows[run_c]), rows
    # what c used (a CPU cluster: no GPUs), from usage.json: its job's start, nodes x time
    used = json.load(open(os.path.join(WORKSPACE, run_c, "usage.json")))
    assert used["starts"] == 1 and used["gpu_s"] == 0 and used["node_s"] > 0, used
    assert " 0 (%.1f node-h) " % (used["node_s"] / 3600) in rows[run_c], rows
    detail = shown(status("-e", "run_name=" + run_b, "-e", "status_log_lines=20"), "Show in detail run %s" % run_b)
    assert detail[0] == "Run %s: failed (exit 1 (FAILED))" % run_b, detail
    # the script's own traceback (its lines carry no rank: torch.distributed.run's summary names rank 1)
    traceback = detail[detail.index("The first traceback:") + 1:]
    assert traceback[0] == "  Traceback (most recent call last):" and \
        "  FileNotFoundError: data shard 3 of rank 1 is missing" in traceback[:8], detail
    tail = next(i for i, line in enumerate(detail) if line.startswith("Last 20 lines of "))
    assert detail[tail].endswith("/logs/llmtrain-%s-%s.out:" % (run_b, failed.group(1))) and \
        len(detail) - tail - 1 == 20, detail

    # c, never watched, sampled by its samples job (it marks its own record), is collected and reported by
    # status.yml alone, with its samples
    samples_done = os.path.join(WORKSPACE, run_c, "generate.done.json")
    wait_for(lambda: os.path.exists(samples_done) and json.load(open(samples_done))["state"] == "COMPLETED", 300,
             "run c's samples job to complete")
    detail = status("-e", "run_name=" + run_c)
    report = open(os.path.join(RUNS, run_c, "report.md")).read()
    assert "Steps: 20 of 20" in report and os.path.exists(os.path.join(RUNS, run_c, "loss.png")), detail[-4000:]
    samples = open(os.path.join(RUNS, run_c, "samples.txt")).read()
    assert samples.startswith("=== prompt 1: ") and samples.rstrip("\n") in report, detail[-4000:]
    # with the release it ran on (its preflight's): this machine's own, or the one a release session brought up
    assert re.search(r"^- Slurm version: %s\.\d+" % (re.escape(RELEASE) if RELEASE != "system" else r"\d+\.\d+"),
                     report, flags=re.M), report
    done = json.load(open(os.path.join(WORKSPACE, run_c, "train.done.json")))
    assert done["state"] == "COMPLETED", done

    # the next pipeline of c trains nothing and samples from it; a resumes from its checkpoint to the end,
    # unslowed (what is left to train proves nothing more)
    jobs_before = slurm("squeue", "--noheader", "--states=all", "--name=llmtrain-" + run_c, "--format=%i").split()
    result = play("pretrain.yml", dict(values_c, pretrain_watch=True))
    assert slurm("squeue", "--noheader", "--states=all", "--name=llmtrain-" + run_c, "--format=%i").split() == jobs_before
    assert os.path.exists(os.path.join(RUNS, run_c, "samples.txt")), result.output[-4000:]
    play("pretrain.yml", dict(values_a, pretrain_watch=True, nccl_env_extra={}), tags=STAGES)
    resumed = events(run_a, "resume")
    assert len(resumed) == 1 and resumed[0]["step"] == stop_step, resumed
    assert_every_step_once(run_a, 60)
    assert table_rows(status())[run_a].split()[1] == "finished"
