"""The venv job (jobs/venv.py): its script for every inventory, and one that lets the venv see the
base interpreter's packages with pip's own arguments, against the golden files; the packages it
installs; what a user checks of it (one job for every run, in the workspace, its options); and its
script run under bash with a stand-in for the base interpreter: it refuses a directory that is not
its own, and swaps a new venv in, named for its final place, with its record marked completed."""

import json
import os
import posixpath
import subprocess
import sys

import jinja2
import pytest
import yaml

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import exit_code
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.venv import Venv

STAGE = "venv"
ROLE = os.path.join(golden.ROOT, "roles", "deploy")
# the base interpreter's packages, pip's own arguments, and a BPE and W&B run whose packages name tokenizers
SITE_PACKAGES = dict(golden.REQUIRED, deploy_venv_system_site_packages=True, deploy_venv_pip_args=["--index-url", "https://pypi.example/simple x"],
                     deploy_venv_packages=["torch==2.3", "Tokenizers>=0.15"], deploy_tokenizer="bpe", run_wandb_project="gpt")


@pytest.fixture
def site_packages_case(monkeypatch):
    monkeypatch.setitem(golden.CASES, "site-packages", SITE_PACKAGES)
    return golden.job(Venv, "site-packages")


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_venv_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Venv, case)))


def test_the_venv_job_script_with_the_base_packages_and_pips_arguments_is_the_kept_one(site_packages_case):
    golden.check(STAGE, "site-packages", golden.kept(site_packages_case))


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, list(golden.CASES) + ["site-packages"])


def test_the_base_packages_are_seen_only_when_asked_for(site_packages_case):
    assert '-m venv --system-site-packages "${new}"' in site_packages_case.script()
    assert ' python3 -m venv "${new}"' in golden.job(Venv, "ours").script()


def test_it_adds_the_packages_the_run_needs(site_packages_case):
    assert golden.job(Venv, "ours").packages == ["torch", "numpy", "py-spy"]
    assert golden.job(Venv, "own-script").packages == ["torch", "numpy", "py-spy", "wandb"]
    values = dict(golden.variables("ours"), deploy_tokenizer="/shared/tok/tokenizer.json", deploy_venv_packages=["torch"])
    assert Venv(values).packages == ["torch", "tokenizers"]
    # named in deploy_venv_packages too: pip takes the two requirements together
    assert site_packages_case.packages == ["torch==2.3", "Tokenizers>=0.15", "tokenizers", "wandb"]
    assert "--index-url 'https://pypi.example/simple x' torch==2.3 'Tokenizers>=0.15' tokenizers wandb\n" in site_packages_case.script()


def test_it_is_one_job_for_every_run_in_the_workspace_recorded_in_the_venv():
    site = golden.job(Venv, "site-options").module_args()
    assert site["name"] == golden.job(Venv, "ours").name == "llmtrain-venv"
    assert site["chdir"] == "/shared/llm work" and site["done_file"] == "/shared/venv/.llmtrain-venv.json"
    assert "venv=/shared/venv\n" in site["content"]
    assert dict((k, site["options"][k]) for k in ("nodes", "ntasks", "cpus-per-task", "mem", "time", "output")) == {
        "nodes": 1, "ntasks": 1, "cpus-per-task": 1, "mem": "4G", "time": "01:00:00", "output": "logs/%x-%j.out"}
    assert dict((k, site["options"][k]) for k in ("account", "qos", "reservation", "constraint", "exclusive", "licenses")) == {
        "account": "proj-42", "qos": "high", "reservation": "maint_window", "constraint": "a100&ib", "exclusive": True,
        "licenses": "scratch:1"}
    assert golden.job(Venv, "gpus").options()["cpus-per-task"] == 64
    assert "never in a script" not in site["content"] and "exclude" not in site


def test_a_fact_is_refused():
    with pytest.raises(ValueError, match="the venv job takes no fact checkpoint .*takes: none"):
        Venv(golden.variables("ours"), {"checkpoint": "step_000050.pt"})


def test_the_role_checks_the_directory_the_job_makes_and_the_task_gives_nothing_the_job_sets():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    environment = jinja2.Environment()
    environment.filters["dirname"] = posixpath.dirname
    for python in ("/shared/venv/bin/python", "/shared/llm work/venvs/x/bin/python3"):
        job = Venv(dict(golden.variables("ours"), slurm_python=python))
        assert environment.from_string(role_vars["_deploy_venv_dir"]).render(slurm_python=python) == job.dir
    with open(os.path.join(ROLE, "tasks", "venv.yml")) as handle:
        task = [t for t in yaml.safe_load(handle) if t.get("llmtrain.slurm.sbatch", {}).get("stage") == STAGE]
    assert len(task) == 1
    assert not set(task[0]["llmtrain.slurm.sbatch"]) & set(golden.job(Venv, "ours").module_args())


# A stand-in for the base interpreter: `-m venv DIR` makes DIR/bin/python, which records pip's and the
# import check's arguments and runs the script's heredocs with this Python, and an activate file and
# pyvenv.cfg that name DIR, as venv's do.
BASE_PYTHON = """#!/bin/sh
[ "$1" = --version ] && { echo "Python 3"; exit 0; }
for dir; do :; done
mkdir -p "${dir}/bin"
printf '#!/bin/sh\\ncase "$1" in -m|-c) echo "$*" >> "%%s"; exit 0;; esac\\nexec %%s "$@"\\n' "${CALLS}" "%s" > "${dir}/bin/python"
chmod +x "${dir}/bin/python"
echo "VIRTUAL_ENV=${dir}" > "${dir}/bin/activate"
echo "command = python3 -m venv ${dir}" > "${dir}/pyvenv.cfg"
"""


def run_venv_job(tmp_path, **values):
    base_python = tmp_path / "base python"
    base_python.write_text(BASE_PYTHON % sys.executable)
    base_python.chmod(0o755)
    workspace = tmp_path / "llm work"
    workspace.mkdir(exist_ok=True)
    job = Venv(dict(golden.variables("ours"), slurm_workspace=str(workspace), deploy_venv_base_python=str(base_python),
                    slurm_python=str(workspace / "venv" / "bin" / "python"), **values))
    env = dict(os.environ, SLURM_JOB_ID="7", CALLS=str(tmp_path / "calls"))
    proc = subprocess.run(["bash", "-c", job.script()], cwd=str(workspace), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=60, check=False)
    return job, proc


def test_the_job_refuses_a_directory_it_did_not_make_and_changes_nothing(tmp_path):
    venv = tmp_path / "llm work" / "venv"
    venv.mkdir(parents=True)
    (venv / "mine.txt").write_text("kept")
    _calls, proc = run_venv_job(tmp_path)
    assert proc.returncode == exit_code("SETTING"), proc.stdout
    assert "holds files that are not a venv made by llmtrain.slurm" in proc.stdout
    assert sorted(os.listdir(str(venv))) == ["mine.txt"] and not (tmp_path / "calls").exists()


def test_the_job_swaps_in_a_venv_named_for_its_place_and_marks_its_record_completed(tmp_path):
    venv = tmp_path / "llm work" / "venv"
    venv.mkdir(parents=True)
    # the record the sbatch module wrote as it submitted this job (job 7), and a file of the venv before
    (venv / ".llmtrain-venv.json").write_text(json.dumps({"job_id": "7", "fingerprint": "abc", "state": "PENDING"}))
    (venv / ".llmtrain-venv").write_text("")
    (venv / "old file").write_text("")
    job, proc = run_venv_job(tmp_path, run_wandb_project="gpt")
    assert proc.returncode == 0, proc.stdout
    assert sorted(os.listdir(str(venv))) == [".llmtrain-venv", ".llmtrain-venv.json", "bin", "pyvenv.cfg"]
    assert sorted(os.listdir(str(venv.parent))) == ["venv"]
    assert (venv / "bin" / "activate").read_text() == "VIRTUAL_ENV=%s\n" % venv
    assert (venv / "pyvenv.cfg").read_text() == "command = python3 -m venv %s\n" % venv
    record = json.loads((venv / ".llmtrain-venv.json").read_text())
    assert record["state"] == "COMPLETED" and record["exit_code"] == "0:0" and record["end_time"]
    pip, check = (tmp_path / "calls").read_text().splitlines()
    assert pip == "-m pip install --disable-pip-version-check --no-input torch numpy py-spy wandb"
    assert check.startswith("-c import sys, torch")
    assert job.done_file == str(venv / ".llmtrain-venv.json")
