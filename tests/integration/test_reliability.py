"""Faults injected into a running pipeline on the real local cluster, one test each; what
each shows is a row of docs/reliability.md.

Every test starts `ansible-playbook playbooks/pretrain.yml` (the nccl_env, deploy and
pretrain stages, as a user reruns them) for a small run of its own, waits until the job
trains, injects the fault and then checks what a user would check: the play's result and
message, the job's state, the checkpoints, the metrics, and what a rerun does.
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files
from cluster import (BIN, CLUSTER_DIR, NETNS_PREFIX, NODE_RE, NODES, ROOT, RUNS, STREAM, SUBNET, WORKSPACE,
                     BackgroundPlaybook, job_ids, node, slurm, slurm_env, wait_for)
from webhook_receiver import Receiver
from wandb_records import wandb_history, wandb_test_env

STAGES = "nccl_env,deploy,pretrain"
MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}
# two nodes, a rank each: enough for a fault whose checks need ranks on two nodes, not six ranks
TWO_RANKS = dict(slurm_nodes=2, slurm_procs_per_node=1)


def run_vars(run, steps=60, pause=0.2, interval=10, extra_env=None, **more):
    """Extra vars for a small run: 3 nodes x 2 ranks (unless `more` says otherwise), a checkpoint
    every `interval` steps, every step logged, each step slowed by `pause` seconds
    (TRAINER_FAULT_STEP_PAUSE_S reaches the ranks through the run's env file) so that a fault
    lands mid-run. The faults are applied by tests/faults/sitecustomize.py, put on the ranks'
    PYTHONPATH by the env file (the job adds the run's scripts in front of it)."""
    env = dict(extra_env or {})
    if pause:
        env["TRAINER_FAULT_STEP_PAUSE_S"] = str(pause)
    if any(name.startswith("TRAINER_FAULT_") for name in env):
        env["PYTHONPATH"] = os.path.join(ROOT, "tests", "faults")
    values = {
        "run_name": run,
        "pretrain_steps": steps,
        "pretrain_model": MODEL,
        "pretrain_batch_size": 4,
        "pretrain_checkpoint_interval": interval,
        "pretrain_extra_args": ["--log-interval", "1", "--eval-interval", "0", "--warmup", "5",
                                "--keep-checkpoints", "100"],
        "deploy_dataset_max_bytes": 200000,
        "nccl_env_extra": env,
        # the faults come after it: the network check (test_fabric.py) would add about 5 s to each start
        "pretrain_network_check": False,
    }
    values.update(more)
    return values


class Playbook(BackgroundPlaybook):
    """The stages a user reruns (nccl_env, deploy, pretrain) unless told otherwise."""

    def __init__(self, values, playbook="pretrain.yml", tags=STAGES, args=()):
        super().__init__(values, playbook, tags, args)


def run_playbook_now(values, tags=STAGES, timeout=600):
    return Playbook(values, tags=tags).wait(timeout)


# Run names of this session: jobs of an earlier session's runs may still be in the queue.
SESSION = "%05x%d" % (int(time.time()) % 0xFFFFF, STREAM)
STALE_RUN_S = 3600


def fresh(name):
    run = "rel-%s-%s" % (name, SESSION)
    shutil.rmtree(os.path.join(WORKSPACE, run), ignore_errors=True)
    shutil.rmtree(os.path.join(RUNS, run), ignore_errors=True)
    os.makedirs(RUNS, exist_ok=True)
    return run


@pytest.fixture(scope="module", autouse=True)
def remove_runs():
    """The runs these tests make (workspace and controller side), before and after: this
    session's, and those of earlier sessions left for an hour (another session's runs on the
    same cluster may be in the middle of a test)."""
    def remove():
        for base in (WORKSPACE, RUNS):
            if os.path.isdir(base):
                for name in os.listdir(base):
                    path = os.path.join(base, name)
                    if name.startswith("rel-") and (name.endswith("-" + SESSION) or
                                                    time.time() - os.path.getmtime(path) > STALE_RUN_S):
                        shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    remove()
    yield
    remove()


def records(run):
    path = os.path.join(WORKSPACE, run, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.endswith("\n")]


def step_records(run):
    return [r for r in records(run) if "loss" in r]


def training_step(run):
    steps = step_records(run)
    return steps[-1]["step"] if steps else 0


def events(run, name):
    return [r for r in records(run) if r.get("event") == name]


def checkpoints(run):
    """The steps of the run's checkpoints: step_N.pt files and sharded step_N/ directories."""
    directory = os.path.join(WORKSPACE, run, "checkpoints")
    if not os.path.isdir(directory):
        return []
    return sorted(int(m.group(1)) for m in map(re.compile(r"^step_(\d+)(\.pt)?$").match, os.listdir(directory)) if m)


def observe(fault, **figures):
    """Print what a fault cost (with pytest -s): the "observed" column of docs/reliability.md."""
    print("reliability: %s: %s" % (fault, ", ".join("%s=%s" % item for item in sorted(figures.items()))))


def jobs(run):
    """[(job id, state)] of the run's training job(s) the controller knows."""
    out = slurm("squeue", "--noheader", "--states=all", "--name=llmtrain-" + run, "--format=%i %T")
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]


def only_job(run):
    """The id of the run's one training job."""
    (job_id, _state_now), = jobs(run)
    return job_id


def job_state(job_id):
    return slurm("squeue", "--noheader", "--states=all", "--jobs", job_id, "--format=%T").strip()


def job_nodes(job_id):
    """The nodes of the job's last start, in the order of their ranks."""
    nodes = re.search(r" NodeList=(\S+)", slurm("scontrol", "show", "job", job_id)).group(1)
    return slurm("scontrol", "show", "hostnames", nodes).split()


def job_logs(run):
    """The text of the run's training job logs."""
    directory = os.path.join(WORKSPACE, run, "logs")
    texts = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("llmtrain-" + run + "-"):
            with open(os.path.join(directory, name)) as handle:
                texts.append(handle.read())
    return "".join(texts)


def job_runtime_s(job_id):
    days, hours, minutes, seconds = re.search(r"RunTime=(?:(\d+)-)?(\d+):(\d+):(\d+)",
                                              slurm("scontrol", "show", "job", job_id)).groups()
    return ((int(days or 0) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)


def generate_logs(run):
    """The text of the run's inference job logs."""
    texts = []
    for path in sorted(glob.glob(os.path.join(WORKSPACE, run, "logs", "llmtrain-generate-%s-*" % run))):
        with open(path) as handle:
            texts.append(handle.read())
    return "".join(texts)


def assert_every_step_once(run, steps):
    seen = sorted(set(r["step"] for r in step_records(run)))
    assert seen == list(range(1, steps + 1)), seen


def load_checkpoint(run, step, sharded=False):
    """The checkpoint loads with the trainer's own loader (what resume and inference use)."""
    code = ("import sys; from trainer.checkpoint import load_checkpoint; "
            "print(load_checkpoint(sys.argv[1])['step'])")
    path = os.path.join(WORKSPACE, run, "checkpoints", "step_%06d" % step + ("" if sharded else ".pt"))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "roles", "deploy", "files"))
    out = subprocess.run([os.path.join(BIN, "python"), "-c", code, path], env=env, stdout=subprocess.PIPE,
                         universal_newlines=True, check=True, timeout=120).stdout
    return int(out)


@pytest.fixture(scope="module")
def reference(local_cluster):
    """An uninterrupted run: the step count and losses a faulted run must end with."""
    run = fresh("reference")
    # with a webhook whose receiver is down: nothing of the run waits on it or fails by it
    down = Receiver(SUBNET + ".1")
    down.close()
    result = run_playbook_now(run_vars(run, pause=0, run_notify=[dict(url=down.url("/hook/secret-token"))]))
    assert result.rc == 0, result.output[-6000:]
    assert "llmtrain: the end notification to %s.1 was not sent: " % SUBNET in job_logs(run), job_logs(run)[-3000:]
    assert "secret-token" not in job_logs(run)
    return {r["step"]: r["loss"] for r in step_records(run)}


# 1. Preemption ---------------------------------------------------------------------------

def test_preemption_requeue_checkpoints_and_resumes_at_the_same_step(reference, tmp_path):
    run = fresh("preempt")
    # with its metrics also logged to W&B, offline
    play = Playbook(run_vars(run, extra_env=wandb_test_env(tmp_path), run_wandb_project="llmtrain-tests",
                             run_wandb_mode="offline"))
    wait_for(lambda: training_step(run) >= 15, 180, "training to pass step 15", play)
    job_id = only_job(run)
    slurm("scontrol", "requeue", job_id)
    requeued_at = time.monotonic()
    result = play.wait()
    assert result.rc == 0, result.output[-6000:]
    preempted, = events(run, "preempted")
    observe("preemption", play_end_after_requeue_s=round(time.monotonic() - requeued_at), preempted_at=preempted["step"],
            resumed_at=events(run, "resume")[0]["step"])
    resumed, = events(run, "resume")
    assert preempted["signal"] == "SIGTERM" and resumed["step"] == preempted["step"] >= 15
    assert checkpoints(run)[-1] == 60 == max(reference)
    assert_every_step_once(run, 60)
    assert [job for job, _state_now in jobs(run)] == [job_id]  # the same job ran again; nothing was doubled
    # the watch said the requeue and lifted Slurm's delay; the report lists the recovery
    assert "job %s: requeued (start 2 begins); Slurm's requeue delay lifted" % job_id in result.output, \
        result.output[-6000:]
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "| 2 | stopped at step %d with a checkpoint | %d | step_%06d.pt | 0 |" % (
        preempted["step"], preempted["step"], preempted["step"]) in report, report
    # the same trajectory: every loss is the uninterrupted run's to float32 rounding (seen here:
    # a few steps differ in the last bit or two, under 1e-6)
    losses = {r["step"]: r["loss"] for r in step_records(run)}
    assert losses.keys() == reference.keys()
    assert all(abs(losses[s] - reference[s]) < 1e-5 for s in reference), (losses, reference)
    # both starts logged to one W&B run, whose records came to the controller for 'wandb sync'.
    # The requeue's SIGTERM reaches W&B's own process too, which ends without writing what it
    # holds: the first start's records may be missing there (seen: all 17 of them); the trainer
    # warns and stops as it should, and every record after the resume is there
    run_id = open(os.path.join(WORKSPACE, run, "wandb", "run_id")).read().strip()
    starts = sorted(os.listdir(os.path.join(RUNS, run, "wandb")))
    assert run_id.startswith(run + "-") and len(starts) == 2 and all(s.endswith("-" + run_id) for s in starts), starts
    logged = {step: values["train/loss"] for step, values in wandb_history(os.path.join(RUNS, run)).items()}
    assert logged == pytest.approx({s: losses[s] for s in logged}, rel=1e-12)
    missing = sorted(set(losses) - set(logged))
    log = open(glob.glob(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-*.out" % run))[0]).read()
    assert all(s <= resumed["step"] for s in missing), missing
    assert not missing or "train: warning: W&B stopped taking records at step" in log, missing
    observe("preemption with W&B", steps_missing_in_wandb=missing)


# 11. Sharded (FSDP) run preempted ---------------------------------------------------------

def node_checks_taking_the_notice(run):
    """The pids of the run's node-check processes (one per node, in this machine's one pid
    namespace), once every one of them catches SIGUSR2 (its handler is in, /proc's SigCgt);
    None before."""
    run_dir = os.path.join(WORKSPACE, run)
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
            with open("/proc/%s/status" % pid) as handle:
                caught = [int(line.split()[1], 16) for line in handle if line.startswith("SigCgt:")]
        except OSError:
            continue  # gone meanwhile
        # the Python of each node's check itself: not srun or timeout, whose argv holds the same
        if argv[1:4] == ["-m", "llmtrain_node.node_check", "check"] and run_dir in argv:
            if not caught or not caught[0] & (1 << (signal.SIGUSR2 - 1)):
                return None
            pids.append(int(pid))
    return pids if len(pids) == len(NODES) else None


def test_fsdp_preempted_with_sigusr2_resumes_from_its_sharded_checkpoint_and_matches_ddp(reference):
    run = fresh("fsdp")
    play = Playbook(run_vars(run, pretrain_parallel="fsdp"))
    # A notice while the first start's nodes check themselves (the check's processes run for
    # seconds: each imports torch): the check goes on, the job requeues itself before any
    # training, and the second start trains from step 1.
    job_id = wait_for(lambda: jobs(run) and only_job(run), 120, "the training job", play)
    wait_for(lambda: node_checks_taking_the_notice(run), 180, "the first start's node check to take the notice in", play)
    slurm("scancel", "--signal=USR2", job_id)  # to the job's steps, as a preemption notice is sent
    wait_for(lambda: "before training started" in job_logs(run), 120, "the job to requeue itself before training", play)
    wait_for(lambda: training_step(run) >= 15, 240, "training to pass step 15", play)
    slurm("scancel", "--signal=USR2", job_id)
    signalled_at = time.monotonic()
    result = play.wait()
    assert result.rc == 0, result.output[-6000:]
    preempted, = events(run, "preempted")
    resumed, = events(run, "resume")
    observe("fsdp-preemption", play_end_after_signal_s=round(time.monotonic() - signalled_at),
            preempted_at=preempted["step"], resumed_at=resumed["step"])
    assert preempted["signal"] == "SIGUSR2" and resumed["step"] == preempted["step"] >= 15
    assert (resumed["parallel"], resumed["world_size"]) == ("fsdp", 6)
    # the checkpoint it resumed from: one shard per rank, written by all six, on three nodes
    shards = os.listdir(os.path.join(WORKSPACE, run, "checkpoints", "step_%06d" % resumed["step"]))
    assert sorted(name for name in shards if name.endswith(".distcp")) == ["__%d_0.distcp" % rank for rank in range(6)]
    assert load_checkpoint(run, resumed["step"], sharded=True) == resumed["step"]
    log = job_logs(run)
    assert log.count("llmtrain: the stop notice (SIGUSR2 on ") == 1, log[-6000:]
    assert "came during the checks, before training started; nothing new to save; requeue 1 of 3" in log, log[-6000:]
    assert log.count("requeue 2 of 3") == 1 and "requeue 3 of" not in log
    assert not os.path.exists(os.path.join(WORKSPACE, run, "STOP_NOTICE"))
    assert [job for job, _state_now in jobs(run)] == [job_id]
    assert checkpoints(run)[-1] == 60 == max(reference)
    assert_every_step_once(run, 60)
    # the same trajectory as the ddp run of the same seed, to float32 rounding: FSDP sums the
    # ranks' gradients in another order
    losses = {r["step"]: r["loss"] for r in step_records(run)}
    assert losses.keys() == reference.keys()
    assert all(abs(losses[s] - reference[s]) <= 1e-5 * abs(reference[s]) for s in reference), (losses, reference)
    # the collect step found the newest checkpoint, a directory
    with open(os.path.join(RUNS, run, "facts.json")) as handle:
        checkpoint = json.load(handle)["checkpoint"]
    assert checkpoint == {"path": os.path.join(WORKSPACE, run, "checkpoints", "step_000060"), "step": 60}
    # and the inference stage samples from it
    sampled = run_playbook_now(run_vars(run, pretrain_parallel="fsdp"), tags="inference")
    assert sampled.rc == 0, sampled.output[-6000:]
    assert os.path.getsize(os.path.join(RUNS, run, "samples.txt")) > 0
    assert "generate: %s/checkpoints/step_000060 (step 60," % os.path.join(WORKSPACE, run) in generate_logs(run)


# 9. Watcher interrupted ------------------------------------------------------------------

def test_ctrl_c_of_the_watcher_leaves_the_job_running_and_a_rerun_reattaches(local_cluster):
    run = fresh("ctrl-c")
    # 100 steps of about 0.35 s: the job still trains (about 25 s more) when the rerun, which runs its
    # stages before it looks, re-attaches to it, also on a loaded machine. Two nodes, a rank each: the
    # interrupt and the re-attach are the watcher's, whatever the job's ranks
    values = dict(steps=100, pause=0.33, **TWO_RANKS)
    play = Playbook(run_vars(run, **values))
    wait_for(lambda: training_step(run) >= 5, 180, "training to pass step 5", play)
    job_id = only_job(run)
    play.interrupt()
    stopped = play.wait(60)
    assert stopped.rc != 0
    at_interrupt = training_step(run)
    assert job_state(job_id) == "RUNNING"
    wait_for(lambda: training_step(run) > at_interrupt + 3, 60, "the job to go on training")
    # the rerun has another setting of the job (its preemption signal's lead, so another script and
    # fingerprint): it re-attaches to the run's running job all the same, never a second one beside it
    again = run_playbook_now(run_vars(run, pretrain_signal_lead=240, **values))
    assert again.rc == 0, again.output[-6000:]
    observe("ctrl-c", training_jobs=len(jobs(run)), resumes=len(events(run, "resume")))
    assert [job for job, _state_now in jobs(run)] == [job_id]
    assert checkpoints(run)[-1] == 100 and not events(run, "resume")  # one uninterrupted job
    assert_every_step_once(run, 100)


# 3. Node loss ----------------------------------------------------------------------------

def netns_pids(name):
    out = subprocess.run(["ip", "netns", "pids", NETNS_PREFIX + name], stdout=subprocess.PIPE, universal_newlines=True,
                         check=True).stdout
    return [int(pid) for pid in out.split()]


def test_node_loss_fails_the_play_naming_the_node_and_a_rerun_resumes(local_cluster):
    run = fresh("node-loss")
    # every node of the partition, so that the requeued job waits for the lost one; a rank each
    values = run_vars(run, slurm_procs_per_node=1)
    play = Playbook(values)
    wait_for(lambda: training_step(run) >= 15, 180, "training to pass step 15", play)
    job_id = only_job(run)
    # the node dies: its slurmd, the job's step daemon, the launcher and its rank
    for pid in netns_pids(node(1)):
        os.kill(pid, signal.SIGKILL)
    killed_at, at_kill = time.monotonic(), training_step(run)
    result = play.wait(300)
    noticed_s = time.monotonic() - killed_at
    last_recorded = training_step(run)  # the job waits requeued: the last step start 1 recorded (one may follow the kill)
    assert result.rc != 0
    # the controller's SlurmdTimeout (30 s on the local cluster) bounds it
    assert noticed_s < 120, noticed_s
    assert re.search(r"Training job %s \(llmtrain-%s\) lost a node and was requeued" % (job_id, run), result.output)
    assert re.search(r"Out of service in partition debug: " + re.escape(node(1)) + r" \(down[^)]*Not responding", result.output), \
        result.output[-4000:]
    # Slurm's own node-failure line, though the surviving ranks' lost-peer errors come before it in the log
    assert re.search(r"From the log: .*(Node failure on %s|DUE TO NODE FAILURE)" % re.escape(node(1)), result.output), \
        result.output[-4000:]
    # the watch said it as it happened: the start that ended, the node it lost and Slurm's reason
    assert re.search(r"job %s: start 1 on \S+ ended(?: \(\w+\))? and the job is requeued \(start 2 next\): lost %s "
                     r"\(down[^)]*Not responding" % (job_id, re.escape(node(1))), result.output), result.output[-4000:]
    assert job_state(job_id) == "PENDING"  # requeued: it resumes by itself once the node is back
    last_good = checkpoints(run)[-1]
    assert last_good <= at_kill and load_checkpoint(run, last_good) == last_good
    # the node comes back; the rerun re-attaches to the queued job, which resumes
    run_playbook_local_cluster()
    again = run_playbook_now(values)
    assert again.rc == 0, again.output[-6000:]
    states = dict(jobs(run))
    later = sorted(set(states) - {job_id})
    resumes = events(run, "resume")
    observe("node-loss", play_failed_after_s=round(noticed_s), killed_at_step=at_kill, resumed_at=resumes[0]["step"],
            steps_lost=at_kill - resumes[0]["step"], starts_after_the_loss=len(resumes), jobs=len(states))
    # The queued job starts again as soon as the node is back. Twice in CI (never when run
    # alone) that start had its tasks ended by a SIGTERM a second in, sent neither by the job
    # script nor by the trainer (slurmd's log on the returned node shows it first). The job
    # then requeued itself from a checkpoint, or it ended before the rerun looked and the rerun
    # submitted one job. Either way nothing ran twice at once, and the run finished from the
    # last good checkpoint. Once it ended FAILED: the SIGTERM came before the ranks could save
    # (a second into the start); the job now requeues itself uncounted then too (stray_sigterm_failure).
    if later:
        assert states[job_id] != "COMPLETED" and len(later) == 1 and states[later[0]] == "COMPLETED", states
    assert resumes[0]["step"] == last_good  # steps lost: those after it, redone
    # the rerun's watch says where the job it watches resumed (the trainer's line in starts.jsonl: its
    # resume may be thousands of records back), and the report lists the recovery with its nodes
    print("\n".join(re.findall(r".*job \d+:? start \d+ .*", result.output + again.output)))
    resumed = re.findall(r"job (\d+) start (\d+) resumed at step (\d+) from step_0*(\d+)\.pt", again.output)
    assert resumed, again.output[-6000:]
    # each as the trainer recorded it: the start it names resumed at that step (where the start after
    # the loss was itself stopped, as described above, the rerun may first see a later start)
    recorded = [(str(r.get("job_id")), str(r.get("start")), str(r["step"]), str(r["step"])) for r in resumes]
    assert all(line in recorded for line in resumed), (resumed, recorded)
    if not later and len(resumes) == 1:
        # the first start after the loss resumed; or the stray SIGTERM ended it before it could, and it
        # requeued the job itself (seen in CI: start 2 ended so, start 3 resumed), as each start before
        # the one that resumed did
        first = int(resumes[0]["start"])
        with open(os.path.join(WORKSPACE, run, run_files.STARTS)) as handle:
            ends = dict((r["start"], r["how"]) for r in (json.loads(line) for line in handle if line.startswith("{"))
                        if r.get("event") == "end")
        assert first >= 2 and all(ends.get(start) == "requeued" for start in range(2, first)), (first, ends)
        assert resumed[0] == (job_id, str(first), str(last_good), str(last_good)), resumed
    for job, start, _step, _checkpoint in resumed:
        # the rerun found the start running: the requeue it did not see is told with it
        before = "start %d" % (int(start) - 1) if int(start) > 1 else r"start \d+ of job \d+"
        assert re.search(r"job %s(?: start %s on \S+|: start %d on \S+ ended.* and the job was requeued; start %s began "
                         r"on \S+ before the watch looked): (every node|without \S+, which) %s had"
                         % (job, start, int(start) - 1, start, before), again.output), again.output[-6000:]
    report = open(os.path.join(RUNS, run, "report.md")).read()
    row = re.search(r"\| 2 \| crash, hang or lost node \| %d \| step_0*%d\.pt \| (\d+) \| \d+ \| slurm\S+ \|"
                    % (last_good, last_good), report)
    assert row and int(row.group(1)) == last_recorded - last_good, report  # the steps recorded past it, redone
    assert checkpoints(run)[-1] == 60
    assert_every_step_once(run, 60)


@pytest.mark.releases(on=1)
def test_a_node_lost_with_a_spare_free_is_told_by_the_start_that_ended_and_the_run_finishes(local_cluster):
    """A 2-node run on the 3-node partition, with run_notify's webhooks at a receiver of the test's
    on the cluster's bridge (what the nodes reach): a stop notice (SIGUSR2, as a preemption's or a
    site's --signal) requeues it once; then one node of its second start dies, the job is requeued
    and starts again on the spare within the same play. The watch looks once a minute, so the next
    start has begun (and written its line) when it looks: the requeue is told from the ended
    start's own lines. The receiver gets each event, in order, once, within 5 s of it."""
    run = fresh("node-loss-spare")
    receiver = Receiver(SUBNET + ".1")
    try:
        play = Playbook(run_vars(run, steps=40, slurm_nodes=2, pretrain_poll_interval=60, run_notify=[
            dict(url=receiver.url("/json/secret-token"), format="json"), dict(url=receiver.url("/slack"))]))
        wait_for(lambda: training_step(run) >= 6, 180, "training to pass step 6", play)
        job_id = only_job(run)
        slurm("scancel", "--batch", "--signal=USR2", job_id)
        wait_for(lambda: events(run, "resume") and training_step(run) >= 16, 240,
                 "the second start to train past step 16", play)
        second_nodes = slurm("squeue", "--noheader", "--jobs", job_id, "--format=%N").strip()
        lost = slurm("scontrol", "show", "hostnames", second_nodes).split()[-1]  # not the batch node
        for pid in netns_pids(lost):
            os.kill(pid, signal.SIGKILL)
        at_kill = training_step(run)
        result = play.wait(600)
    finally:
        run_playbook_local_cluster()
        receiver.close()
    assert result.rc == 0, result.output[-6000:]
    print("\n".join(re.findall(r".*job \d+:? start \d+ .*", result.output)))
    # start 2, on its own nodes, and the node it lost: whether the watch saw the job wait or not
    told = re.search(r"job %s: start 2 on %s ended(?: \(\w+\))? and the job (?:is requeued \(start 3 next\): lost %s "
                     r"\(down|was requeued; start 3 began on \S+ before the watch looked: without %s, which start 2 had)"
                     % (job_id, re.escape(second_nodes), re.escape(lost), re.escape(lost)), result.output)
    assert told, result.output[-6000:]
    assert not re.search(r"start [3-9] on \S+ ended", result.output), result.output[-6000:]
    resumed = events(run, "resume")[-1]
    observe("node-loss-spare", killed_at_step=at_kill, resumed_at=resumed["step"], line=told.group(0))
    assert resumed["step"] <= at_kill and resumed["step"] % 10 == 0  # its last checkpoint before the loss
    assert_every_step_once(run, 40)
    # what the channel heard: each event once, in order, each within 5 s of when it happened
    records = [body for path, body, _at in receiver.posts if path.startswith("/json/")]
    said = [body["text"] for path, body, _at in receiver.posts if path == "/slack"]
    # start 2's ranks may fail on their lost peer before Slurm finds the node down (its slurmd answers
    # no more for SlurmdTimeout): that failure is told, then Slurm's requeue with the node
    failed = [("failure", 2)] if ("failure", 2) in [(r["event"], r["start"]) for r in records] else []
    assert [(r["event"], r["start"]) for r in records] == [
        ("start", 1), ("requeue", 1), ("start", 2)] + failed + [("requeue", 2), ("start", 3), ("end", 3)], records
    records = [r for r in records if r["event"] != "failure"]
    assert [text for text in said if " failed: " not in text] == [
        r["text"].replace("<", "&lt;").replace(">", "&gt;") for r in records]
    assert all(r["job_id"] == job_id and r["run"] == run for r in records)
    assert records[1]["why"].startswith("a stop notice: stopped with a checkpoint (") and "requeue 1 of" in records[1]["why"]
    assert records[3]["lost"][0]["node"] == lost and records[3]["lost"][0]["reason"], records[3]
    assert records[4]["lost"] == records[3]["lost"] and records[4]["node_count"] == 2
    assert records[5]["step"] == 40 and records[5]["node_hours"] > 0 and records[5]["gpu_hours"] == 0
    late = [(r["event"], round(at - run_files.stamp(r["time"]), 1)) for path, r, at in receiver.posts
            if path.startswith("/json/") and at - run_files.stamp(r["time"]) > 6]  # (its time is in whole seconds)
    assert not late, late
    # the webhooks' URLs are in no log, script or report
    assert not any("secret-token" in text for text in (job_logs(run), result.output, open(os.path.join(
        WORKSPACE, run, "scripts", "pretrain.sbatch")).read(), open(os.path.join(RUNS, run, "report.md")).read()))


def rank_pids(name, job_id):
    """{pid: rank} of the job's training ranks in node `name`'s namespace."""
    found = {}
    for pid in netns_pids(name):
        try:
            with open("/proc/%d/environ" % pid, "rb") as handle:
                env = dict(p.split(b"=", 1) for p in handle.read().split(b"\0") if b"=" in p)
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID") == job_id.encode() and b"LOCAL_RANK" in env and b"RANK" in env:
            found[pid] = int(env[b"RANK"])
    return found


def step_pids(name, job_id):
    """The pids of the job's training step in node `name`'s namespace: the launcher and its ranks
    (what slurmd signals when it signals the step there), not slurmstepd or the batch shell."""
    found = []
    for pid in netns_pids(name):
        try:
            with open("/proc/%d/environ" % pid, "rb") as handle:
                env = dict(p.split(b"=", 1) for p in handle.read().split(b"\0") if b"=" in p)
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID") == job_id.encode() and (b"torch.distributed.run" in argv or b"LOCAL_RANK" in env):
            found.append(pid)
    return found


@pytest.mark.releases(on=0)
def test_a_sigterm_to_one_nodes_steps_while_slurm_runs_the_job_requeues_it_without_counting(local_cluster):
    """What a lost node's return did to the next start (row 3): the controller's resent request to
    end the earlier start reached the node's slurmd, which sent SIGTERM to this start's step there
    and nowhere else. Sent here to that step's processes on one node (not the batch node): every
    rank checkpoints, and since Slurm still runs the job, it requeues itself without using a
    requeue of run_requeue_max (0 here: a counted one would end the run)."""
    run = fresh("stray-sigterm")
    # two nodes of two ranks: one node's step is signalled (its launcher and both ranks), the other's is not
    play = Playbook(run_vars(run, steps=40, run_requeue_max=0, slurm_nodes=2))
    wait_for(lambda: training_step(run) >= 12, 180, "training to pass step 12", play)
    job_id = only_job(run)
    nodes = slurm("scontrol", "show", "hostnames", slurm("squeue", "--noheader", "--jobs", job_id, "--format=%N"))
    target = nodes.split()[-1]
    pids = step_pids(target, job_id)
    assert len(pids) >= 3, pids  # the launcher and its 2 ranks
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    result = play.wait(600)
    assert result.rc == 0, result.output[-6000:]
    preempted, = events(run, "preempted")
    resumed, = events(run, "resume")
    assert preempted["signal"] == "SIGTERM" and resumed["step"] == preempted["step"] >= 12
    assert "requeued, not counted against run_requeue_max (0): uncounted requeue 1 of 3 of this job" in \
        job_logs(run), job_logs(run)[-6000:]
    with open(os.path.join(WORKSPACE, run, "requeues_uncounted")) as handle:
        assert handle.read() == "%s 1\n" % job_id
    assert [job for job, _state_now in jobs(run)] == [job_id]
    assert_every_step_once(run, 40)
    observe("stray SIGTERM", node=target, stopped_at=preempted["step"])


HANG_TIMEOUT = 15
# what the hang watch adds to the timeout before the watch names the node, at most: its poll (5 s),
# the dump step (py-spy on every rank, a few seconds here; STEP_TIMEOUT_S bounds it) and the watch's
# poll (2 s)
HANG_BOUND = 30


@pytest.mark.releases(on=1)
def test_a_stopped_rank_is_named_its_stacks_kept_and_the_job_requeues_without_its_node(local_cluster):
    """A 2-node run on the 3-node partition, whose third node is free for the requeue without the
    stopped rank's node; one rank stopped (SIGSTOP) mid-training: silent ranks, no error."""
    run = fresh("hang")
    play = Playbook(run_vars(run, slurm_nodes=2, pretrain_poll_interval=2, pretrain_hang_timeout=HANG_TIMEOUT))
    wait_for(lambda: training_step(run) >= 15, 240, "training to pass step 15", play)
    job_id = only_job(run)
    stopped_node = job_nodes(job_id)[-1]  # not the batch node
    pids = rank_pids(stopped_node, job_id)
    assert pids, "no rank of job %s on %s" % (job_id, stopped_node)
    pid = min(pids)
    os.kill(pid, signal.SIGSTOP)
    stopped_at, at_stop = time.monotonic(), training_step(run)
    line = r"job %s \(start 1\) hung after step \d+: no progress for \d+ s \(timeout %d s\)" % (job_id, HANG_TIMEOUT)
    try:
        wait_for(lambda: re.search(line, play.output()), HANG_TIMEOUT + HANG_BOUND + 60, "the hang named", play)
    except AssertionError as err:  # a hang named at another start says why here, not in the cut output
        raise AssertionError("%s\nthe play's lines of hangs and requeues:\n%s" % (err, "\n".join(
            re.findall(r".*(?:\bhung\b|requeue|no progress|stacks name).*", play.output())[:40])))
    named_s = time.monotonic() - stopped_at
    result = play.wait(400)
    assert result.rc == 0, result.output[-6000:]
    assert re.search(r"\n    %s: rank %d stopped \(state T\)\n        \S+ \(" % (re.escape(stopped_node), pids[pid]),
                     result.output), result.output[-6000:]
    assert named_s <= HANG_TIMEOUT + HANG_BOUND, named_s
    # every rank's stack, from every node of the job
    stacks = os.path.join(WORKSPACE, run, "hangs", "%s-1" % job_id)
    summary = json.load(open(os.path.join(stacks, "summary.json")))
    assert summary["suspects"] == {stopped_node: "rank %d stopped (state T)" % pids[pid]}
    assert summary["answered"] == 2 and summary["ranks"] == 4, summary
    dumped = json.load(open(os.path.join(stacks, stopped_node + ".json")))
    assert {r["rank"]: r["state"] for r in dumped["ranks"]}[pids[pid]] == "T"
    assert all(r.get("frames") for r in dumped["ranks"]), dumped
    assert "Thread " in open(os.path.join(stacks, stopped_node + ".txt")).read()
    recorded = json.load(open(os.path.join(WORKSPACE, run, "bad_nodes.json")))
    assert recorded[stopped_node]["reason"] == "hang: rank %d stopped (state T)" % pids[pid]
    # the same job, requeued once without the node, finished from the last checkpoint
    assert jobs(run) == [(job_id, "COMPLETED")]
    assert "Restarts=1" in slurm("scontrol", "show", "job", job_id) and stopped_node not in job_nodes(job_id)
    # resumed from a checkpoint at or after the last one before the stop: the requeue's SIGTERM
    # lets the running ranks save the last step every rank finished (the stopped one too), which
    # may be past the last step logged
    resumes = events(run, "resume")
    assert at_stop <= summary["step"] and len(resumes) == 1 and resumes[0]["step"] >= 10, (at_stop, summary, resumes)
    assert load_checkpoint(run, resumes[0]["step"]) == resumes[0]["step"]
    # the report has the hang (the collect step fetched its summary) and the recovery after it,
    # on the nodes of the second start, without the stopped one
    report = open(os.path.join(RUNS, run, "report.md")).read()
    hangs = report.split("## Hangs\n", 1)[1].split("\n## ", 1)[0]
    assert "- Job %s, start 1, at " % job_id in hangs and "  - %s: rank %d stopped (state T)" % (
        stopped_node, pids[pid]) in hangs, hangs
    assert re.search(r"\| 2 \| a hang in start 1 \(see Hangs\)(; stopped at step \d+ with a checkpoint)? \| %d \| "
                     r".*\(without %s\) \|"
                     % (resumes[0]["step"], re.escape(stopped_node)), report), report
    observe("hang", named_after_s=round(named_s), stopped_at_step=at_stop, hang_after_step=summary["step"],
            resumed_at=resumes[0]["step"], silent_s=summary["silent_s"])
    assert_every_step_once(run, 60)


def run_playbook_local_cluster(*args):
    from cluster import run_playbook
    run_playbook("local_cluster.yml", *args)


# 4. Rank crash ---------------------------------------------------------------------------

def test_rank_crash_ends_the_job_promptly_with_that_ranks_traceback(local_cluster):
    run = fresh("rank-crash")
    # two nodes of two ranks: the failed rank's node is not rank 0's, and the other ranks fail after it
    play = Playbook(run_vars(run, slurm_nodes=2, extra_env={"TRAINER_FAULT_CRASH": "3:12"}))
    wait_for(lambda: training_step(run) >= 12, 180, "training to reach step 12", play)
    crashed_at = time.monotonic()
    result = play.wait(300)
    observe("rank-crash", play_failed_after_s=round(time.monotonic() - crashed_at))
    assert time.monotonic() - crashed_at < 60  # not the 30-minute time limit
    assert result.rc != 0
    (job_id, state), = jobs(run)
    assert state == "FAILED"
    # rank 3 = node_rank 1 (2 ranks per node) = the job's second node
    assert "Rank 3 failed first (node %s); its traceback:" % job_nodes(job_id)[1] in result.output, \
        result.output[-6000:]
    traceback = result.output.split("its traceback:", 1)[1].split("First error lines", 1)[0]
    assert "Traceback (most recent call last):" in traceback and "trainer/train.py" in traceback
    assert "RuntimeError: fault injected by TRAINER_FAULT_CRASH=3:12 on rank 3" in traceback
    assert "Connection closed by peer" not in traceback  # the others' complaints are not the cause
    assert training_step(run) < 20 and checkpoints(run) == [10]


RESTART_HANG_TIMEOUT = 5


@pytest.mark.releases(on=1)
def test_a_crashed_rank_restarts_inside_the_job_on_the_same_nodes_and_the_run_finishes(local_cluster):
    """pretrain_restarts_in_job: 1; rank 3 raises after step 12, once (a transient fault). The hang watch
    runs with a timeout (5 s) shorter than the restart's quiet time (the other ranks wait for the failed
    one until their launcher stops them; the new ones import torch, meet and load the checkpoint): no hang."""
    run = fresh("restart-in-job")
    receiver = Receiver(SUBNET + ".1")  # run_notify's webhook: the restart is told as it happens
    try:
        # two nodes of two ranks: every launcher restarts its ranks, the failed rank's and the other's
        play = Playbook(run_vars(run, slurm_nodes=2, pretrain_restarts_in_job=1,
                                 pretrain_hang_timeout=RESTART_HANG_TIMEOUT, extra_env={"TRAINER_FAULT_CRASH": "3:12:first"},
                                 run_notify=[dict(url=receiver.url(), format="json")]))
        wait_for(lambda: training_step(run) >= 12, 180, "training to reach step 12", play)
        job_id = only_job(run)
        nodes = job_nodes(job_id)  # rank 3 = node_rank 1 (2 ranks per node) = nodes[1]
        crashed_at = time.monotonic()
        wait_for(lambda: events(run, "resume"), 120, "the ranks to restart", play)
        restarted_s = time.monotonic() - crashed_at
        result = play.wait(400)
    finally:
        receiver.close()
    assert result.rc == 0, result.output[-6000:]
    told = [body for _path, body, _at in receiver.posts]
    assert [(r["event"], r["start"]) for r in told] == [("start", 1), ("restart", 1), ("end", 1)], told
    assert (told[1]["restart"], told[1]["rank"], told[1]["node"], told[1]["step"]) == (1, 3, nodes[1], 10), told[1]
    # the same job, never requeued, on the same nodes
    assert jobs(run) == [(job_id, "COMPLETED")]
    assert "Restarts=0" in slurm("scontrol", "show", "job", job_id) and job_nodes(job_id) == nodes
    resume, = events(run, "resume")
    assert resume["restart_in_job"] == 1 and resume["step"] == 10 and load_checkpoint(run, 10) == 10
    assert "RuntimeError: fault injected by TRAINER_FAULT_CRASH=3:12 on rank 3" in job_logs(run)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    crashed = r"rank 3 on %s failed after step 12 \(RuntimeError: fault injected by TRAINER_FAULT_CRASH=3:12 on rank 3\)" \
        % re.escape(nodes[1])
    # steps 11 and 12 were recorded past the checkpoint: lost, and trained again
    assert re.search(r"\| 2 +\| %s: restart 1 inside the job, on the same nodes +\| 10 +\| step_000010\.pt \| 2 \| \d+ \| "
                     r"slurm\S+ \|" % crashed, report), report
    print("\n".join(re.findall(r".*job %s start \d+:.*" % job_id, result.output)))
    # the watch said it as it happened: which rank failed, the restart, where the ranks resumed
    assert re.search(r"job %s start 1: %s(, and \d+ more rank\(s\) after it)?; torch\.distributed\.run restarted every "
                     r"rank on the same nodes \(restart 1 in the job\); resumed at step 10 from step_000010\.pt"
                     % (job_id, crashed), result.output), result.output[-6000:]
    # no hang was called (none recorded, nothing requeued: Restarts=0 above); where the restart was
    # quieter than the timeout, the hang watch said why it waited
    assert not os.path.exists(os.path.join(WORKSPACE, run, "hangs")) and " hung " not in result.output
    rearmed = re.findall(r"llmtrain: hang: no progress for \d+ s, and torch\.distributed\.run restarted the ranks.*",
                         job_logs(run))
    observe("restart-in-job", restarted_after_s=round(restarted_s), resumed_at=resume["step"],
            hang_watch_waited_again=len(rearmed))
    assert_every_step_once(run, 60)


# 5. Rendezvous failure -------------------------------------------------------------------

def test_wrong_interface_fails_within_the_rendezvous_timeout_naming_the_interface(local_cluster):
    # lo exists on every node (so the probe's interface check passes), but it reaches no other node:
    # with a rank on each of two nodes, no rank reaches another
    run = fresh("rendezvous")
    play = Playbook(run_vars(run, nccl_env_socket_ifname="lo", pretrain_rendezvous_timeout=20, **TWO_RANKS))
    result = play.wait(300)
    assert result.rc != 0
    (job_id, state), = jobs(run)
    assert state == "FAILED"
    observe("rendezvous", job_runtime_s=job_runtime_s(job_id), rendezvous_timeout_s=20)
    # the timeout, plus start-up and teardown: 67 s in all once when the other test stream kept both
    # cores busy (the node check imports torch on each node); far from torch's own 15 to 30 minutes
    assert job_runtime_s(job_id) < 20 + 100
    assert re.search(r"train: error: rendezvous failed on rank \d+ \(" + NODE_RE, result.output), \
        result.output[-6000:]
    assert "GLOO_SOCKET_IFNAME=lo" in result.output and "nccl_env_socket_ifname" in result.output
    assert not step_records(run) and not checkpoints(run)


# 2. Time limit ---------------------------------------------------------------------------

def test_time_limit_checkpoints_requeues_and_stops_past_the_requeue_max(local_cluster):
    # A 2-minute limit and the warning signal 45 s before it (Slurm sends it up to 30 s early):
    # the notice comes 45-75 s into each start, which spends some of that starting. Slurm holds a
    # requeued job for cred_expire (10 s here).
    run = fresh("time-limit")
    # 300 steps of at least 0.5 s: more than two starts can train (at most 150 each), so both
    # starts the play allows (the first and one requeue) are stopped by the time limit. Two nodes,
    # a rank each: the limit and its notice are the job's, whatever its ranks.
    values = run_vars(run, steps=300, pause=0.5, interval=0, slurm_time_limit="00:02:00", pretrain_signal_lead=45,
                      run_requeue_max=1, **TWO_RANKS)
    first = run_playbook_now(values, timeout=500)
    assert first.rc != 0
    assert "run_requeue_max=1 requeues are used up" in first.output, first.output[-6000:]
    assert "requeue 1 of 1" in job_logs(run)
    # Each start is stopped by the notice: in training (a checkpoint), or, when a loaded
    # machine let the node and network checks run past the notice's moment, before training
    # (the checks record it and the job requeues itself, nothing to save). At least one start
    # trained.
    preempted = events(run, "preempted")
    before_training = job_logs(run).count("came during the checks, before training started")
    assert len(preempted) + before_training == 2 and len(preempted) >= 1, job_logs(run)[-6000:]
    assert all(p["signal"] == "SIGUSR2" for p in preempted)
    steps = [p["step"] for p in preempted]
    assert 0 < steps[0] < 300 and steps == sorted(set(steps))
    # a start resumes from the checkpoint of the start before it, if that one trained
    assert [r["step"] for r in events(run, "resume")] == steps[:-1], job_logs(run)[-6000:]
    assert checkpoints(run) == steps
    assert load_checkpoint(run, steps[-1]) == steps[-1]
    # The rerun, with more requeues allowed and no time limit, continues from the checkpoint
    # (unslowed: what is left to train proves nothing more).
    values.update(run_requeue_max=5, slurm_time_limit=None, nccl_env_extra={})
    second = run_playbook_now(values, timeout=600)
    assert second.rc == 0, second.output[-6000:]
    resumes = events(run, "resume")
    assert [r["step"] for r in resumes] == steps
    observe("time-limit", stops=len(preempted), stops_before_training=before_training,
            steps_lost=sum(p["step"] - r["step"] for p, r in zip(preempted, resumes)))
    assert checkpoints(run)[-1] == 300
    assert_every_step_once(run, 300)  # the signal lands on a step boundary: nothing is lost


# 6. SIGKILL during a checkpoint write ----------------------------------------------------

def test_sigkill_during_a_checkpoint_write_keeps_the_previous_checkpoint(local_cluster):
    run = fresh("kill-mid-write")
    ckpt_dir = os.path.join(WORKSPACE, run, "checkpoints")
    # every checkpoint write pauses 6 s after its first bytes, half written on disk; rank 0 writes it,
    # and the other node's rank, waiting for rank 0, loses its peer
    play = Playbook(run_vars(run, extra_env={"TRAINER_FAULT_CHECKPOINT_WRITE_PAUSE_S": "6"}, **TWO_RANKS))

    def writing_second():
        names = os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []
        partial = [n for n in names if n.startswith(".step_000020.pt.tmp-")]
        return partial and "step_000010.pt" in names and partial[0]

    partial = wait_for(writing_second, 240, "the second checkpoint's write", play)
    os.kill(int(partial.rsplit("-", 1)[1]), signal.SIGKILL)  # the writer's pid is in the temp name
    at_kill = training_step(run)
    result = play.wait(300)
    assert result.rc != 0
    assert "No rank left a traceback of its own" in result.output, result.output[-6000:]
    assert checkpoints(run) == [10] and load_checkpoint(run, 10) == 10
    again = run_playbook_now(run_vars(run, **TWO_RANKS))
    assert again.rc == 0, again.output[-6000:]
    resumed, = events(run, "resume")
    observe("sigkill-mid-write", killed_at_step=at_kill, resumed_at=resumed["step"], steps_lost=at_kill - resumed["step"])
    assert resumed["step"] == 10 and at_kill == 20  # steps lost: 11-20, trained again
    assert not [n for n in os.listdir(ckpt_dir) if ".tmp-" in n]  # the half-written file is gone
    assert checkpoints(run) == [10, 20, 30, 40, 50, 60]
    assert_every_step_once(run, 60)


# 7. Controller restart -------------------------------------------------------------------

def controller_pid():
    with open(os.path.join(CLUSTER_DIR, "run", "slurmctld.pid")) as handle:
        return int(handle.read().strip())


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] not in ("Z", "X")
    except (IOError, OSError):
        return False


def stop_controller():
    """Stop slurmctld (SIGTERM, as `systemctl stop slurmctld` does); its argv, to start it again."""
    pid = controller_pid()
    with open("/proc/%d/cmdline" % pid) as handle:
        argv = handle.read().split("\0")[:-1]
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not alive(pid), 60, "slurmctld to stop")
    return argv


def start_controller(argv):
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, timeout=60)  # it daemonizes itself
    env = slurm_env()
    wait_for(lambda: subprocess.run(["scontrol", "ping"], env=env, stdout=subprocess.PIPE,
                                    check=False).returncode == 0, 60, "slurmctld to answer")


def test_controller_restart_while_watching(local_cluster):
    run = fresh("ctld-restart")
    # two nodes, a rank each: the outages meet one job, whatever its ranks; 300 steps of about
    # 0.37 s (110 s) keep it training until the rerun watches it, also on a busy machine (at 75 s a
    # rerun that started slowly found the job completed)
    values = run_vars(run, steps=300, pause=0.35, pretrain_controller_timeout=8, **TWO_RANKS)
    play = Playbook(values)
    wait_for(lambda: training_step(run) >= 5, 180, "training to pass step 5", play)
    job_id = only_job(run)
    # an outage longer than pretrain_controller_timeout: the play stops watching, saying why
    argv = stop_controller()
    try:
        stopped = play.wait(120)
        assert stopped.rc != 0
        assert re.search(r"The Slurm controller has not answered for \d+ s .*Run this again \(the playbook "
                         r"re-attaches to its jobs\)", stopped.output), stopped.output[-4000:]
        at_stop = training_step(run)
        wait_for(lambda: training_step(run) > at_stop + 3, 60, "the job to go on training without the controller")
    finally:
        start_controller(argv)
    # the rerun re-attaches; a restart while it watches (shorter than the timeout) is ridden out
    values["pretrain_controller_timeout"] = 600
    again = Playbook(values)
    wait_for(lambda: "] job %s RUNNING" % job_id in again.output(), 120, "the rerun to watch", again)
    stop_controller()
    time.sleep(15)
    start_controller(argv)
    result = again.wait(600)
    assert result.rc == 0, result.output[-6000:]
    observe("controller-restart", training_jobs=len(jobs(run)), resumes=len(events(run, "resume")))
    assert [job for job, _state_now in jobs(run)] == [job_id]  # re-attached, never doubled
    assert not events(run, "resume") and checkpoints(run)[-1] == 300
    assert_every_step_once(run, 300)


# 8. Workspace unwritable / disk full -----------------------------------------------------

@pytest.fixture
def mounts():
    """Small tmpfs mounts (read-only or nearly full filesystems), unmounted afterwards."""
    made = []

    def mount(path, options):
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], check=True)
        made.append(path)
        return path

    yield mount
    for path in reversed(made):
        subprocess.run(["umount", "-l", path], check=False)
        shutil.rmtree(path, ignore_errors=True)


def test_unwritable_or_full_workspace_fails_before_any_job(local_cluster, mounts):
    before = job_ids()
    read_only = mounts("/var/tmp/llmtrain-rel-read-only-" + SESSION, "ro,size=1m")
    run = fresh("read-only")
    result = run_playbook_now(dict(run_vars(run), slurm_workspace=read_only), tags=None)
    assert result.rc != 0
    assert ("cannot create %s/%s on the login node: Read-only file system. Point slurm_workspace at a shared "
            "directory you can write." % (read_only, run)) in result.output, result.output[-4000:]
    # room for the run directory and what it ships to the nodes (about 0.3 MiB), not for the checkpoints
    full = mounts("/var/tmp/llmtrain-rel-full-" + SESSION, "size=1m")
    result = run_playbook_now(dict(run_vars(fresh("full")), slurm_workspace=full), tags=None)
    assert result.rc != 0
    assert re.search(r"slurm_workspace=%s has 0\.\d MiB free, and this run's checkpoints take about \d+\.\d MiB "
                     r"\(101 checkpoints of about 0\.\d MiB" % full, result.output), result.output[-4000:]
    assert job_ids() - before == set()  # nothing was submitted (preflight's probes never ran either)


def test_disk_full_mid_run_fails_loudly_and_keeps_the_previous_checkpoint(local_cluster, mounts):
    run = fresh("disk-full")
    ckpt_dir = os.path.join(WORKSPACE, run, "checkpoints")
    # room for two checkpoints of this model on two ranks, not three (about 315 kB each: the model, its
    # optimizer state and each rank's random state)
    mounts(ckpt_dir, "size=800k,mode=0755")
    result = run_playbook_now(run_vars(run, pause=0, **TWO_RANKS))
    assert result.rc != 0
    assert "Rank 0 failed first (node %s)" % job_nodes(only_job(run))[0] in result.output, result.output[-6000:]
    assert re.search(r"CheckpointError: could not write the checkpoint of step 30 in \S+ \(\w+: .*No space left on "
                     r"device.*\); nothing of it is left behind, and step_000020.pt is the newest complete one",
                     result.output), result.output[-6000:]
    assert checkpoints(run) == [10, 20] and load_checkpoint(run, 20) == 20
    assert not [n for n in os.listdir(ckpt_dir) if ".tmp-" in n]
    assert os.path.exists(os.path.join(RUNS, run, "report.md")) and job_logs(run)  # logs and report kept


# 10. Inputs: metacharacters, file modes, secrets -----------------------------------------

CANARY = "/tmp/llmtrain-rel-executed"
HOSTILE = "$(touch %s-1) `touch %s-2` ; touch %s-3 | & > < 'single' \"double\" * ? ~ #" % (CANARY, CANARY, CANARY)


def canaries():
    return [n for n in os.listdir("/tmp") if n.startswith(os.path.basename(CANARY))]


def test_metacharacters_are_literal_modes_are_sane_and_secrets_stay_secret(local_cluster, tmp_path):
    for name in canaries():
        os.unlink(os.path.join("/tmp", name))
    workspace = "/var/tmp/llmtrain-rel ws %s $(touch %s-ws) 'q' \"d\"" % (SESSION, CANARY)
    run = fresh("inputs")
    secret = "s3cret-%s-$(touch %s-secret)" % (SESSION, CANARY)
    prompts = ["def " + HOSTILE, "it's \"quoted\"\n\t$HOME %s" % HOSTILE]
    credential = tmp_path / "credential.json"
    credential.write_text("{}\n")
    credential.chmod(0o600)
    # shell tracing in the jobs (set -x) must not print the secrets as they are sourced
    values = run_vars(run, steps=20, pause=0, slurm_workspace=workspace, inference_prompts=prompts,
                      inference_max_new_tokens=20, slurm_secret_env={"LLMTRAIN_TEST_TOKEN": secret},
                      extra_env={"LLMTRAIN_TEST_VALUE": HOSTILE}, slurm_env_setup=["set -x"],
                      run_extra_files=[str(credential)], **TWO_RANKS)
    try:
        # the whole pipeline (preflight to inference), verbose and with diffs: where a secret could leak
        result = Playbook(values, tags=None, args=["-v", "--diff"]).wait(900)
        assert result.rc == 0, result.output[-6000:]
        run_dir = os.path.join(workspace, run)
        local = os.path.join(RUNS, run)
        assert checkpoints_in(run_dir)[-1] == 20
        # prompts reach the model literally
        samples = open(os.path.join(local, "samples.txt")).read()
        for prompt in prompts:
            assert prompt in samples
        # env values are exported literally (the job's shell sources these files)
        # no node has host vars of its own: every node sources cluster.env
        env_file = os.path.join(run_dir, "env", "cluster.env")
        assert sourced(env_file, "LLMTRAIN_TEST_VALUE") == HOSTILE
        secrets = os.path.join(run_dir, "env", "secrets.env")
        assert sourced(secrets, "LLMTRAIN_TEST_TOKEN") == secret
        assert "secrets.env" in open(os.path.join(run_dir, "scripts", "pretrain.sbatch")).read()
        assert canaries() == []  # nothing in any value was run
        # modes: scripts 0755, env files 0644, the secrets 0600, nothing world-writable
        assert mode(os.path.join(run_dir, "scripts", "pretrain.sbatch")) == 0o755
        assert mode(env_file) == 0o644 and mode(secrets) == 0o600
        assert mode(os.path.join(run_dir, "env")) == 0o700
        assert mode(os.path.join(run_dir, "scripts", "credential.json")) == 0o600  # its own mode, kept
        assert any("+ " in open(log).read() for log in glob.glob(os.path.join(run_dir, "logs", "*generate*")))
        for top in (run_dir, local):
            for base, dirs, files in os.walk(top):
                for name in dirs + files:
                    path = os.path.join(base, name)
                    assert not os.path.islink(path) and not mode(path) & 0o002, path
        # the secret is nowhere but in its file: not the play's output, the job script and log,
        # Slurm's job record, the run's facts or report
        assert secret not in result.output and "s3cret-" + SESSION not in result.output
        job_id = only_job(run)
        assert "s3cret-" not in slurm("scontrol", "show", "job", job_id)
        for top in (run_dir, local):
            for base, _dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(base, name)
                    if path != secrets:
                        with open(path, "rb") as handle:
                            assert b"s3cret-" not in handle.read(), path
    finally:
        # the path's "$(touch /tmp/...)" makes directories below /var/tmp/llmtrain-rel ws ...: remove from the top
        shutil.rmtree("/".join(workspace.split("/")[:4]), ignore_errors=True)


def test_a_run_name_with_metacharacters_is_refused_before_anything_runs(local_cluster):
    run = "x; touch %s-run-name" % CANARY
    result = run_playbook_now(dict(run_vars("unused"), run_name=run), tags=None)
    assert result.rc != 0
    assert "run_name=%r must be 1-64 letters, digits, . _ - starting with a letter or digit" % run \
        in result.output.replace("\\\\", "\\").replace('\\"', '"')
    assert canaries() == [] and not os.path.exists(os.path.join(WORKSPACE, run))


def checkpoints_in(run_dir):
    names = os.listdir(os.path.join(run_dir, "checkpoints"))
    return sorted(int(m.group(1)) for m in map(re.compile(r"^step_(\d+)\.pt$").match, names) if m)


def sourced(path, name):
    """The value a POSIX shell exports for name after sourcing path, as the job's step does."""
    out = subprocess.run(["sh", "-c", '. "$1" && printenv "$2"', "sh", path, name], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    return out[:-1]


def mode(path):
    return os.stat(path).st_mode & 0o777
