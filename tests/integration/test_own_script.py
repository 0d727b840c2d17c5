"""Your own training script, from a directory of its own, on the local cluster: deployed
whole (version control, caches and what you exclude left out), run in the directory it was
deployed to on 3 nodes, its progress read from its plain log lines (watch, metrics, loss
plot), reported as yours, and a finished run is done. Preempted with SIGUSR2, a script that
follows the contract checkpoints, requeues and finishes; one that knows nothing of SIGUSR2 is
stopped by Slurm at its time limit, and the play says so."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from cluster import BIN, ROOT, RUNS, STREAM, WORKSPACE, BackgroundPlaybook, run_playbook, slurm, wait_for, writable_by_others
from wandb_records import wandb_history, wandb_test_env
SCRIPT = os.path.join(ROOT, "tests", "integration", "files", "own_script")


def newest_job(run, kind=""):
    """The id of the run's newest training (or kind="generate-": sampling) job that the
    controller still knows (it forgets finished ones after a while), or 0."""
    lines = slurm("squeue", "--noheader", "--states=all", "--format=%i|%j").splitlines()
    return max([int(i) for i, name in (line.split("|") for line in lines) if name == "llmtrain-" + kind + run] or [0])


def test_your_script_from_its_directory_trains_continues_after_a_redeploy_and_a_rerun_submits_nothing(
        local_cluster, tmp_path):
    """From a checkout and a login shell with umask 002, a script that keeps its checkpoint in its
    working directory, as nanoGPT's --out_dir=out does."""
    run = "own-script"
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    source = tmp_path / "nanolm"
    shutil.copytree(SCRIPT, str(source))
    for rel, body in ((".git/HEAD", "ref: refs/heads/main\n"), ("__pycache__/model.cpython-311.pyc", "stale"),
                      ("data/shard_000.bin", "x" * 4096), ("notes.txt", "dropped before the second deploy\n"),
                      (".env", "WANDB_API_KEY=s3cr3t\n")):
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(body)
    for base, dirs, files in os.walk(str(source)):  # as a checkout under umask 002 is
        for name in dirs:
            os.chmod(os.path.join(base, name), 0o775)
        for name in files:
            os.chmod(os.path.join(base, name), 0o664)
    settings = dict(
        run_name=run, run_source_dir=str(source), run_script="train.py",
        pretrain_script_args=["config/tiny.py", "--log_interval=5", "--out_dir=out"], run_source_exclude=["data/*"],
        # its lines as a pattern of your own ($, quotes and backslashes reach the job script intact)
        pretrain_progress_regex=[r"^iter (?P<step>\d+): loss (?P<loss>[\d.]+)(?:,|$)"])

    # the whole pipeline; without inference_script its stage says so and the play succeeds
    result = run_playbook("pretrain.yml", "-e", json.dumps(settings), umask=0o002)
    assert "inference_script is not set, so there is nothing to sample with" in result.output
    assert "Left out of the deployed source because they look like secrets" in result.output and ".env" in result.output
    deployed = os.path.join(WORKSPACE, run, "src")
    assert sorted(os.listdir(deployed)) == ["config", "configurator.py", "model.py", "notes.txt", "out", "sample.py",
                                            "train.py"]
    assert writable_by_others(os.path.join(WORKSPACE, run)) == []
    trained = newest_job(run)
    log = open(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, trained))).read()
    # its config file and flags were read from the directory it was deployed to; 3 nodes, 2 processes each
    assert "config tiny: world size 6, cwd %s" % deployed in log, log[-3000:]
    assert re.search(r"^iter 15: loss \d+\.\d+", log, flags=re.M), log[-3000:]
    # the job's hang watch started its clock at the first line your pattern matched
    assert re.search(r"^llmtrain: hang: the first training record of this start came after \d+ s(: the hang watch is on "
                     r"\(pretrain_hang_timeout auto\)|; the training step ended before the hang watch's next look)$",
                     log, flags=re.M), log[-3000:]
    assert checkpoint_iter(os.path.join(deployed, "out", "ckpt.pt")) == 20
    # the watch showed its progress from its log lines; the report plots them
    assert re.search(r"step 1[5-9]/\?, loss \d", result.output), result.output[-3000:]
    metrics = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    assert [m["step"] for m in metrics] == [0, 5, 10, 15] and all(m["source"] == "log" for m in metrics)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "![loss](loss.png)" in report and os.path.getsize(os.path.join(RUNS, run, "loss.png")) > 1000
    assert "## Model" not in report, report
    assert "- Script: %s/train.py" % deployed in report
    assert "- Arguments: config/tiny.py --log_interval=5 --out_dir=out" in report, report
    assert "- Source: %s (6 file(s), sha1 " % source in report
    assert "Your script left nothing in %s/checkpoints (LLMTRAIN_CHECKPOINT_DIR)" % os.path.join(WORKSPACE, run) \
        in report, report

    # what a job writes beside its code (prepared data, as nanoGPT's prepare.py does) is its own
    os.makedirs(os.path.join(deployed, "data"))
    with open(os.path.join(deployed, "data", "train.bin"), "w") as handle:
        handle.write("tokens")
    # more steps, a file gone from the source, and its sampling script (one node, its output the samples):
    # the redeploy removes only what an earlier deploy wrote, and the script resumes from out/ckpt.pt
    os.unlink(str(source / "notes.txt"))
    settings.update(pretrain_script_args=settings["pretrain_script_args"] + ["--max_iters=30"],
                    inference_script="sample.py", inference_script_args=["config/tiny.py", "--start=def ", "--out_dir=out"])
    run_playbook("pretrain.yml", "--skip-tags", "local_cluster,preflight", "-e", json.dumps(settings), umask=0o002)
    assert sorted(os.listdir(deployed)) == ["config", "configurator.py", "data", "model.py", "out", "sample.py",
                                            "train.py"]
    assert open(os.path.join(deployed, "data", "train.bin")).read() == "tokens"
    continued = newest_job(run)
    log = open(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, continued))).read()
    assert continued > trained and "resuming from out/ckpt.pt at iter 20" in log, log[-3000:]
    assert re.search(r"^iter 25: loss \d", log, flags=re.M), log[-3000:]
    assert checkpoint_iter(os.path.join(deployed, "out", "ckpt.pt")) == 30
    sampled = newest_job(run, "generate-")
    assert sampled > continued
    samples = open(os.path.join(RUNS, run, "samples.txt")).read()
    assert samples.startswith("def ") and len(samples) > len("def ") + 4, samples
    # in the report's fence, less the control characters a tiny model's bytes hold
    assert re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", "", samples.splitlines()[0]) \
        in open(os.path.join(RUNS, run, "report.md")).read()
    assert writable_by_others(os.path.join(WORKSPACE, run)) == []

    # a finished run is done: nothing submitted, nothing changed
    again = run_playbook("pretrain.yml", "-e", json.dumps(settings), umask=0o002)
    assert newest_job(run) == continued and newest_job(run, "generate-") == sampled
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0 ", again.output), again.output[-3000:]


# Run names of this session: jobs of an earlier session's runs may still be in the queue.
SESSION = "%05x%d" % (int(time.time()) % 0xFFFFF, STREAM)
SESSION_RUN = re.compile(r"^own-[a-z-]+-[0-9a-f]{5}%d$" % STREAM)


@pytest.fixture(scope="module", autouse=True)
def earlier_sessions_runs_removed(local_cluster):
    """The runs of earlier sessions whose jobs are gone: their names are new each session, so
    nothing else would ever remove them (this session's stay, for a look after a failure)."""
    queued = set(slurm("squeue", "--noheader", "--states=all", "--format=%j").split())
    for base in (WORKSPACE, RUNS):
        for name in os.listdir(base) if os.path.isdir(base) else []:
            if SESSION_RUN.match(name) and not name.endswith(SESSION) and "llmtrain-" + name not in queued:
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def own_run(name, tmp_path, *args, **settings):
    """A fresh run of the test script (nccl_env, deploy and pretrain stages, watched every 2 s)
    started in the background: (run name, the playbook)."""
    run = "own-%s-%s" % (name, SESSION)
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    source = tmp_path / "nanolm"
    shutil.copytree(SCRIPT, str(source))
    # (without the network check, which test_fabric.py tests: about 5 s less per job start)
    settings.update(run_name=run, run_source_dir=str(source), run_script="train.py",
                    pretrain_script_args=["config/tiny.py"] + list(args), pretrain_poll_interval=2,
                    pretrain_network_check=False)
    return run, BackgroundPlaybook(settings, tags="nccl_env,deploy,pretrain")


def job_log(run, job):
    path = os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, job))
    return open(path).read() if os.path.exists(path) else ""


def checkpoint_of(run):
    """The script's checkpoint in LLMTRAIN_CHECKPOINT_DIR, where its out_dir is by default."""
    return os.path.join(WORKSPACE, run, "checkpoints", "ckpt.pt")


def checkpoint_iter(path):
    """iter_num of the script's checkpoint, read with torch as the script reads it."""
    code = "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu')['iter_num'])"
    return int(subprocess.run([os.path.join(BIN, "python"), "-c", code, path], stdout=subprocess.PIPE,
                              universal_newlines=True, check=True, timeout=120).stdout)


@pytest.mark.releases(on=0)
def test_preempted_with_sigusr2_your_script_checkpoints_requeues_and_finishes(local_cluster, tmp_path):
    # its W&B logging (offline) as a public trainer does it, with the job's WANDB_* environment
    run, play = own_run("preempt", tmp_path, "--max_iters=80", "--iter_pause=0.2", "--log_interval=5", "--wandb_log=True",
                        run_wandb_project="llmtrain-tests", run_wandb_mode="offline",
                        nccl_env_extra=wandb_test_env(tmp_path))
    job = wait_for(lambda: newest_job(run), 300, "the training job", play)
    wait_for(lambda: "iter 10: loss" in job_log(run, job), 300, "the script to log iter 10", play)
    # to the batch shell alone, as a site's --signal=B:USR2@<lead> sends it (the other trainers' tests send
    # it to the steps): the job script passes it on to the training step
    slurm("scancel", "--batch", "--signal=USR2", str(job))
    signalled = time.monotonic()
    result = play.wait(600)
    assert result.rc == 0, result.output[-6000:]
    log = job_log(run, job)
    stopped = int(re.search(r"^stopped by SIGUSR2 at iter (\d+), checkpoint saved$", log, flags=re.M).group(1))
    assert 10 < stopped < 80, log[-3000:]
    assert "llmtrain: a stop notice (SIGUSR2) to the batch shell: passed on to the training step" in log, log[-3000:]
    print("own-script: preempt: stopped_at=%d, play_end_after_signal_s=%d" % (stopped, time.monotonic() - signalled))
    # the job requeued itself, ran the script again, which resumed where it stopped and finished
    assert "llmtrain: stopped with a checkpoint (SIGUSR2 at iter %d); requeue 1 of 3" % stopped in log, log[-3000:]
    assert "resuming from %s/checkpoints/ckpt.pt at iter %d" % (os.path.join(WORKSPACE, run), stopped) in log
    assert re.search(r"^iter 75: loss \d", log, flags=re.M) and checkpoint_iter(checkpoint_of(run)) == 80, log[-3000:]
    assert newest_job(run) == job and "Restarts=1 " in slurm("scontrol", "show", "job", str(job))
    # the marker was this start's only: the last start, which finished, did not requeue again
    assert log.count("requeue 1 of 3") == 1 and "requeue 2 of 3" not in log
    assert not os.path.exists(os.path.join(WORKSPACE, run, "PREEMPTED"))
    assert "ends with exit code 0" in log
    metrics = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    assert [m["step"] for m in metrics][-1] == 75 and {m["step"] for m in metrics} >= {5, stopped // 5 * 5 + 5}
    # both starts logged to one W&B run, whose records came to the controller for 'wandb sync'
    run_id = open(os.path.join(WORKSPACE, run, "wandb", "run_id")).read().strip()
    starts = sorted(os.listdir(os.path.join(RUNS, run, "wandb")))
    assert run_id.startswith(run + "-") and len(starts) == 2 and all(s.endswith("-" + run_id) for s in starts), starts
    history = wandb_history(os.path.join(RUNS, run))
    assert sorted(history) == list(range(0, 80, 5))
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "(LLMTRAIN_CHECKPOINT_DIR): ckpt.pt" in report, report
    assert all(abs(history[m["step"]]["loss"] - m["loss"]) <= 5e-5 for m in metrics)  # the log has 4 decimals


def test_a_script_that_ignores_sigusr2_is_stopped_at_its_time_limit_and_the_play_says_so(local_cluster, tmp_path):
    run, play = own_run("time-limit", tmp_path, "--max_iters=100000", "--iter_pause=0.2", "--log_interval=20",
                        "--ckpt_interval=20", "--stop_on_sigusr2=False",
                        # Slurm's limits are whole minutes; the notice comes 60 s in (up to 30 s earlier),
                        # mostly after the job's checks
                        slurm_time_limit="00:02:00", pretrain_signal_lead=60)
    result = play.wait(600)
    assert result.rc != 0
    job = newest_job(run)
    assert "Training job %d (llmtrain-%s) ended TIMEOUT" % (job, run) in result.output, result.output[-6000:]
    assert "Slurm stopped it at its time limit (00:02:00): it sent SIGUSR2" in result.output
    log = job_log(run, job)
    assert "stopped by SIGUSR2" not in log
    # A start whose notice came while the nodes checked themselves (both cores busy) requeued
    # itself before training, as it should (test_reliability.py); the start that trained did not
    requeues = re.findall(r"^llmtrain: (.*); requeue \d+ of \d+$", log, flags=re.M)
    assert all("came during the checks, before training started" in why for why in requeues), requeues
    # the signal did not end it: it trained past the moment the signal came, up to the limit;
    # what it checkpointed is kept
    last = max(int(i) for i in re.findall(r"^iter (\d+): loss", log, flags=re.M))
    print("own-script: time-limit: last_logged_iter=%d, checkpoint_iter=%d" % (last, checkpoint_iter(checkpoint_of(run))))
    assert last >= 100 and 0 < checkpoint_iter(checkpoint_of(run)) <= last + 20, log[-3000:]


# a control character, C0 (but tab and line feed), DEL, C1, or a bidirectional control
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_records_log_lines_and_an_exception_with_escape_sequences_reach_the_play_as_text(local_cluster):
    """Escape sequences in every field of a script's metrics records, in a node's name, in its log
    lines and in its exception: the watch's progress and straggler lines, the failure message with
    the traceback and the log's tail, and the report hold none, nor any other control character."""
    run = "escapes"
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    settings = dict(run_name=run, run_script=os.path.join(ROOT, "tests", "integration", "files", "escapes", "train.py"),
                    slurm_nodes=1, pretrain_poll_interval=2)
    result = run_playbook("pretrain.yml", "-e", json.dumps(settings), check=False)
    assert result.rc != 0
    found = CONTROL.search(result.output)
    assert found is None, repr(result.output[max(0, found.start() - 300):found.start() + 300])
    job = newest_job(run)
    # the watch's lines: progress from the records with numbers, the straggler by its name as text
    assert re.search(r"job %d RUNNING on \S+: step \d+/12, loss 3\.\d+, 1000 tokens/s" % job, result.output), \
        result.output[-6000:]
    assert "straggler: nodelinkexe. took 5.0x the median work per step" in result.output
    # the failure message: the rank's traceback and the log's last lines, as text
    assert "Training job %d (llmtrain-%s) ended FAILED" % (job, run) in result.output
    assert "RuntimeError: the data ran out linkexe." in result.output
    # what the play read held them: the job's log and the metrics file
    log = open(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, job))).read()
    assert "\x1b[32mstep 12\x1b[0m \x1b]52;c;" in log and "RuntimeError: the data ran out \x1b]52" in log
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "- Final train loss: 2.8000 (step 12)" in report and not CONTROL.search(report)
