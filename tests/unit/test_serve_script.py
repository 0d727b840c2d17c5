"""The serving job's script (roles/inference/templates/serve.sbatch.j2), rendered by the inference role's
own variables through ansible-playbook, then run by bash with a stand-in for slurm_python that records
each command it is given: where `import vllm` works the job runs `vllm serve` with the key in VLLM_API_KEY
only, else `transformers serve` on 127.0.0.1 and the gate on the node's address. vLLM cannot be installed
here (it needs a GPU), so this is what pins its command line."""

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

# slurm_python's stand-in: each call a JSON line (its argv, and whether VLLM_API_KEY is set) in $CALLS;
# `-c 'import vllm'` succeeds where $VLLM is 1; the gate's address and free ports are fixed
FAKE_PYTHON = r"""#!/usr/bin/env python3
import json, os, sys
with open(os.environ["CALLS"], "a") as handle:
    handle.write(json.dumps({"argv": sys.argv[1:], "vllm_key": os.environ.get("VLLM_API_KEY"),
                             "pythonpath": os.environ.get("PYTHONPATH", ""), "cwd": os.getcwd()}) + "\n")
if sys.argv[1:3] == ["-c", "import vllm"]:
    sys.exit(0 if os.environ.get("VLLM") == "1" else 1)
if sys.argv[1:4] == ["-m", "llmtrain_node.serve_gate", "address"]:
    print("10.9.0.5")
elif sys.argv[1:4] == ["-m", "llmtrain_node.serve_gate", "free-port"]:
    print("41000" if sys.argv[4] == "10.9.0.5" else "42000")
"""


def render(tmp_path, values):
    """The job script the inference role renders for these variables."""
    values = dict(dict(slurm_nodes=1, slurm_gpus_per_node=0, slurm_procs_per_node=1, slurm_workspace=str(tmp_path / "llm work"),
                       slurm_python=str(tmp_path / "python"), run_name="tiny", ansible_python_interpreter=sys.executable),
                  **values)
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "vars": values, "tasks": [
        {"name": "Load the inference role's variables", "ansible.builtin.include_role": {
            "name": "llmtrain.slurm.inference", "tasks_from": "validate", "public": True}},
        {"name": "Render", "ansible.builtin.copy": {
            "content": "{{ lookup('ansible.builtin.template', '%s') }}" % os.path.join(
                ROOT, "roles", "inference", "templates", "serve.sbatch.j2"),
            "dest": str(tmp_path / "serve.sbatch"), "mode": "0644"},
         "vars": {"_inference_serve_model_dir": "/models/export/step_000010"}}]}]
    tmp_path.mkdir(parents=True)
    (tmp_path / "render.yml").write_text(yaml.safe_dump(play))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_HOME=str(tmp_path / "home"))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", str(tmp_path / "render.yml")],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout.decode()[-4000:]
    return tmp_path, (tmp_path / "serve.sbatch").read_text()


def run_job(rendered, vllm, key):
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
    env = dict(os.environ, CALLS=str(calls), VLLM="1" if vllm else "0", SLURM_JOB_ID="7", SLURMD_NODENAME="n1")
    env.pop("LLMTRAIN_SERVE_API_KEY", None)
    proc = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=60, check=False)
    return [json.loads(line) for line in calls.read_text().splitlines()], proc


def started(calls, module):
    return next(call for call in calls if call["argv"][:2] == ["-m", module])


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    return dict(cpu=render(work / "cpu", {}),
                gpus=render(work / "gpus", dict(slurm_gpus_per_node=4, inference_serve_gpus=2, inference_serve_port=8000,
                                                inference_serve_args=["--max-model-len", "4096", "$(touch x)"])))


def test_without_vllm_transformers_serve_listens_on_loopback_and_the_gate_on_the_node(scripts):
    tmp_path = scripts["cpu"][0]
    calls, proc = run_job(scripts["cpu"], vllm=False, key=KEY)
    assert "llmtrain: the transformers server ended" in proc.stdout and proc.returncode == 1, proc.stdout
    server = started(calls, "transformers.cli.transformers")
    assert server["argv"] == ["-m", "transformers.cli.transformers", "serve", "tiny", "--host", "127.0.0.1",
                              "--port", "42000"]
    assert server["cwd"] == str(tmp_path / "llm work" / "tiny" / "serve")
    gate = [c for c in calls if c["argv"][:4] == ["-m", "llmtrain_node.serve_gate", "gate", "--port"]][0]
    assert gate["argv"][3:] == [
        "--port", "0", "--backend-port", "42000", "--backend", "transformers", "--address", "10.9.0.5",
        "--endpoint-file", str(tmp_path / "llm work" / "tiny" / "serve" / "endpoint.json"), "--job-id", "7",
        "--node", "n1", "--model", "tiny", "--key-env", "LLMTRAIN_SERVE_API_KEY"]
    assert gate["pythonpath"].split(os.pathsep)[0] == str(tmp_path / "llm work" / "tiny" / "scripts")
    assert not any(KEY in " ".join(c["argv"]) or c["vllm_key"] for c in calls)
    # the model goes by the run's name: a link to its directory where the server runs
    assert os.readlink(str(tmp_path / "llm work" / "tiny" / "serve" / "tiny")) == "/models/export/step_000010"


@pytest.mark.parametrize("key", [KEY, ""])
def test_with_vllm_it_runs_vllm_serve_on_the_node_address_with_the_key_in_its_environment_only(scripts, key):
    tmp_path = scripts["gpus"][0]
    calls, proc = run_job(scripts["gpus"], vllm=True, key=key)
    assert "llmtrain: the vllm server ended" in proc.stdout, proc.stdout
    server = started(calls, "vllm.entrypoints.cli.main")
    # the port given (inference_serve_port), the GPUs split the model, the extra arguments one word each
    assert server["argv"] == ["-m", "vllm.entrypoints.cli.main", "serve", "tiny", "--served-model-name", "tiny",
                              "--host", "10.9.0.5", "--port", "8000", "--tensor-parallel-size", "2",
                              "--max-model-len", "4096", "$(touch x)"]
    assert server["vllm_key"] == (key or None)
    assert not any(KEY in " ".join(c["argv"]) for c in calls)
    announce = [c for c in calls if c["argv"][2:3] == ["announce"]][0]
    assert announce["argv"][3:7] == ["--port", "8000", "--backend", "vllm"]
    assert not (tmp_path / "llm work" / "tiny" / "serve" / "x").exists() and not (tmp_path / "x").exists()


def test_the_cpu_job_picks_a_free_port_on_the_node_for_vllm(scripts):
    calls, _proc = run_job(scripts["cpu"], vllm=True, key="")
    assert started(calls, "vllm.entrypoints.cli.main")["argv"][7:10] == ["10.9.0.5", "--port", "41000"]
    assert "--tensor-parallel-size" not in started(calls, "vllm.entrypoints.cli.main")["argv"]


def test_the_node_check_asks_for_the_gpus_the_job_has(scripts):
    assert "node_check.sh' --gpus 0 --require-torch" in scripts["cpu"][1]
    assert "node_check.sh' --gpus 2 --require-torch" in scripts["gpus"][1]
    assert subprocess.run(["bash", "-n"], input=scripts["gpus"][1].encode(), check=False).returncode == 0
