"""The golden job scripts of every stage: a stage's job made by its class (plugins/module_utils/jobs)
for a handful of inventories, as the sbatch module keeps it (scripts/<stage>.sbatch: the #SBATCH
lines of its options after the first line), against the files kept in tests/unit/golden/jobs/.
No ansible-playbook runs: each inventory is the roles' defaults with the case's variables.

    make goldens

writes them anew (then read the diff in review)."""

import glob
import os
import subprocess

import yaml

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import source_tree
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
GOLDEN = os.path.join(ROOT, "tests", "unit", "golden", "jobs")
# your own training and sampling scripts (the own-script case)
OWN = os.path.join(GOLDEN, "own")
# the README's required variables, as a user sets them
REQUIRED = dict(slurm_nodes=3, slurm_gpus_per_node=0, slurm_procs_per_node=2, slurm_workspace="/shared/llm work",
                slurm_python="/shared/venv/bin/python")
# the inventories every stage is rendered for
CASES = {
    "ours": dict(REQUIRED),
    "own-script": dict(REQUIRED, run_script=os.path.join(OWN, "train.py"), run_extra_files=[os.path.join(OWN, "sample.py")],
                       run_script_chdir="work dir", pretrain_script_args=["--lr", "3e-4"],
                       run_wandb_project="gpt", run_wandb_entity="team", pretrain_progress_tag="train/loss",
                       inference_script="sample.py", inference_script_args=["--n", "2"],
                       inference_eval_file=os.path.join(OWN, "held out.txt")),
    "container": dict(REQUIRED, slurm_container_runtime="charliecloud", slurm_container_image="/shared/img/torch",
                      slurm_container_mounts=["/data"], pretrain_hang_timeout=0, pretrain_network_check=False),
    "restarts-in-job": dict(REQUIRED, pretrain_restarts_in_job=2,
                            pretrain_progress_regex=["^step (?P<step>\\d+) loss (?P<loss>[0-9.]+)"],
                            pretrain_hang_timeout=600, run_requeue_max=1, slurm_master_port=29500),
    "site-options": dict(REQUIRED, slurm_account="proj-42", slurm_qos="high", slurm_reservation="maint_window",
                         slurm_constraint="a100&ib", slurm_exclusive=True, slurm_mail_type="END,FAIL",
                         slurm_mail_user="me@example.org", slurm_sbatch_options={"licenses": "scratch:1"},
                         slurm_env_setup=["module load cuda/12.4", "set -x"], slurm_exclude_nodes=["n7"],
                         slurm_secret_env={"HF_TOKEN": "never in a script"}),
    "gpus": dict(REQUIRED, slurm_gpus_per_node=8, slurm_procs_per_node=8, slurm_cpus_per_task=64, slurm_gpu_type="h100",
                 slurm_container_runtime="pyxis", slurm_container_image="nvcr.io#nvidia/pytorch:24.05-py3",
                 slurm_gpu_request="gpus-per-node", slurm_mem_per_cpu="4G"),
}
ROLES = ("slurm", "run", "nccl_env", "deploy", "pretrain", "inference")


def defaults():
    """The roles' defaults (defaults/main.yml), without the one that needs the controller's templating."""
    values = {}
    for role in ROLES:
        with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as handle:
            values.update(yaml.safe_load(handle) or {})
    return dict((name, value) for name, value in values.items()
                if not (isinstance(value, str) and "{{" in value))


def variables(case):
    """The resolved variables of an inventory: the defaults, the case's, the run name, and what is
    deployed of your code (run_source, as the run role's lookup reads it)."""
    values = dict(defaults(), run_name="golden-" + case, **CASES[case])
    paths = ([values["run_script"]] if values.get("run_script") else []) + list(values.get("run_extra_files") or [])
    values["run_source"] = source_tree.source(paths) if paths else None
    return values


def job(job_class, case, facts=None):
    """The job of a stage for an inventory, made from the variables the sbatch action resolves for it
    (base.RUN_VARIABLES and the class's own): one it reads but does not declare fails here."""
    values = variables(case)
    names = set(base.RUN_VARIABLES) | set(job_class.variables)
    return job_class(dict((name, value) for name, value in values.items() if name in names), facts)


def kept(job):
    """The job's script as the sbatch module keeps it (and as a user reads scripts/<stage>.sbatch)."""
    args = job.module_args()
    options = dict((name, value) for name, value in args["options"].items() if value is not None and value is not False)
    export = options.pop("export", None)
    env = args.get("env") or {}
    argv = sbatch_argv.option_argv(options) + (sbatch_argv.export_argv(export, env) if env or export is not None else [])
    return sbatch_argv.kept_script(args["content"], args["name"], args.get("chdir"), argv)


def check(stage, case, text):
    """Compare a rendered script with its golden file (LLMTRAIN_GOLDEN=write writes it)."""
    path = os.path.join(GOLDEN, stage, case + ".sbatch")
    if os.environ.get("LLMTRAIN_GOLDEN") == "write":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    with open(path) as handle:
        golden = handle.read()
    assert text == golden, ("the %s job script of case %s changed: if that is meant, write the golden files anew "
                            "(make goldens) and review their diff" % (stage, case))


def stale(stage, made):
    """Golden files of a stage that no case makes any more."""
    return sorted(set(os.path.basename(p)[:-len(".sbatch")] for p in glob.glob(os.path.join(GOLDEN, stage, "*.sbatch")))
                  - set(made))


def run_under_bash(tmp_path, script, run_dir, *dirs):
    """A job's script run by bash in run_dir as its job would run it, with stand-ins for the node check and
    srun (which writes its arguments, one a line, to tmp_path/args): (bash's output, srun's arguments)."""
    for name in ("scripts", "env") + dirs:
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    (run_dir / "scripts" / "node_check.sh").write_text("exit 0\n")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$ARGS_FILE\"\n")
    (stubs / "srun").chmod(0o755)
    args = tmp_path / "args"
    env = dict(os.environ, SLURM_JOB_ID="7", PATH="%s:%s" % (stubs, os.environ["PATH"]), ARGS_FILE=str(args))
    proc = subprocess.run(["bash", "-c", script], cwd=str(run_dir), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
    return proc.stdout, args.read_text() if args.exists() else ""
