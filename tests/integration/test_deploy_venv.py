"""deploy_venv_create on the local cluster: the deploy stage makes the venv that slurm_python
names in a Slurm job (python -m venv + pip on a node, built beside its place and swapped in),
preflight's node probe then checks torch in it on every node; a rerun with the same inputs
submits nothing; other inputs make it again. A directory that holds anything but a venv made
here is never used: its files survive and nothing is submitted.

pip on the nodes has no network here (each node lives in its own network namespace), so
the test gives it a wheelhouse downloaded on the host, the way an offline site would."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

from cluster import BIN, NODES, WORKSPACE, run_playbook, slurm

VENV = os.path.join(WORKSPACE, "venvs", "venv-test")
LOGS = os.path.join(WORKSPACE, "logs")


def venv_logs():
    return set(glob.glob(os.path.join(LOGS, "llmtrain-venv-*.out")))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    wheels = str(tmp_path_factory.mktemp("wheelhouse"))
    subprocess.run([os.path.join(BIN, "python"), "-m", "pip", "download", "--quiet", "--dest", wheels,
                    "torch==%s" % metadata.version("torch"), "numpy"], check=True, timeout=900)
    return wheels


def venv_vars(wheelhouse, **changes):
    values = dict(deploy_venv_create=True, run_name="venv-test", deploy_prepare_dataset=False, slurm_python=os.path.join(VENV, "bin", "python"),
                  deploy_venv_base_python=os.path.join(sys.base_prefix, "bin", "python3"),
                  deploy_venv_packages=["torch==%s" % metadata.version("torch"), "numpy"],
                  deploy_venv_pip_args=["--no-index", "--find-links", wheelhouse])
    values.update(changes)
    return ["-e", json.dumps(values)]


@pytest.fixture(scope="module")
def made(local_cluster, wheelhouse):
    shutil.rmtree(VENV, ignore_errors=True)
    before = venv_logs()
    run_playbook("deploy.yml", *venv_vars(wheelhouse))
    logs = venv_logs() - before
    result = run_playbook("node_check.yml", *venv_vars(wheelhouse, deploy_venv_create=False))
    yield result, logs
    shutil.rmtree(VENV, ignore_errors=True)
    shutil.rmtree(os.path.join(WORKSPACE, "venv-test"), ignore_errors=True)


def test_deploy_makes_the_venv_in_one_job_and_the_node_check_finds_torch_in_it(made):
    result, logs = made
    assert len(logs) == 1, (logs, result.output[-3000:])
    log = open(logs.pop()).read()
    assert "llmtrain: venv ready: Python 3." in log and "torch %s" % metadata.version("torch") in log, log
    # the node check ran slurm_python (the new venv) on every idle node and found torch there
    assert result.output.count("/%s" % metadata.version("torch")) >= 3, result.output[-3000:]
    out = slurm("srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", os.path.join(VENV, "bin", "python"),
                "-c", "import socket, torch; print(socket.gethostname(), torch.__version__)")
    assert sorted(line.split()[0] for line in out.splitlines()) == NODES
    recorded = json.load(open(os.path.join(VENV, ".llmtrain-venv.json")))  # the job's record
    assert recorded["state"] == "COMPLETED" and log.count("llmtrain: making") == 1
    assert os.path.exists(os.path.join(VENV, ".llmtrain-venv"))  # the mark that lets a later job replace it
    # built beside its place, then moved: its scripts name the final directory
    assert re.match(r"#!%s/bin/python[0-9.]*$" % re.escape(VENV), open(os.path.join(VENV, "bin", "pip")).readline())
    assert not glob.glob(VENV + ".llmtrain-*")


def test_same_inputs_submit_nothing_and_other_inputs_would_remake_it(made, wheelhouse):
    before = venv_logs()
    again = run_playbook("deploy.yml", *venv_vars(wheelhouse))
    assert again.changed == 0, again.output[-3000:]
    changed = run_playbook("deploy.yml", "--check", *venv_vars(wheelhouse, deploy_venv_packages=["torch", "numpy"]))
    assert "Make the venv in a Slurm job" in changed.output and changed.changed >= 1, changed.output[-3000:]
    assert venv_logs() == before  # neither run submitted a venv job


def test_a_venv_pip_cannot_fill_fails_with_the_job_log(local_cluster, wheelhouse, tmp_path):
    target = str(tmp_path / "broken")
    result = run_playbook("deploy.yml", *venv_vars(wheelhouse, slurm_python=os.path.join(target, "bin", "python"),
                                                   deploy_venv_packages=["torch", "no-such-package-llmtrain"]),
                          check=False)
    assert result.rc != 0
    assert "no-such-package-llmtrain" in result.output, result.output[-3000:]
    assert not os.path.exists(target)  # nothing was put in its place


@pytest.mark.parametrize("python", ["{dir}/bin/python3", "python3"])
def test_a_directory_of_the_users_is_never_emptied(local_cluster, wheelhouse, tmp_path, python):
    """venv --clear once emptied the directory above slurm_python's bin/: /usr, the home, a conda
    installation, or (for a bare python3) the job's working directory, the workspace."""
    precious = tmp_path / "mine"
    (precious / "bin").mkdir(parents=True)
    (precious / "notes.txt").write_text("keep me\n")
    before = venv_logs()
    result = run_playbook("deploy.yml", *venv_vars(wheelhouse, slurm_python=python.format(dir=precious)), check=False)
    assert result.rc != 0
    if python == "python3":
        assert "slurm_python='python3' must be the venv's interpreter: an absolute path" in result.output, \
            result.output[-3000:]
    else:
        assert "holds files that are not a venv made by llmtrain.slurm (bin, notes.txt)" in result.output, \
            result.output[-3000:]
        assert "set deploy_venv_create=false" in result.output
    assert (precious / "notes.txt").read_text() == "keep me\n"
    assert venv_logs() == before  # refused before any job
