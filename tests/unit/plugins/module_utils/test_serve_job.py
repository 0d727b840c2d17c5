"""The serving job on its node (llmtrain_node.serve_job) with real processes: stand-ins for vLLM and
transformers serve (small HTTP servers on the address and port they are given, the first checking
VLLM_API_KEY as vLLM does), the real gate in front of the second; the node's address is 127.0.0.1
here (on a node it is its name resolved, tests/integration runs that)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import exit_codes, serve_gate, serve_job

KEY = "sk-SECRET-KEY-42"

# The server both stand-ins run: what it was given goes to $STANDIN_RECORD; it fails at once where
# $STANDIN_FAIL is set, as a Python without torch would.
STANDIN = r'''
import http.server, json, os, sys
def serve(backend):
    args = sys.argv[1:]
    host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
    with open(os.environ["STANDIN_RECORD"], "w") as handle:
        json.dump({"backend": backend, "argv": args, "cwd": os.getcwd(), "env_keys": sorted(
            k for k in os.environ if "API_KEY" in k), "vllm_key": os.environ.get("VLLM_API_KEY")}, handle)
    if os.environ.get("STANDIN_FAIL"):
        sys.stderr.write("ModuleNotFoundError: No module named 'torch'\n")
        sys.exit(1)
    key = os.environ.get("VLLM_API_KEY") if backend == "vllm" else None
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def do_GET(self):
            ok = not key or self.headers.get("Authorization") == "Bearer " + key
            body = json.dumps({"data": [{"id": args[1]}]} if ok else {"error": "key"}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    http.server.HTTPServer((host, port), Handler).serve_forever()
'''


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """Stand-in vllm, transformers, fastapi and uvicorn packages; returns a function that keeps only
    some of them importable."""
    root = tmp_path / "standins"
    files = {"standin_server.py": STANDIN,
             "vllm/entrypoints/cli/main.py": "from standin_server import serve\nserve('vllm')\n",
             "transformers/cli/transformers.py": "from standin_server import serve\nserve('transformers')\n"}
    for package in ("vllm", "vllm/entrypoints", "vllm/entrypoints/cli", "transformers", "transformers/cli",
                    "fastapi", "uvicorn"):
        files[package + "/__init__.py"] = ""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    monkeypatch.setattr(serve_gate, "node_address", lambda name=None: "127.0.0.1")
    monkeypatch.setenv("STANDIN_RECORD", str(tmp_path / "standin.json"))

    def keep(*packages):
        for package in ("vllm", "transformers"):
            if package not in packages:
                (root / package).rename(root / ("_" + package))
        monkeypatch.setenv("PYTHONPATH", str(root))
        monkeypatch.syspath_prepend(str(root))
        return root

    return keep


def job_args(tmp_path, *extra):
    serve_dir = tmp_path / "serve"
    serve_dir.mkdir(exist_ok=True)
    (tmp_path / "model").mkdir(exist_ok=True)
    return ["--serve-dir", str(serve_dir), "--model-dir", str(tmp_path / "model"), "--model", "tiny",
            "--endpoint-file", str(serve_dir / "endpoint.json"), "--key-env", "LLMTRAIN_SERVE_API_KEY",
            "--job-id", "7", "--node", "n1"] + list(extra)


def ask(url, key=None):
    headers = {"Authorization": "Bearer " + key} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def serve_until_ready(tmp_path, args, then):
    """main(args) in this thread (its signal handlers need it), then(endpoint record) in another once
    the endpoint file is written; a stop notice (SIGTERM, as Slurm sends) ends it. Returns main's exit
    code and what then returned."""
    seen = {}

    def wait_and_stop():
        path = tmp_path / "serve" / "endpoint.json"
        for _tenth in range(300):
            if path.exists():
                seen["result"] = then(json.loads(path.read_text()))
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=wait_and_stop, daemon=True).start()
    code = serve_job.main(args)
    return code, seen.get("result")


def standin_record(tmp_path):
    return json.loads((tmp_path / "standin.json").read_text())


def test_with_vllm_the_key_reaches_vllm_in_its_environment_only_and_a_stop_notice_ends_it(
        tmp_path, standins, monkeypatch, capfd):
    standins("vllm", "transformers")
    monkeypatch.setenv("LLMTRAIN_SERVE_API_KEY", KEY)
    port = serve_gate.free_port("127.0.0.1")

    def check(endpoint):
        url = "http://127.0.0.1:%d/v1/models" % endpoint["port"]
        return endpoint, ask(url, KEY), ask(url), ask(url, "sk-wrong")

    code, (endpoint, keyed, keyless, wrong) = serve_until_ready(tmp_path, job_args(tmp_path, "--port", str(port), "--gpus",
                                                                                   "2", "--", "--max-model-len", "64"),
                                                                check)
    assert code == 0
    assert (keyed, keyless, wrong) == (200, 401, 401)
    assert {k: endpoint[k] for k in ("job_id", "node", "address", "port", "backend", "model", "api_key")} == dict(
        job_id="7", node="n1", address="127.0.0.1", port=port, backend="vllm", model="tiny", api_key=True)
    record = standin_record(tmp_path)
    assert record["argv"] == ["serve", "tiny", "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
                              "--tensor-parallel-size", "2", "--max-model-len", "64"]
    # the key as VLLM_API_KEY only: not under its own name, never on a command line, in the endpoint file or the log
    assert record["vllm_key"] == KEY and record["env_keys"] == ["VLLM_API_KEY"]
    assert os.readlink(str(tmp_path / "serve" / "tiny")) == str(tmp_path / "model") and record["cwd"] == str(
        tmp_path / "serve")
    out, err = capfd.readouterr()
    assert KEY not in out + err + (tmp_path / "serve" / "endpoint.json").read_text()
    assert "vllm serves tiny on http://127.0.0.1:%d/v1" % port in err and "stopping the vllm server" in err


def test_without_vllm_transformers_serve_listens_on_loopback_behind_the_gate_which_asks_for_the_key(
        tmp_path, standins, monkeypatch, capfd):
    standins("transformers")
    monkeypatch.setenv("LLMTRAIN_SERVE_API_KEY", KEY)

    def check(endpoint):
        url = "http://127.0.0.1:%d/v1/models" % endpoint["port"]
        return endpoint, ask(url, KEY), ask(url)

    code, (endpoint, keyed, keyless) = serve_until_ready(tmp_path, job_args(tmp_path), check)
    assert code == 0 and (keyed, keyless) == (200, 401) and endpoint["backend"] == "transformers"
    record = standin_record(tmp_path)
    assert record["argv"][:4] == ["serve", "tiny", "--host", "127.0.0.1"] and record["argv"][5] != str(endpoint["port"])
    assert record["env_keys"] == [] and record["vllm_key"] is None
    out, err = capfd.readouterr()
    assert KEY not in out + err


def test_a_server_that_dies_at_start_ends_the_job_at_once(tmp_path, standins, monkeypatch, capfd):
    standins("transformers")
    monkeypatch.setenv("STANDIN_FAIL", "1")
    began = time.monotonic()
    assert serve_job.main(job_args(tmp_path)) == exit_codes.FAILED.code
    assert time.monotonic() - began < 10
    assert not (tmp_path / "serve" / "endpoint.json").exists()
    err = capfd.readouterr().err
    assert "No module named 'torch'" in err and "llmtrain: the transformers server ended (exit code 1)" in err


def test_a_python_that_cannot_serve_ends_the_job_at_once_naming_what_to_install(tmp_path):
    """The venv of the tests has neither vLLM nor transformers: as a slurm_python without them."""
    package = tmp_path / "scripts"
    for name, text in node_package.files().items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "llmtrain_node.serve_job"] + job_args(tmp_path), cwd=str(package),
                          env=dict(os.environ, LLMTRAIN_SERVE_API_KEY=KEY), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    assert time.monotonic() - began < 10
    assert proc.returncode == exit_codes.SETTING.code, proc.stderr
    assert "cannot serve: it lacks for vllm: vllm; for transformers: transformers, fastapi, uvicorn" in proc.stderr
    assert "pip install 'transformers[serving]'" in proc.stderr and "deploy_venv_packages" in proc.stderr
    assert KEY not in proc.stderr + proc.stdout


def test_which_server_runs_is_what_this_python_can_import():
    def having(*modules):
        return lambda name: object() if name in modules else None

    assert serve_job.backend_of(having("vllm", "transformers")) == ("vllm", None)
    assert serve_job.backend_of(having("transformers", "fastapi", "uvicorn", "h11")) == ("transformers", None)
    assert serve_job.backend_of(having("transformers", "h11")) == (
        None, {"vllm": ["vllm"], "transformers": ["fastapi", "uvicorn"]})


def test_the_server_environment_holds_the_key_only_where_the_server_checks_it():
    environ = {"LLMTRAIN_SERVE_API_KEY": KEY, "VLLM_API_KEY": "stale", "PATH": "/bin"}
    assert serve_job.server_environment("vllm", environ, "LLMTRAIN_SERVE_API_KEY", KEY) == dict(
        PATH="/bin", VLLM_API_KEY=KEY)
    assert serve_job.server_environment("vllm", environ, "LLMTRAIN_SERVE_API_KEY", "") == dict(PATH="/bin")
    assert serve_job.server_environment("transformers", environ, "LLMTRAIN_SERVE_API_KEY", KEY) == dict(PATH="/bin")
