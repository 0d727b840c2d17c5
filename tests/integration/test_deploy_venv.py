"""deploy_venv_create on the local cluster: preflight makes the venv that slurm_python names
in a Slurm job (python -m venv + pip on a node), the node probe then checks torch in it on
every node; a rerun with the same inputs submits nothing; other inputs make it again.

pip on the nodes has no network here (each node lives in its own network namespace), so
the test gives it a wheelhouse downloaded on the host, the way an offline site would."""

import glob
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

from cluster import BIN, run_playbook, slurm

WORKSPACE = "/var/tmp/llmtrain-workspace"
VENV = os.path.join(WORKSPACE, "venv-test")
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
    values = dict(deploy_venv_create=True, slurm_python=os.path.join(VENV, "bin", "python"),
                  deploy_venv_base_python=os.path.join(sys.base_prefix, "bin", "python3"),
                  deploy_venv_packages=["torch==%s" % metadata.version("torch"), "numpy"],
                  deploy_venv_pip_args=["--no-index", "--find-links", wheelhouse])
    values.update(changes)
    return ["-e", json.dumps(values)]


@pytest.fixture(scope="module")
def made(local_cluster, wheelhouse):
    shutil.rmtree(VENV, ignore_errors=True)
    before = venv_logs()
    result = run_playbook("preflight.yml", *venv_vars(wheelhouse))
    yield result, venv_logs() - before
    shutil.rmtree(VENV, ignore_errors=True)


def test_preflight_makes_the_venv_in_one_job_and_probes_it(made):
    result, logs = made
    assert len(logs) == 1, (logs, result.output[-3000:])
    log = open(logs.pop()).read()
    assert "llmtrain: venv ready: Python 3." in log and "torch %s" % metadata.version("torch") in log, log
    # the probe ran slurm_python (the new venv) on every node and found torch there
    assert result.output.count("/%s" % metadata.version("torch")) >= 3, result.output[-3000:]
    out = slurm("srun", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", os.path.join(VENV, "bin", "python"),
                "-c", "import socket, torch; print(socket.gethostname(), torch.__version__)")
    assert sorted(line.split()[0] for line in out.splitlines()) == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
    recorded = json.load(open(os.path.join(VENV, ".llmtrain-venv.json")))
    assert recorded["packages"][0] == "torch==%s" % metadata.version("torch")


def test_same_inputs_submit_nothing_and_other_inputs_would_remake_it(made, wheelhouse):
    before = venv_logs()
    again = run_playbook("preflight.yml", *venv_vars(wheelhouse))
    assert again.changed == 0, again.output[-3000:]
    changed = run_playbook("preflight.yml", "--check", *venv_vars(wheelhouse, deploy_venv_packages=["torch", "numpy"]))
    assert "Make the venv in a Slurm job" in changed.output and changed.changed >= 1, changed.output[-3000:]
    assert venv_logs() == before  # neither run submitted a venv job


def test_a_venv_pip_cannot_fill_fails_with_the_job_log(local_cluster, wheelhouse, tmp_path):
    target = str(tmp_path / "broken")
    result = run_playbook("deploy.yml", *venv_vars(wheelhouse, slurm_python=os.path.join(target, "bin", "python"),
                                                   deploy_venv_packages=["torch", "no-such-package-llmtrain"]),
                          check=False)
    assert result.rc != 0
    assert "no-such-package-llmtrain" in result.output, result.output[-3000:]
    assert not os.path.exists(os.path.join(target, ".llmtrain-venv.json"))  # not recorded as made
