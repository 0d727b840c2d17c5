"""The front door on the local cluster: ansible-playbook playbooks/pretrain.yml from the
inventory to a checkpoint, a report and samples; a rerun changes nothing and submits
nothing, and a controller without the run's files gets them all back; --check submits
nothing; per-node settings give per-node env files; a failing job fails the play with its
log tail and leaves its logs in runs/, and Slurm cancels the samples job queued behind it."""

import json
import os
import re
import shutil
import struct

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cluster import INVENTORY, NODES, RUNS, WORKSPACE, job_ids, node, run_playbook, slurm, wait_for

RUN = "local-demo"


@pytest.fixture(scope="module")
def pipeline(local_cluster):
    shutil.rmtree(os.path.join(WORKSPACE, RUN), ignore_errors=True)
    shutil.rmtree(os.path.join(RUNS, RUN), ignore_errors=True)
    return run_playbook("pretrain.yml")


def test_pipeline_trains_reports_and_generates(pipeline):
    run_dir = os.path.join(WORKSPACE, RUN)
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "step_000800.pt"))
    local = os.path.join(RUNS, RUN)
    records = [json.loads(line) for line in open(os.path.join(local, "metrics.jsonl"))]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] - 1.5, (losses[0], losses[-1])  # it learned
    assert records[-1] == dict(records[-1], event="done", step=800)
    # every stage ended well: the record a rerun with the same inputs stops at
    assert json.load(open(os.path.join(run_dir, "pipeline.json")))["stages"]["train.done.json"]
    with open(os.path.join(local, "loss.png"), "rb") as handle:
        header = handle.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24])[0] > 100
    report = open(os.path.join(local, "report.md")).read()
    assert "![loss](loss.png)" in report and "Steps: 800 of 800" in report
    assert re.search(r"^- Slurm version: \d+\.\d+", report, flags=re.M), report
    check = report.split("## Node check", 1)[1].split("\n## ", 1)[0]
    rows = [line.split() for line in check.splitlines() if line.startswith(node(""))]
    # the training job's own check of the three nodes it got, before training
    assert [row[0] for row in rows] == NODES, check
    assert all(row[1] == "0/0/0/0/0" and row[-1] == "ok" for row in rows), check
    # the samples job was queued behind the training (submitted before the training ended) and is that job's
    train, sampled = (json.load(open(os.path.join(run_dir, name)))["job_id"] for name in ("train.done.json", "generate.done.json"))
    times = dict((job, dict(re.findall(r"\b(SubmitTime|StartTime|EndTime)=(\S+)", slurm("scontrol", "show", "job", job))))
                 for job in (train, sampled))
    assert times[sampled]["SubmitTime"] < times[train]["EndTime"] <= times[sampled]["StartTime"], times
    samples = open(os.path.join(local, "samples.txt")).read()
    completions = re.split(r"^=== prompt \d+: .*$", samples, flags=re.M)[1:]
    assert len(completions) == 3 and all(len(c.strip()) > 50 for c in completions)
    # it writes Python-ish text: in what the model wrote after each prompt (the file repeats the
    # prompts, "def " among them, in its headers and before each completion)
    prompts = [json.loads(p) for p in re.findall(r"^=== prompt \d+: (.*)$", samples, flags=re.M)]
    written = [c.lstrip("\n")[len(p):] for p, c in zip(prompts, completions)]
    assert all(c.lstrip("\n").startswith(p) for p, c in zip(prompts, completions)), samples
    assert any("self" in w or "def " in w for w in written), written
    assert any(name.endswith(".out") for name in os.listdir(os.path.join(local, "logs")))
    # the trainer's TensorBoard files came along; TensorBoard's own reader shows the same losses
    accumulator = EventAccumulator(os.path.join(local, "tensorboard"), purge_orphaned_data=True)
    accumulator.Reload()
    shown = {e.step: e.value for e in accumulator.Scalars("train/loss")}
    assert shown == pytest.approx({r["step"]: r["loss"] for r in records if "loss" in r}, rel=1e-6)


def test_the_kept_job_script_submitted_by_hand_asks_for_what_the_job_asked(pipeline):
    """scripts/pretrain.sbatch holds the job's options as #SBATCH lines: `sbatch FILE` (held here,
    then cancelled: it never runs) makes the same request, read back from Slurm."""
    run_dir = os.path.join(WORKSPACE, RUN)
    kept = os.path.join(run_dir, "scripts", "pretrain.sbatch")
    job_id = slurm("sbatch", "--hold", "--parsable", kept).strip().split(";")[0]
    try:
        fields = dict(re.findall(r"([\w/:]+)=(\S*)", slurm("scontrol", "show", "job", "-o", job_id)))
    finally:
        slurm("scancel", job_id)
    assert fields["JobName"] == "llmtrain-" + RUN and fields["WorkDir"] == run_dir
    assert fields["Partition"] == "debug" and fields["NumNodes"].split("-")[0] == "3"
    assert fields["TimeLimit"] == "00:30:00" and fields["Requeue"] == "1"
    assert fields["StdOut"] == os.path.join(run_dir, "logs", "llmtrain-%s-%s.out" % (RUN, job_id))
    assert fields["NumTasks"] == "3" and fields["CPUs/Task"] == "2" and fields["MinMemoryCPU"] == "256M"


def test_reruns_submit_nothing_a_controller_without_the_run_gets_it_all_then_nothing_changes(pipeline):
    """A rerun as from another checkout (no runs/<run>/ here; the run finished in the
    workspace), then a plain rerun."""
    local = os.path.join(RUNS, RUN)
    kept = {name: open(os.path.join(local, name), "rb").read()
            for name in ("report.md", "metrics.jsonl", "samples.txt", "facts.json")}
    logs = sorted(os.listdir(os.path.join(local, "logs")))
    shutil.rmtree(local)
    before = job_ids()
    restored = run_playbook("pretrain.yml")
    assert job_ids() - before == set()
    for name, content in kept.items():
        assert open(os.path.join(local, name), "rb").read() == content, name
    assert sorted(os.listdir(os.path.join(local, "logs"))) == logs
    with open(os.path.join(local, "loss.png"), "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    assert restored.changed > 0
    assert "no stage runs" not in restored.output  # this controller lacked the run: the stages ran
    again = run_playbook("pretrain.yml")
    assert again.changed == 0, again.output[-4000:]  # it has everything now
    assert job_ids() - before == set()  # (finished jobs may age out of the controller meanwhile)
    # the run's pipeline.json holds what it was made from: one step decides, no stage runs
    assert "Run %s finished with these inputs" % RUN in again.output and "no stage runs" in again.output, \
        again.output[-4000:]
    assert "Ask Slurm" not in again.output and "Submit the training job" not in again.output
    # a variable the stages read, set otherwise: they run (their jobs are the same: nothing is submitted)
    other = run_playbook("pretrain.yml", "-e", "pretrain_poll_interval=3")
    assert "no stage runs" not in other.output and "Submit the training job" in other.output, other.output[-4000:]
    assert job_ids() - before == set()


def test_check_mode_submits_nothing(pipeline):
    before = job_ids()
    checked = run_playbook("pretrain.yml", "--check", "-e", "run_name=check-mode-run")
    assert checked.rc == 0, checked.output[-4000:]
    assert job_ids() - before == set()
    assert not os.path.exists(os.path.join(WORKSPACE, "check-mode-run", "scripts", "pretrain.sbatch"))


def test_nodes_with_different_host_vars_get_different_env_files(pipeline, tmp_path):
    extra = tmp_path / "per_node.yml"
    extra.write_text("all:\n  children:\n    slurm_workers:\n      hosts:\n"
                     "        %s:\n          nccl_env_ib_hca: mlx5_1:1\n          nccl_env_debug: INFO\n" % node(1))
    run_playbook("nccl_env.yml", "-i", INVENTORY, "-i", str(extra),
                 "-e", "run_name=env-files-run")
    env_dir = os.path.join(WORKSPACE, "env-files-run", "env")
    one = open(os.path.join(env_dir, node(1) + ".env")).read()
    # a node whose host vars change nothing has no file of its own: it sources cluster.env
    assert sorted(os.listdir(env_dir)) == ["cluster.env", node(1) + ".env"]
    zero = open(os.path.join(env_dir, "cluster.env")).read()
    assert "export NCCL_IB_HCA=mlx5_1:1" in one and "export NCCL_DEBUG=INFO" in one
    assert "NCCL_IB_HCA" not in zero and "NCCL_DEBUG" not in zero
    for text in (one, zero):
        assert "export NCCL_SOCKET_IFNAME=eth0" in text and "export GLOO_SOCKET_IFNAME=eth0" in text
    assert oct(os.stat(os.path.join(env_dir, node(1) + ".env")).st_mode & 0o777) == "0o644"


def test_failing_job_fails_the_play_with_its_log_tail_and_keeps_its_logs(pipeline, tmp_path):
    name = "failing-run"
    shutil.rmtree(os.path.join(RUNS, name), ignore_errors=True)
    # a link planted where the metrics go leads out of the run: it is not copied to the controller
    private = tmp_path / "private.txt"
    private.write_text("not for the run report\n")
    shutil.rmtree(os.path.join(WORKSPACE, name), ignore_errors=True)
    os.makedirs(os.path.join(WORKSPACE, name))
    os.symlink(str(private), os.path.join(WORKSPACE, name, "metrics.jsonl"))
    failed = run_playbook("pretrain.yml", "--tags", "nccl_env,deploy,pretrain,inference", "-e", "run_name=" + name,
                          "-e", json.dumps({"pretrain_extra_args": ["--no-such-flag"]}), check=False)
    assert failed.rc != 0
    # the samples job was queued behind the training (its afterok can never be met now): Slurm cancels it
    samples = json.load(open(os.path.join(WORKSPACE, name, "generate.done.json")))["job_id"]
    shown = wait_for(lambda: re.search(r"JobState=CANCELLED Reason=DependencyNeverSatisfied",
                                       slurm("scontrol", "show", "job", samples)), 60, "the samples job cancelled")
    assert shown and "Samples job" not in failed.output
    assert re.search(r"Training job \d+ \(llmtrain-failing-run\) ended FAILED, exit code [1-9]", failed.output), \
        failed.output[-4000:]
    assert "--no-such-flag" in failed.output  # the trainer's own complaint, from the log tail
    logs = os.listdir(os.path.join(RUNS, name, "logs"))
    assert logs and all(f.startswith("llmtrain-failing-run-") for f in logs)
    assert os.path.exists(os.path.join(RUNS, name, "report.md"))
    assert "metrics.jsonl is not fetched: it leads to %s, outside the run directory" % private in failed.output
    assert not os.path.exists(os.path.join(RUNS, name, "metrics.jsonl"))
