"""The samples job (jobs/generate.py): its script for every inventory against the golden files (the
reference trainer's sampling, your inference_script's, and the job queued behind the training), what a
user checks of it (one node, one GPU, the checkpoints your script's job lists), and names and prompts
that hold a line break, which stay in their comment or their line and one quoted word when it runs."""

import json
import os
import subprocess

import pytest

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.generate import Generate

STAGE = "generate"
# your script's checkpoints when submitted, {name: mtime} as the play finds them
OWN_CHECKPOINTS = {"checkpoint-50": 1700000050.7, "checkpoint-100": 1700000100.2}
# the newest checkpoint of each case: the reference trainer's step_N.pt, or your script's checkpoints
FACTS = dict((case, {"checkpoints": OWN_CHECKPOINTS} if case == "own-script" else {"checkpoint": "step_000050.pt"})
             for case in golden.CASES)
# queued behind the training job (inference_after_training): no checkpoint yet, the newest once it completed
CHAINED = "ours-after-training"


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_generate_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Generate, case, FACTS[case])))


def test_the_training_jobs_samples_wait_behind_it_and_sample_its_newest_checkpoint_then():
    job = golden.job(Generate, "ours", {"training_job": "1234"})
    golden.check(STAGE, CHAINED, golden.kept(job))
    assert "# Samples from the newest checkpoint of run " in job.script()
    assert "# The checkpoints of training job 1234: queued behind it" in job.script()
    assert "--checkpoint '/shared/llm work/golden-ours/checkpoints/' " in job.script()
    assert job.module_args()["after_records"] == ["/shared/llm work/golden-ours/train.done.json"]
    # behind a training that fails or is stopped, Slurm cancels it rather than keep it pending for good
    assert job.options()["kill-on-invalid-dep"] == "yes"
    assert "kill-on-invalid-dep" not in golden.job(Generate, "ours", FACTS["ours"]).options()
    # a new training job samples again; the same one is the same job (a rerun re-attaches or finds it done)
    assert golden.job(Generate, "ours", {"training_job": "1235"}).script() != job.script()
    assert golden.job(Generate, "ours", {"training_job": "1234", "checkpoint": "step_000050.pt"}).script() == job.script()
    own = golden.job(Generate, "own-script", {"training_job": "7_3", "checkpoints": OWN_CHECKPOINTS})
    assert "checkpoint-50" not in own.script() and "training job 7_3" in own.script()


@pytest.mark.parametrize("job_id", ["12a", "-1", "1 2", "\u0662"])
def test_a_training_job_that_is_no_job_id_is_refused(job_id):
    with pytest.raises(ValueError, match="training_job=.* is no Slurm job id"):
        golden.job(Generate, "ours", {"training_job": job_id}).script()


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, list(golden.CASES) + [CHAINED])


def test_the_job_has_one_node_one_task_and_one_gpu_of_the_runs_type_and_what_the_site_requires():
    options = golden.job(Generate, "gpus", FACTS["gpus"]).options()
    assert options["gpus-per-node"] == "h100:1" and options["nodes"] == 1 and options["ntasks"] == 1
    assert options["cpus-per-task"] == 64
    assert "gres" not in golden.job(Generate, "ours", FACTS["ours"]).options()
    site = golden.job(Generate, "site-options", FACTS["site-options"]).module_args()
    assert dict((k, site["options"][k]) for k in ("account", "qos", "reservation", "constraint", "exclusive", "licenses")) == {
        "account": "proj-42", "qos": "high", "reservation": "maint_window", "constraint": "a100&ib", "exclusive": True,
        "licenses": "scratch:1"}
    assert site["exclude"] == ["n7"] and site["done_file"] == "/shared/llm work/golden-site-options/generate.done.json"
    assert site["bad_nodes_file"] == "/shared/llm work/golden-site-options/bad_nodes.json"
    assert "never in a script" not in site["content"]


def test_your_scripts_job_lists_the_checkpoints_by_name_so_that_a_new_one_samples_again():
    job = golden.job(Generate, "own-script", FACTS["own-script"])
    assert job.script().splitlines()[4:6] == ['#   "checkpoint-100" 1700000100', '#   "checkpoint-50" 1700000050']
    newer = golden.job(Generate, "own-script", {"checkpoints": dict(OWN_CHECKPOINTS, **{"checkpoint-150": 1700000150})})
    assert newer.script() != job.script()
    assert "trainer.generate" not in job.script()
    assert "'/shared/llm work/golden-own-script/scripts/sample.py' --n 2 \\" in job.script()


def test_a_fact_it_does_not_take_is_refused_naming_what_it_takes():
    with pytest.raises(ValueError, match="takes no fact model_dir .*takes: checkpoint, checkpoints, training_job"):
        Generate(golden.variables("ours"), {"checkpoint": "step_000050.pt", "model_dir": "/x"})


INJECTED = "checkpoint-5\ntouch INJECTED\n#"
# slurm_python's stand-in: its arguments, one JSON line a call, in $CALLS
FAKE_PYTHON = "#!/usr/bin/env python3\nimport json, os, sys\nopen(os.environ['CALLS'], 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"


def run(tmp_path, case, facts, **values):
    """The case's job script run by bash as the job would run, with stand-ins for the node check and
    slurm_python: what the stand-in was given, and the output."""
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    values = dict(golden.variables(case), slurm_workspace=str(tmp_path / "llm work"), slurm_python=str(python), **values)
    job = Generate(values, facts)
    run_dir = tmp_path / "llm work" / values["run_name"]
    for name in ("scripts/work dir", "env", "checkpoints"):
        (run_dir / name).mkdir(parents=True)
    (run_dir / "scripts" / "node_check.sh").write_text("exit 0\n")
    calls = tmp_path / "calls.jsonl"
    proc = subprocess.run(["bash", "-c", job.script()], cwd=str(tmp_path), env=dict(os.environ, SLURM_JOB_ID="7", CALLS=str(calls)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 0 and "command not found" not in proc.stdout, proc.stdout
    assert not list(tmp_path.rglob("INJECTED")), proc.stdout
    return job, [json.loads(line) for line in calls.read_text().splitlines()], run_dir


def test_a_checkpoint_name_with_a_line_break_stays_in_its_comment(tmp_path):
    job, calls, _proc = run(tmp_path, "own-script", {"checkpoints": {INJECTED: 1}})
    assert job.script().splitlines()[4] == '#   "checkpoint-5\\ntouch INJECTED\\n#" 1'
    assert calls[0][-2:] == ["--n", "2"]


def test_the_checkpoint_and_the_prompts_stay_one_word_and_one_line(tmp_path):
    prompts = ["def f():\nLLMTRAIN_PROMPTS\n", "$(touch INJECTED)"]
    job, calls, run_dir = run(tmp_path, "ours", {"checkpoint": INJECTED}, inference_prompts=prompts)
    assert calls[0][calls[0].index("--checkpoint") + 1] == str(run_dir / "checkpoints" / INJECTED)
    assert json.loads((run_dir / "prompts.json").read_text()) == prompts
