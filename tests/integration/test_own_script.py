"""Your own training script, from a directory of its own, on the local cluster: deployed
whole (version control, caches and what you exclude left out), run in the directory it was
deployed to on 3 nodes, its progress read from its plain log lines (watch, metrics, loss
plot), reported as yours, and a finished run is done."""

import json
import os
import re
import shutil

from cluster import ROOT, run_playbook, slurm

WORKSPACE = "/var/tmp/llmtrain-workspace"
RUNS = os.path.join(ROOT, "runs")
SCRIPT = os.path.join(ROOT, "tests", "integration", "files", "own_script")


def newest_job(run, kind=""):
    """The id of the run's newest training (or kind="generate-": sampling) job that the
    controller still knows (it forgets finished ones after a while), or 0."""
    lines = slurm("squeue", "--noheader", "--states=all", "--format=%i|%j").splitlines()
    return max([int(i) for i, name in (line.split("|") for line in lines) if name == "llmtrain-" + kind + run] or [0])


def test_your_script_from_its_directory_trains_on_three_nodes_and_a_rerun_submits_nothing(local_cluster, tmp_path):
    run = "own-script"
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    source = tmp_path / "nanolm"
    shutil.copytree(SCRIPT, str(source))
    for rel, body in ((".git/HEAD", "ref: refs/heads/main\n"), ("__pycache__/model.cpython-311.pyc", "stale"),
                      ("data/shard_000.bin", "x" * 4096)):
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(body)
    settings = dict(
        pretrain_run_name=run, pretrain_source_dir=str(source), pretrain_script="train.py",
        pretrain_script_args=["config/tiny.py", "--log_interval=5"], pretrain_source_exclude=["data/*"])

    # the whole pipeline; without inference_script its stage says so and the play succeeds
    result = run_playbook("pretrain.yml", "-e", json.dumps(settings))
    assert "inference_script is not set, so there is nothing to sample with" in result.output
    deployed = os.path.join(WORKSPACE, run, "src")
    assert sorted(os.listdir(deployed)) == ["config", "configurator.py", "model.py", "sample.py", "train.py"]
    trained = newest_job(run)
    log = open(os.path.join(WORKSPACE, run, "logs", "llmtrain-%s-%d.out" % (run, trained))).read()
    # its config file and flags were read from the directory it was deployed to; 3 nodes, 2 processes each
    assert "config tiny: world size 6, cwd %s" % deployed in log, log[-3000:]
    assert re.search(r"^iter 15: loss \d+\.\d+", log, flags=re.M), log[-3000:]
    assert os.path.isfile(os.path.join(WORKSPACE, run, "checkpoints", "ckpt.pt"))  # LLMTRAIN_CHECKPOINT_DIR
    # the watch showed its progress from its log lines; the report plots them
    assert re.search(r"step 1[5-9]/\?, loss \d", result.output), result.output[-3000:]
    metrics = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    assert [m["step"] for m in metrics] == [0, 5, 10, 15] and all(m["source"] == "log" for m in metrics)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert "![loss](loss.png)" in report and os.path.getsize(os.path.join(RUNS, run, "loss.png")) > 1000
    assert "## Model" not in report, report
    assert "- Script: `%s/train.py`" % deployed in report and "- Arguments: `config/tiny.py` `--log_interval=5`" in report
    assert "- Source: `%s` (5 file(s), sha1 " % source in report
    assert "(LLMTRAIN_CHECKPOINT_DIR): `ckpt.pt`" in report

    # its sampling script, on one node: nothing is trained again, its output is the samples
    settings.update(inference_script="sample.py", inference_script_args=["config/tiny.py", "--start=def "])
    run_playbook("pretrain.yml", "-e", json.dumps(settings))
    sampled = newest_job(run, "generate-")
    assert newest_job(run) == trained and sampled > trained
    samples = open(os.path.join(RUNS, run, "samples.txt")).read()
    assert samples.startswith("def ") and len(samples) > len("def ") + 4, samples
    assert samples.splitlines()[0] in open(os.path.join(RUNS, run, "report.md")).read()

    # a finished run is done: nothing submitted, nothing changed
    again = run_playbook("pretrain.yml", "-e", json.dumps(settings))
    assert newest_job(run) == trained and newest_job(run, "generate-") == sampled
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0 ", again.output), again.output[-3000:]
