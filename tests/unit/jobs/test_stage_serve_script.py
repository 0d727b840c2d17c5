"""The serving job's script (jobs/serve.py), run by bash with a stand-in for slurm_python that records
what it is given: after the node check and the secrets, one line runs the job's Python
(llmtrain_node.serve_job, tests/unit/plugins/module_utils/test_serve_job.py), every value one word, and
no line names the key, so that tracing (set -x in slurm_env_setup) prints none."""

import json
import os
import shlex
import subprocess

import pytest

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.serve import Serve

KEY = "sk-secret value"

# slurm_python's stand-in: each call a JSON line (its argv, the key it got in its environment, its working
# directory) in $CALLS
FAKE_PYTHON = r"""#!/usr/bin/env python3
import json, os, sys
with open(os.environ["CALLS"], "a") as handle:
    handle.write(json.dumps({"argv": sys.argv[1:], "key": os.environ.get("LLMTRAIN_SERVE_API_KEY"),
                             "cwd": os.getcwd()}) + "\n")
"""


def serve_script(tmp_path, values, model_dir="/models/export/step_000010"):
    """The serving job's script (jobs/serve.py) for these variables over the roles' defaults."""
    variables = dict(golden.defaults(), slurm_nodes=1, slurm_gpus_per_node=0, slurm_procs_per_node=1, run_name="tiny",
                     slurm_workspace=str(tmp_path / "llm work"), slurm_python=str(tmp_path / "python"))
    variables.update(values)
    tmp_path.mkdir(parents=True)
    return tmp_path, Serve(variables, {"model_dir": model_dir}).script()


def run_job(rendered, key):
    """The script run as the job would run it, on stand-ins: the commands it ran, and its output."""
    tmp_path, script = rendered
    run_dir = tmp_path / "llm work" / "tiny"
    for name in ("scripts", "env", "serve"):
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    (run_dir / "scripts" / "node_check.sh").write_text("exit 0\n")
    secrets = run_dir / "env" / "secrets.env"
    if key:
        secrets.write_text("export LLMTRAIN_SERVE_API_KEY=%s\n" % shlex.quote(key))
    elif secrets.exists():
        secrets.unlink()
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls.jsonl"
    if calls.exists():
        calls.unlink()
    env = dict(os.environ, CALLS=str(calls), SLURM_JOB_ID="7", SLURMD_NODENAME="n1")
    env.pop("LLMTRAIN_SERVE_API_KEY", None)
    proc = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=60, check=False)
    return [json.loads(line) for line in calls.read_text().splitlines()], proc


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    return dict(cpu=serve_script(work / "cpu", dict(slurm_env_setup=["set -x"])),
                gpus=serve_script(work / "gpus", dict(slurm_gpus_per_node=4, inference_serve_gpus=2, inference_serve_port=8000,
                                                      inference_serve_args=["--max-model-len", "4096", "$(touch x)"]),
                                  model_dir="/models/best\ntouch INJECTED\n#"))


def test_the_job_runs_its_python_with_every_value_one_word_and_the_key_in_its_environment(scripts):
    tmp_path = scripts["gpus"][0]
    calls, proc = run_job(scripts["gpus"], key=KEY)
    run = tmp_path / "llm work" / "tiny"
    assert proc.returncode == 0 and calls == [dict(argv=[
        "-m", "llmtrain_node.serve_job", "--serve-dir", str(run / "serve"),
        "--model-dir", "/models/best\ntouch INJECTED\n#", "--model", "tiny", "--endpoint-file", str(run / "serve" / "endpoint.json"),
        "--port", "8000", "--gpus", "2", "--key-env", "LLMTRAIN_SERVE_API_KEY", "--", "--max-model-len", "4096", "$(touch x)"],
        key=KEY, cwd=str(run / "scripts"))], proc.stdout
    # a value with a newline or a command in it stays a value: nothing of it ran
    assert not any(path.name in ("x", "INJECTED") for path in tmp_path.rglob("*"))
    assert KEY not in scripts["gpus"][1]


def test_with_tracing_on_no_line_of_the_log_holds_the_key(scripts):
    calls, proc = run_job(scripts["cpu"], key=KEY)
    assert calls[0]["key"] == KEY and calls[0]["argv"][:2] == ["-m", "llmtrain_node.serve_job"]
    assert "+ cd " in proc.stdout and "+ exec " in proc.stdout  # tracing was on
    assert KEY not in proc.stdout, proc.stdout


def test_the_node_check_asks_for_the_gpus_the_job_has(scripts):
    assert "node_check.sh' --gpus 0 --require-torch" in scripts["cpu"][1]
    assert "node_check.sh' --gpus 2 --require-torch" in scripts["gpus"][1]
    assert subprocess.run(["bash", "-n"], input=scripts["gpus"][1].encode(), check=False).returncode == 0
