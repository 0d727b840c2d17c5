"""A PyTorch Lightning script (pytorch-lightning 2.6.6 from PyPI, pinned, in a directory of its own
as the Hugging Face test installs transformers) through the pipeline on the local cluster, 3 nodes
x 2 ranks, with a minimal inventory: the total its records cannot say comes from its own --max_steps
argument. It prints no progress line, so the watch reads Lightning's default logger, its TensorBoard
event file in lightning_logs/version_<job>/, and shows the step of the total, the loss and an ETA
while it runs; the report plots the steps from that file, says where they came from, and lists its
checkpoints with their steps; the job's hang watch takes its loss records as progress."""

import json
import os
import re
import shutil

import pytest

from cluster import ROOT, RUNS, WORKSPACE, pinned_packages, run_playbook

FILES = os.path.join(ROOT, "tests", "integration", "files", "lightning")


@pytest.fixture(scope="module")
def lightning_dir():
    """pytorch-lightning and what it imports, pinned (requirements.txt), kept in tests/output."""
    return pinned_packages("pl-2.6.6", os.path.join(FILES, "requirements.txt"))


def test_a_lightning_script_shows_its_steps_and_loss_from_its_event_file_and_its_report_plots_them(
        local_cluster, lightning_dir, tmp_path):
    run = "lightning"
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    source = tmp_path / "pl"
    source.mkdir()
    shutil.copy(os.path.join(FILES, "train.py"), str(source))
    # no pretrain_progress_total_steps: the total is the script's own flag
    settings = dict(run_name=run, run_source_dir=str(source), run_script="train.py",
                    pretrain_script_args=["--max_steps", "60"], pretrain_poll_interval=2,
                    slurm_env_setup=["export PYTHONPATH=%s" % lightning_dir])

    result = run_playbook("pretrain.yml", "-e", json.dumps(settings), umask=0o002)
    job = int(re.search(r"llmtrain-%s-(\d+)\.out" % run, " ".join(os.listdir(os.path.join(WORKSPACE, run, "logs"))))
              .group(1))
    log = open(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, job))).read()
    assert "`Trainer.fit` stopped: `max_steps=60` reached." in log, log[-3000:]
    # its log is silent while it trains: the job's hang watch armed at the event file's first loss record
    assert re.search(r"^llmtrain: hang: the first training record of this start came after \d+ s(: the hang watch is on"
                     r"|; the training step ended before the hang watch's next look)", log, flags=re.M), log[-3000:]
    # Lightning's default logger, versioned by the Slurm job
    events = os.path.join(WORKSPACE, run, "src", "lightning_logs", "version_%d" % job)
    assert any(name.startswith("events.out.tfevents.") for name in os.listdir(events))
    # the watch showed Lightning's steps (it counts from 0: 4, 9, ...) and loss while the job ran
    watched = [int(step) for step in re.findall(r"job %d RUNNING on [^:]+: step (\d+)/60, loss \d" % job,
                                                result.output)]
    assert watched and all(step % 5 == 4 for step in watched), result.output[-4000:]
    assert "(poll" in result.output
    # of the total --max_steps 60 set, with an ETA once two loss records gave the pace; never step N/?, nor
    # the line that says pretrain_progress_total_steps sets it
    assert re.search(r"job %d RUNNING on [^:]+: step \d+/60, loss [^,]+, ETA (\d+h\d\dm|\d+m\d\ds|\d+s) \(poll \d+\)"
                     % job, result.output), result.output[-4000:]
    assert not re.search(r"step \d+/\?", result.output) and "pretrain_progress_total_steps sets" not in result.output
    # the watch kept its place in the file (only its user can read or replace it): its last poll read up to the end
    state_file = os.path.join(WORKSPACE, run, "logs", ".event_files_read.json")
    assert os.stat(state_file).st_mode & 0o777 == 0o600
    state = json.load(open(state_file))
    read = state["read"][os.path.join(events, next(n for n in os.listdir(events) if n.startswith("events.out.")))]
    assert read["offset"] <= os.path.getsize(os.path.join(events, next(
        n for n in os.listdir(events) if n.startswith("events.out.")))) and read["bad"] == 0
    # metrics.jsonl from the event file: every logged step, in order; the report plots and names them
    metrics = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    assert [m["step"] for m in metrics] == list(range(4, 60, 5)), metrics
    assert all(m["source"] == "events" and m["total_steps"] == 60 and m["loss"] > 0 for m in metrics)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "![loss](loss.png)" in report and os.path.getsize(os.path.join(RUNS, run, "loss.png")) > 1000
    assert ("- Loss records from: your script's TensorBoard event files, tag train_loss, in "
            "events/src/lightning_logs/version_%d/events.out.tfevents." % job) in report, report
    assert "- Status: finished" in report and "- Steps: 59 of 60" in report, report
    assert "No loss records" not in report and "did not reach its first logged step" not in report
    assert re.search(r"epoch=0-step=20\.ckpt \(step 20\), epoch=0-step=40\.ckpt \(step 40\), "
                     r"epoch=0-step=60\.ckpt \(step 60\)", report), report
