"""The inference role's job scripts, rendered by the role's own variables through ansible-playbook:

- the serving job's (serve.sbatch.j2), run by bash with a stand-in for slurm_python that records what
  it is given: after the node check and the secrets, one line runs the job's Python
  (llmtrain_node.serve_job, tests/unit/plugins/module_utils/test_serve_job.py), every value one word,
  and no line names the key, so that tracing (set -x in slurm_env_setup) prints none;
- every script that names a checkpoint of your script, a directory or a script in a comment: a name
  with a line break (a directory entry anyone who writes the checkpoints directory can make) stays in
  its comment line."""

import json
import os
import shlex
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
KEY = "sk-secret value"

# slurm_python's stand-in: each call a JSON line (its argv, the key it got in its environment, its working
# directory) in $CALLS
FAKE_PYTHON = r"""#!/usr/bin/env python3
import json, os, sys
with open(os.environ["CALLS"], "a") as handle:
    handle.write(json.dumps({"argv": sys.argv[1:], "key": os.environ.get("LLMTRAIN_SERVE_API_KEY"),
                             "cwd": os.getcwd()}) + "\n")
"""


def render(tmp_path, values, model_dir="/models/export/step_000010", template="serve.sbatch.j2", **template_vars):
    """The job script the inference role renders for these variables."""
    values = dict(dict(slurm_nodes=1, slurm_gpus_per_node=0, slurm_procs_per_node=1, slurm_workspace=str(tmp_path / "llm work"),
                       slurm_python=str(tmp_path / "python"), run_name="tiny", ansible_python_interpreter=sys.executable),
                  **values)
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "vars": values, "tasks": [
        {"name": "Load the inference role's variables", "ansible.builtin.include_role": {
            "name": "llmtrain.slurm.inference", "tasks_from": "validate", "public": True}},
        {"name": "Render", "ansible.builtin.copy": {
            "content": "{{ lookup('ansible.builtin.template', '%s') }}" % os.path.join(
                ROOT, "roles", "inference", "templates", template),
            "dest": str(tmp_path / "serve.sbatch"), "mode": "0644"},
         "vars": dict(template_vars, _inference_serve_model_dir=model_dir)}]}]
    tmp_path.mkdir(parents=True)
    (tmp_path / "render.yml").write_text(yaml.safe_dump(play))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_HOME=str(tmp_path / "home"))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", str(tmp_path / "render.yml")],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()[-4000:]
    return tmp_path, (tmp_path / "serve.sbatch").read_text()


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
    return dict(cpu=render(work / "cpu", dict(slurm_env_setup=["set -x"])),
                gpus=render(work / "gpus", dict(slurm_gpus_per_node=4, inference_serve_gpus=2, inference_serve_port=8000,
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


INJECTED = "best\ntouch INJECTED\n#"


@pytest.mark.parametrize("template, template_vars", [
    ("export.sbatch.j2", dict(_inference_export_checkpoint=INJECTED, _inference_export_name=INJECTED,
                              _inference_export_dir="/w/checkpoints/" + INJECTED, _inference_evaluate=True)),
    ("generate_own.sbatch.j2", dict(_inference_checkpoints={"files": [{"path": "/w/checkpoints/" + INJECTED, "mtime": 1}]})),
])
def test_a_name_with_a_line_break_stays_in_its_comment(tmp_path, template, template_vars):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("train.py", "sample.py", "held out.txt"):
        (source / name).write_text("print()\n")
    values = dict(run_source_dir=str(source), run_script="train.py", inference_script="sample.py",
                  inference_eval_file=str(source / "held out.txt"))
    work, script = render(tmp_path / "work", values, template=template, **template_vars)
    assert "touch INJECTED" in script  # the name is there, escaped in its comment or quoted in a command
    # run as the job would be, with stand-ins for srun, the node check and slurm_python: no INJECTED file
    run_dir = work / "llm work" / "tiny"
    for name in ("scripts", "env", "export", "eval", "checkpoints"):
        (run_dir / name).mkdir(parents=True, exist_ok=True)
    (run_dir / "scripts" / "node_check.sh").write_text("exit 0\n")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for stub in (stubs / "srun", work / "python"):
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    proc = subprocess.run(["bash", "-c", script], cwd=str(run_dir), env=dict(os.environ, SLURM_JOB_ID="7", PATH="%s:%s" % (
        stubs, os.environ["PATH"])), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        timeout=60, check=False)
    assert not list(tmp_path.rglob("INJECTED")), proc.stdout
    assert "command not found" not in proc.stdout, proc.stdout
