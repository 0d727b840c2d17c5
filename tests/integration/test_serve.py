"""playbooks/serve.yml on the local cluster: the run's exported model (a GPT-2 directory as the export
writes it, with the byte tokenizer and its chat template) served by transformers serve (5.25.0, pinned,
installed as the Hugging Face Trainer test installs it) behind the job's gate at its node's address;
the real openai client gets a completion and a chat completion there, with no key and with one (a
wrong key refused); a rerun re-attaches; serve_state=absent stops it and nothing of it is left."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from cluster import ROOT, RUNS, WORKSPACE, job_ids, pinned_packages, run_playbook, slurm

FILES = os.path.join(ROOT, "tests", "integration", "files", "hf_trainer")
RUN = "serve-demo"
KEY = "sk-llmtrain-test-0123456789"

MAKE_MODEL = r"""
import json, os, sys
from transformers import GPT2Config, GPT2LMHeadModel
from trainer import hf
out = sys.argv[1]
config = GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=None,
                    eos_token_id=None)
GPT2LMHeadModel(config).save_pretrained(out)
for name, text in hf.tokenizer_files(None, 64).items():
    with open(os.path.join(out, name), "w") as handle:
        handle.write(text)
"""

# the openai client as a user runs it: completions, chat completions, and a refusal
CLIENT = r"""
import json, sys
import openai
url, model, key = sys.argv[1], sys.argv[2], sys.argv[3] or "none"
client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)
out = {}
try:
    out["models"] = [m.id for m in client.models.list().data]
    completion = client.completions.create(model=model, prompt="def ", max_tokens=8)
    out["completion"] = [completion.choices[0].text, completion.usage.completion_tokens]
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    out["chat"] = [chat.choices[0].message.role, chat.choices[0].message.content, chat.usage.completion_tokens]
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=4, stream=True)
    out["chunks"] = sum(1 for chunk in stream if chunk.choices and chunk.choices[0].delta.content)
except openai.AuthenticationError as err:
    out["refused"] = err.status_code
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def transformers_dir():
    """transformers[serving] and openai, pinned (requirements.txt), kept in tests/output."""
    return pinned_packages("hf-transformers-5.25.0-serving", os.path.join(FILES, "requirements.txt"))


def python_with(transformers_dir, code, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([transformers_dir, os.path.join(ROOT, "roles", "deploy", "files")]),
               HF_HUB_OFFLINE="1", NO_PROXY="*", no_proxy="*")
    proc = subprocess.run([sys.executable, "-c", code] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def ask(transformers_dir, served, key=""):
    return json.loads(python_with(transformers_dir, CLIENT, served["url"], served["model"], key).splitlines()[-1])


def server_processes():
    """The command lines of this run's server and gate processes, on any node."""
    proc = subprocess.run(["pgrep", "-af", "transformers serve %s |serve_gate gate .*--model %s" % (RUN, RUN)],
                          stdout=subprocess.PIPE, universal_newlines=True, check=False)
    return proc.stdout.splitlines()


def serve(settings, *extra, check=True):
    return run_playbook("serve.yml", "-e", json.dumps(settings), *extra, check=check, timeout=600)


def served_file():
    with open(os.path.join(RUNS, RUN, "serve.json")) as handle:
        return json.load(handle)


def test_serve_yml_serves_the_exported_model_to_the_openai_client_reattaches_and_stops(
        local_cluster, transformers_dir, tmp_path):
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, RUN), ignore_errors=True)
    export = os.path.join(WORKSPACE, RUN, "export", "step_000010")
    os.makedirs(os.path.dirname(export), mode=0o755)
    python_with(transformers_dir, MAKE_MODEL, export)
    settings = dict(run_name=RUN, slurm_env_setup=["export PYTHONPATH=%s" % transformers_dir, "export HF_HUB_OFFLINE=1",
                                                   "export HF_HOME=%s" % (tmp_path / "hf-home")])
    before = job_ids()

    # a bad value is refused before anything is submitted, naming the variable and the fix
    refused = serve(dict(settings, inference_serve_port=80), check=False)
    assert refused.rc != 0 and "inference_serve_port=80 must be 0 (a port free on the node" in refused.output
    assert job_ids() - before == set()

    # no key: anyone who reaches the node's address may use it, and the play says so
    result = serve(settings)
    served = served_file()
    job = served["job_id"]
    assert set(job_ids() - before) == {job}
    assert served["url"] == "http://%s:%d/v1" % (served["address"], served["port"]) and served["url"].startswith(
        "http://10.213.")
    assert served["model"] == RUN and served["backend"] == "transformers" and served["api_key_variable"] is None
    assert served["tunnel"] == "ssh -N -L %d:%s:%d localhost" % (served["port"], served["address"], served["port"])
    assert served["url"] in result.output and served["tunnel"] in result.output
    assert "anyone who can reach %s:%d can use it" % (served["address"], served["port"]) in result.output
    answers = ask(transformers_dir, served)
    assert answers["models"] == [RUN]
    assert answers["completion"][1] == 8 and answers["chat"][0] == "assistant" and answers["chat"][2] == 8
    assert answers["chunks"] >= 1
    # the server is the node's: its address is the node's, not the login host's loopback
    node = slurm("squeue", "--noheader", "--jobs", job, "--format=%N").strip()
    assert served["node"] == node

    # a rerun re-attaches: the same job, nothing submitted
    again = serve(settings)
    assert served_file()["job_id"] == job and set(job_ids() - before) == {job}
    assert "already running: re-attached" in again.output

    # stopped: no job, no process of it left
    stopped = serve(settings, "-e", "serve_state=absent")
    assert "job %s cancelled and ended" % job in stopped.output
    assert slurm("squeue", "--noheader", "--jobs", job, "--format=%T").strip() in ("CANCELLED", "")
    assert server_processes() == []
    assert not os.path.exists(os.path.join(RUNS, RUN, "serve.json"))

    # with a key (slurm_secret_env): the key's name in serve.json, never the key; a request without it or
    # with another is refused
    keyed = dict(settings, slurm_secret_env={"LLMTRAIN_SERVE_API_KEY": KEY})
    result = serve(keyed)
    served = served_file()
    assert served["job_id"] != job and served["api_key_variable"] == "LLMTRAIN_SERVE_API_KEY"
    assert KEY not in result.output and KEY not in open(os.path.join(RUNS, RUN, "serve.json")).read()
    assert KEY not in open(os.path.join(WORKSPACE, RUN, "serve", "endpoint.json")).read()
    assert KEY not in open(os.path.join(WORKSPACE, RUN, "scripts", "serve.sbatch")).read()
    answers = ask(transformers_dir, served, KEY)
    assert answers["models"] == [RUN] and answers["completion"][1] == 8 and answers["chat"][0] == "assistant"
    assert ask(transformers_dir, served, "sk-wrong") == {"refused": 401}
    assert ask(transformers_dir, served) == {"refused": 401}
    # the play without the key finds a server that refuses it, and says how to start it again
    refused = serve(settings, check=False)
    assert refused.rc != 0 and "refuses a request without a key" in refused.output, refused.output[-3000:]

    serve(keyed, "-e", "serve_state=absent")
    assert server_processes() == []
    nothing = serve(keyed, "-e", "serve_state=absent")
    assert "has no queued or running server job" in nothing.output
