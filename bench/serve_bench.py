"""The server of playbooks/serve.yml on the local cluster: from its job's start to its first token.

    python bench/serve_bench.py [--runs 3] [--format markdown]

A GPT-2 model directory as the export writes it (random weights, the byte tokenizer) in the run's
export/step_<N>/, of two shapes: the local inventory's small model and GPT-2 124M. For each, `--runs`
times: ansible-playbook playbooks/serve.yml starts the job (transformers serve 5.25.0 behind the job's
gate, pinned as the integration tests install it), and as soon as the job's endpoint file appears a
streamed completion is asked for at the node's address; then serve.yml runs again (it re-attaches)
and once more with serve_state=absent. Reported, each a median: the job's start (Slurm's StartTime,
whole seconds) to the endpoint file (the server loaded and answering), to the first token of the
streamed completion; serve.yml's own time to return with the URL; the re-attaching run's and the
stopping run's times.

Runs on the local cluster of the stream PYTEST_XDIST_WORKER names (tests/integration/cluster.py: gwN,
else stream 0, the one make cluster brings up), brought up if it is down and down again at the end.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import cluster  # noqa: E402  pylint: disable=wrong-import-position

RUN = "bench-serve"
SHAPES = {"local inventory's (2 layers x 64)": dict(n_layer=2, n_head=2, n_embd=64, n_positions=64),
          "GPT-2 small's layers (12 x 768), byte vocabulary: 86M parameters": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024)}
MAKE_MODEL = r"""
import json, os, sys
from transformers import GPT2Config, GPT2LMHeadModel
from trainer import hf
out, shape = sys.argv[1], json.loads(sys.argv[2])
GPT2LMHeadModel(GPT2Config(vocab_size=256, bos_token_id=None, eos_token_id=None, **shape)).save_pretrained(out)
for name, text in hf.tokenizer_files(None, shape["n_positions"]).items():
    with open(os.path.join(out, name), "w") as handle:
        handle.write(text)
"""


def make_model(packages, shape):
    export = Path(cluster.WORKSPACE) / RUN / "export" / "step_000001"
    shutil.rmtree(str(Path(cluster.WORKSPACE) / RUN), ignore_errors=True)
    export.parent.mkdir(parents=True, mode=0o755)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([packages, str(ROOT / "roles" / "deploy" / "files")]),
               HF_HUB_OFFLINE="1")
    subprocess.run([sys.executable, "-c", MAKE_MODEL, str(export), json.dumps(shape)], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return sum(f.stat().st_size for f in export.iterdir())


def first_token(address, port, model):
    """Seconds from the request to the first token of a streamed completion."""
    began = time.time()
    connection = http.client.HTTPConnection(address, port, timeout=300)
    body = json.dumps({"model": model, "prompt": "def ", "max_tokens": 8, "stream": True})
    connection.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    while True:
        line = answer.readline()
        if not line:
            raise AssertionError("the stream ended before a token")
        if line.startswith(b"data: {") and json.loads(line[6:])["choices"][0].get("text"):
            took = time.time() - began
            connection.close()
            return took


def job_start(job):
    """The job's start as Slurm recorded it (epoch seconds)."""
    text = cluster.slurm("scontrol", "show", "job", "-o", str(job))
    start = text.split("StartTime=", 1)[1].split()[0]
    return time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S"))


def one_run(settings):
    endpoint_file = Path(cluster.WORKSPACE) / RUN / "serve" / "endpoint.json"
    began = time.monotonic()
    play = cluster.BackgroundPlaybook(settings, playbook="serve.yml")
    cluster.wait_for(endpoint_file.exists, 600, "the endpoint file", play)
    endpoint = json.loads(endpoint_file.read_text())
    ready = endpoint_file.stat().st_mtime
    token = time.time()
    token += first_token(endpoint["address"], endpoint["port"], endpoint["model"])
    result = play.wait(600)
    assert result.rc == 0, result.output[-3000:]
    served = time.monotonic() - began
    start = job_start(endpoint["job_id"])
    figures = dict(ready=ready - start, first_token=token - start, play=served)
    began = time.monotonic()
    cluster.run_playbook("serve.yml", "-e", json.dumps(settings))
    figures["reattach"] = time.monotonic() - began
    began = time.monotonic()
    cluster.run_playbook("serve.yml", "-e", json.dumps(settings), "-e", "serve_state=absent")
    figures["stop"] = time.monotonic() - began
    return figures


def measure(runs):
    packages = cluster.pinned_packages("hf-transformers-5.25.0-serving",
                                       str(ROOT / "tests" / "integration" / "files" / "hf_trainer" / "requirements.txt"))
    settings = dict(run_name=RUN, inference_serve_mem="3G",
                    slurm_env_setup=["export PYTHONPATH=%s" % packages, "export HF_HUB_OFFLINE=1",
                                     "export HF_HOME=%s" % (Path(cluster.WORKSPACE) / ".bench-serve-hf")])
    rows = []
    for label, shape in SHAPES.items():
        size = make_model(packages, shape)
        found = [one_run(settings) for _run in range(runs)]
        rows.append((label, size, dict((k, statistics.median(f[k] for f in found)) for k in found[0])))
    shutil.rmtree(str(Path(cluster.WORKSPACE) / RUN), ignore_errors=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    args = parser.parse_args(argv)
    cluster.write_stream_inventory()
    was_up = cluster.controller_running()
    cluster.run_playbook("local_cluster.yml")
    try:
        rows = measure(args.runs)
    finally:
        if not was_up:
            cluster.run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")
    header = ["Model", "Export (MB)", "Job start to answering (s)", "Job start to first token (s)",
              "serve.yml (s)", "serve.yml again (s)", "serve_state=absent (s)"]
    lines = [[label, "%.1f" % (size / 1e6), "%.1f" % f["ready"], "%.1f" % f["first_token"], "%.1f" % f["play"],
              "%.1f" % f["reattach"], "%.1f" % f["stop"]] for label, size, f in rows]
    if args.format == "text":
        for line in [header] + lines:
            print(" | ".join(line))
        return 0
    out = ["transformers serve 5.25.0 (CPU) behind the job's gate, on one node of the local cluster; medians of "
           "%d runs of each. The job's start is Slurm's StartTime (whole seconds); the first token is that of a "
           "streamed completion asked for as soon as the job wrote its endpoint file." % args.runs, "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    out += ["", "From the job's start, the node check and Python's start with torch and transformers come before "
            "the model loads; serve.yml itself polls the job and the endpoint once a second, and returns once "
            "/v1/models answers at the node's address from the login node."]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
