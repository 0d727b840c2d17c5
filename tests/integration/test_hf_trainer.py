"""A real Hugging Face Trainer script (transformers 5.25.0 from PyPI, in a directory of its own;
a tiny GPT-2 from a config, a tokenizer trained offline; nothing fetched from a hub) through the
pipeline on the local cluster, two nodes: the watch shows its loss from its TensorBoard event file,
the report plots its records, the same steps as its trainer_state.json (with the val losses of its
evaluations) and lists its checkpoint-N/ directories with their
steps, its sampling script samples from the newest, a rerun submits nothing. Stopped by the
job's notice (SIGUSR2), the script's StopOnSignal callback (docs/own-script.md) saves, the job
requeues and the Trainer resumes."""

import glob
import json
import os
import re
import shutil

import pytest

from cluster import ROOT, RUNS, WORKSPACE, BackgroundPlaybook, pinned_packages, run_playbook, slurm, wait_for

FILES = os.path.join(ROOT, "tests", "integration", "files", "hf_trainer")
# the reference trainer's sources: a corpus of about 130 KB of Python
CORPUS = sorted(glob.glob(os.path.join(ROOT, "roles", "deploy", "files", "trainer", "*.py")))


@pytest.fixture(scope="module")
def transformers_dir():
    """transformers and what it imports, pinned (requirements.txt), kept in tests/output."""
    return pinned_packages("hf-transformers-5.25.0-serving", os.path.join(FILES, "requirements.txt"))


def newest_job(run, kind=""):
    lines = slurm("squeue", "--noheader", "--states=all", "--format=%i|%j").splitlines()
    return max([int(i) for i, name in (line.split("|") for line in lines) if name == "llmtrain-" + kind + run] or [0])


def settings_of(run, source, transformers_dir, tmp_path, steps):
    return dict(
        run_name=run, run_source_dir=str(source), run_script="train.py",
        pretrain_script_args=[str(steps)] + ["corpus/" + os.path.basename(path) for path in CORPUS],
        inference_script="sample.py", inference_script_args=["def ", "class "],
        slurm_nodes=2, slurm_procs_per_node=1, pretrain_network_check=False, pretrain_poll_interval=2,
        # transformers from its own directory; no hub, a cache of the test's own
        slurm_env_setup=["export PYTHONPATH=%s" % transformers_dir, "export HF_HUB_OFFLINE=1",
                         "export HF_HOME=%s" % (tmp_path / "hf-home")])


def test_a_hugging_face_trainer_script_trains_reports_its_steps_and_checkpoints_and_samples(
        local_cluster, transformers_dir, tmp_path):
    run = "hf-trainer"
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    source = tmp_path / "hf"
    shutil.copytree(FILES, str(source))
    os.makedirs(str(source / "corpus"))
    for path in CORPUS:
        shutil.copy(path, str(source / "corpus"))
    settings = settings_of(run, source, transformers_dir, tmp_path, 30)

    result = run_playbook("pretrain.yml", "-e", json.dumps(settings))
    trained = newest_job(run)
    log = open(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, trained))).read()
    assert "'loss': '" in log, log[-3000:]  # 5.x quotes its values
    # the watch showed its loss and step from its TensorBoard event file (report_to=["tensorboard"]), the
    # total from its trainer_state.json once a checkpoint holds one
    assert re.search(r"job \d+ \w+ on [^:]+: step \d+/(30|\?), loss \d", result.output), result.output[-3000:]
    # metrics.jsonl from its event file, in order: the steps and losses its trainer_state.json has,
    # each evaluation's loss with the record of its step
    metrics = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    state = json.load(open(os.path.join(WORKSPACE, run, "checkpoints", "checkpoint-30", "trainer_state.json")))
    logged = [e["loss"] for e in state["log_history"] if "loss" in e]
    evaluated = [e["eval_loss"] for e in state["log_history"] if "eval_loss" in e]
    assert [m["loss"] for m in metrics] == [pytest.approx(loss, rel=5e-4) for loss in logged], metrics
    assert [m["val_loss"] for m in metrics if "val_loss" in m] == [pytest.approx(v, rel=5e-4) for v in evaluated]
    assert [(m["step"], m["total_steps"]) for m in metrics] == [(e["step"], 30) for e in state["log_history"]
                                                                if "loss" in e] == [(s, 30) for s in range(5, 31, 5)]
    assert [m["step"] for m in metrics if "val_loss" in m] == [10, 20, 30]
    assert all(m["source"] == "events" for m in metrics)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "- Loss records from: your script's TensorBoard event files, tag train/loss, in events/checkpoints/runs/" \
        in report, report
    assert "![loss](loss.png)" in report and "- Status: finished" in report and "- Steps: 30 of 30" in report, report
    assert ("(LLMTRAIN_CHECKPOINT_DIR): checkpoint-10 (step 10), checkpoint-20 (step 20), checkpoint-30 (step 30)"
            in report), report
    others = re.search(r"Other entries there, not checkpoints: (.*)", report).group(1)
    assert "config.json" in others and "model.safetensors" in others
    # its output as it printed it: a sample of a model this small may hold line breaks of its own
    samples = open(os.path.join(RUNS, run, "samples.txt")).read()
    assert samples.startswith("checkpoint checkpoint-30\ndef ") and "\nclass " in samples, samples

    # a finished run is done
    again = run_playbook("pretrain.yml", "-e", json.dumps(settings))
    assert newest_job(run) == trained
    assert "no stage runs" in again.output, again.output[-3000:]

    # 80 steps: the Trainer resumes from checkpoint-30; the job's stop notice (SIGUSR2, as Slurm sends
    # it before the time limit or a preemption) comes after step 40: StopOnSignal saves checkpoint-N
    # of the step every rank stopped after, the job requeues itself, the Trainer resumes from it
    settings = settings_of(run, source, transformers_dir, tmp_path, 80)
    play = BackgroundPlaybook(settings, tags="deploy,pretrain")
    job = wait_for(lambda: newest_job(run) if newest_job(run) > trained else 0, 300, "the training job", play)
    path = os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, job))
    wait_for(lambda: os.path.exists(path) and open(path).read().count("{'loss': '") >= 2, 300, "step 40 logged", play)
    slurm("scancel", "--signal=USR2", str(job))
    result = play.wait(600)
    assert result.rc == 0, result.output[-6000:]
    # checkpoint-30 was there from the start: every line the watch read had its step
    watched = [int(step) for step in re.findall(r"job \d+ RUNNING on [^:]+: step (\d+)/80, loss \d", result.output)]
    assert watched and all(35 <= step <= 80 and step % 5 == 0 for step in watched), result.output[-6000:]
    assert not re.search(r"job \d+ RUNNING on [^:]+: loss \d", result.output), result.output[-6000:]
    log = open(path).read()
    stopped = int(re.search(r"llmtrain: stopped with a checkpoint \(step (\d+)\); requeue 1 of 3", log).group(1))
    assert 40 <= stopped < 80, log[-3000:]
    assert os.path.isdir(os.path.join(WORKSPACE, run, "checkpoints", "checkpoint-%d" % stopped))
    state = json.load(open(os.path.join(WORKSPACE, run, "checkpoints", "checkpoint-80", "trainer_state.json")))
    assert state["global_step"] == 80 and "ends with exit code 0" in log, log[-3000:]
    assert log.count("llmtrain: job %d start" % job) == 2 and "requeue 2 of 3" not in log
    assert not os.path.exists(os.path.join(WORKSPACE, run, "PREEMPTED"))
