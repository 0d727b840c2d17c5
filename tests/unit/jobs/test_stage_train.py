"""The training job (jobs/train.py): its script for every inventory against the golden files, the
settings it gives llmtrain_node.job, what a user checks of its options and of what the watch is
given, and an argument of your script with a quote, a line break and a command substitution, which
reaches the training step as one word and runs nothing."""

import json
import os
import shlex
import subprocess

import pytest
import yaml

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import NAME_PREFIX, Train

STAGE = "train"


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_training_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Train, case)))


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, golden.CASES)


def job_config(script):
    """The JSON the script gives llmtrain_node.job, and the training step's command after it."""
    line = script[script.index(" -m llmtrain_node.job "):]
    words = shlex.split(line.replace("\\\n", " "), comments=False)
    return json.loads(words[2]), words[4:]


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_script_is_bash_and_gives_the_job_its_settings(case):
    job = golden.job(Train, case)
    script = job.script()
    assert subprocess.run(["bash", "-n"], input=script.encode(), check=False).returncode == 0
    config, step = job_config(script)
    assert config == job.job_config()
    assert config["run_dir"] == "/shared/llm work/golden-" + case
    assert step[0] == "srun" and "--kill-on-bad-exit=1" in step and "torch.distributed.run" in step[step.index("-c") + 1]
    assert all(isinstance(w, str) for check in config["checks"] for w in check)
    assert config["checks"][0][:2] == ["bash", "/shared/llm work/golden-%s/scripts/node_check.sh" % case]
    assert (len(config["checks"]) == 2) == (case != "container")  # the network check, unless turned off
    assert (config["hang"] is None) == (case == "container")  # pretrain_hang_timeout: 0
    assert (config["script_chdir"] is not None) == (config["wandb_run"] is not None) == (case == "own-script")
    assert config["requeue_max"] == (1 if case == "restarts-in-job" else 3)  # run_requeue_max
    assert config["done_file"] == job.module_args()["done_file"] == "/shared/llm work/golden-%s/train.done.json" % case


def test_the_job_is_named_as_the_status_and_stop_playbooks_look_for_it():
    with open(os.path.join(golden.ROOT, "roles", "pretrain", "vars", "main.yml")) as handle:
        assert yaml.safe_load(handle)["_pretrain_job_prefix"] == NAME_PREFIX
    args = golden.job(Train, "ours").module_args()
    assert args["name"] == "llmtrain-golden-ours"
    assert args["node_check_file"] == "/shared/llm work/golden-ours/node_check/llmtrain-golden-ours.json"


def test_the_options_ask_for_each_nodes_gpus_and_carry_what_the_site_requires():
    options = golden.job(Train, "gpus").options()
    assert options["gpus-per-node"] == "h100:8" and "gres" not in options
    # one task per node: torch.distributed.run starts the node's processes
    assert options["nodes"] == 3 and options["ntasks-per-node"] == 1 and options["cpus-per-task"] == 64
    assert options["mem-per-cpu"] == "4G" and options["signal"] == "USR2@300" and options["open-mode"] == "append"
    site = golden.job(Train, "site-options").module_args()
    assert dict((k, site["options"][k]) for k in ("account", "qos", "reservation", "constraint", "exclusive", "licenses")) == {
        "account": "proj-42", "qos": "high", "reservation": "maint_window", "constraint": "a100&ib", "exclusive": True,
        "licenses": "scratch:1"}
    assert site["exclude"] == ["n7"] and "never in a script" not in site["content"]
    assert "gres" not in golden.job(Train, "ours").options()  # CPU nodes: no GPUs asked for


def test_it_waits_for_the_data_and_the_venv_jobs():
    assert golden.job(Train, "ours").module_args()["after_records"] == [
        "/shared/llm work/golden-ours/data/prepare.done.json", "/shared/venv/.llmtrain-venv.json"]


def test_the_watch_reads_your_scripts_progress_and_leaves_out_what_is_not_set():
    ours = golden.job(Train, "ours").module_args()
    assert not ours["progress_from_log"] and ours["event_dirs"] == [] and ours["script_args"] == []
    assert not set(ours) & {"progress_tag", "total_steps", "checkpoint_dir"}
    values = dict(golden.variables("own-script"), pretrain_progress_total_steps=500)
    yours = Train(values).module_args()
    assert yours["progress_from_log"] and yours["script_args"] == ["--lr", "3e-4"]
    assert yours["event_dirs"] == ["/shared/llm work/golden-own-script/scripts/work dir", "/shared/llm work/golden-own-script"]
    assert yours["progress_tag"] == "train/loss" and yours["total_steps"] == 500
    assert yours["checkpoint_dir"] == "/shared/llm work/golden-own-script/checkpoints"


def test_the_reference_trainer_gets_the_model_shape_and_the_parallelism_it_is_not_given_by_default():
    argv = Train(dict(golden.variables("ours"), pretrain_parallel="fsdp", pretrain_extra_args=["--warmup", "2"])).training_argv
    assert argv[argv.index("--n-layer"):argv.index("--n-layer") + 2] == ["--n-layer", "4"]
    assert argv[-4:] == ["--parallel", "fsdp", "--warmup", "2"]
    assert "--parallel" not in golden.job(Train, "ours").training_argv


def test_a_fact_it_does_not_take_is_refused():
    with pytest.raises(ValueError, match="takes no fact checkpoint .*takes: none"):
        Train(golden.variables("ours"), {"checkpoint": "step_000050.pt"})


INJECTED = "it's\n$(touch INJECTED)"


def test_an_argument_with_a_quote_and_a_line_break_reaches_the_training_step_as_one_word(tmp_path):
    # slurm_python stands in for the job's Python: it writes the words it is given, one per file
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 0\nn=0\nfor w in "$@"; do printf %%s "$w" > "%s/arg.$n"; n=$((n+1)); done\n'
                      % tmp_path)
    python.chmod(0o755)
    values = dict(golden.variables("own-script"), slurm_workspace=str(tmp_path / "llm work"), slurm_python=str(python),
                  pretrain_script_args=["--name", INJECTED])
    job = Train(values)
    proc = subprocess.run(["bash", "-c", job.script()], cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout
    assert not list(tmp_path.rglob("INJECTED")), proc.stdout
    args = [(tmp_path / ("arg.%d" % n)).read_text() for n in range(len(list(tmp_path.glob("arg.*"))))]
    assert args[:2] == ["-m", "llmtrain_node.job"] and json.loads(args[2]) == job.job_config() and args[3] == "--"
    assert args[-3:] == [job.run.code_script, "--name", INJECTED]
