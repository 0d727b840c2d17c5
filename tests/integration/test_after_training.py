"""After training, on the local cluster, from the local inventory's run (test_pipeline's, made once
per stream: pretrain.yml here finds it finished, or trains it; 3 nodes x 2 ranks):

- its newest checkpoint exported as a Hugging Face model that transformers (5.25.0 from PyPI, with
  its serving extras and the openai client, pinned, installed as the Hugging Face Trainer test
  installs it) loads with our logits; evaluated over every rank of a job with the trainer's own
  val loss; export.yml again submits nothing;
- batch inference (playbooks/batch.yml) over 3 nodes x 2 ranks: generations.jsonl complete and in
  the prompts' order; a batch job requeued while it generates makes only the prompts without a
  record; a rerun submits nothing; a bad prompts file stops the play before anything is submitted;
- serving (playbooks/serve.yml): transformers serve behind the job's gate at its node's address;
  the real openai client gets a completion and a chat completion there with the key (a wrong key, or
  none, refused), also while a hundred keyless clients trickle their heads to the gate; tracing on
  (set -x) leaves no key in the job's log; a rerun re-attaches; serve_state=absent stops it and nothing
  of it is left. With a stand-in vLLM the key reaches it and never the log; a slurm_python that cannot
  serve fails the play within seconds of its job, naming what to install, its job ended."""

import glob
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from cluster import NODES, ROOT, RUNS, WORKSPACE, BackgroundPlaybook, job_ids, pinned_packages, run_playbook, slurm, wait_for

RUN = "local-demo"
STEP = "step_000800"
FILES = os.path.join(ROOT, "tests", "integration", "files", "hf_trainer")


@pytest.fixture(scope="module")
def transformers_dir():
    """transformers[serving] and openai, pinned (requirements.txt), kept in tests/output."""
    return pinned_packages("hf-transformers-5.25.0-serving", os.path.join(FILES, "requirements.txt"))


@pytest.fixture(scope="module")
def trained(local_cluster):
    """The local inventory's run, trained and exported by pretrain.yml (a rerun of a finished one does nothing)."""
    run_playbook("pretrain.yml")
    return os.path.join(WORKSPACE, RUN)


# In a process of its own: transformers from its pinned directory, the reference model from the trainer's files.
COMPARE = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from transformers import AutoModelForCausalLM, AutoTokenizer
from trainer.checkpoint import find_checkpoint
from trainer.model import GPT, GPTConfig
from trainer.tokenizer import Codec
path, state = find_checkpoint(sys.argv[1])
ours = GPT(GPTConfig(**state["model_config"]))
ours.load_state_dict(state["model"])
hf = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(sys.argv[2])
text = "import os\ndef main(argv):\n    return sorted(argv, key=len)  # é\n" * 2
ids = tokenizer(text)["input_ids"]
batch = torch.tensor([ids[:64], ids[3:67]])
with torch.no_grad():
    difference = (ours.eval()(batch)[0] - hf.eval()(batch).logits).abs().max().item()
out = hf.generate(batch[:1, :8], max_new_tokens=12, do_sample=False)
print(json.dumps({"difference": difference, "same_ids": ids == Codec(state["tokenizer"]).encode(text),
                  "architecture": type(hf).__name__, "generated": out.shape[1] - 8,
                  "decoded": tokenizer.decode(ids) == text}))
"""


def test_the_export_loads_in_transformers_with_our_logits_and_a_rerun_exports_nothing(trained, transformers_dir):
    export = os.path.join(trained, "export", STEP)
    assert sorted(os.listdir(export)) == ["config.json", "generation_config.json", "llmtrain_export.json",
                                          "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    compared = subprocess.run([sys.executable, "-c", COMPARE, os.path.join(trained, "checkpoints", STEP + ".pt"), export,
                               transformers_dir, os.path.join(ROOT, "roles", "deploy", "files")],
                              env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=300, check=False)
    assert compared.returncode == 0, compared.stderr[-3000:]
    result = json.loads(compared.stdout.splitlines()[-1])
    assert result["difference"] < 1e-4, result
    assert result == dict(result, same_ids=True, decoded=True, architecture="GPT2LMHeadModel", generated=12)
    model = json.load(open(os.path.join(RUNS, RUN, "model.json")))
    assert model["model_dir"] == export and model["export"]["step"] == 800

    before = job_ids()
    again = run_playbook("export.yml")
    assert not job_ids() - before, again.output[-3000:]  # once per checkpoint: nothing submitted
    assert "Model (Hugging Face, " in again.output and export in again.output


def test_the_evaluation_over_every_rank_matches_the_trainers_val_loss(trained):
    before = job_ids()
    result = run_playbook("export.yml", "-e", json.dumps({"inference_nodes": 3}))
    evaluation = json.load(open(os.path.join(RUNS, RUN, "model.json")))["evaluation"]
    assert len(job_ids() - before) == 1  # a job on 3 nodes: another script, another job
    assert evaluation["ranks"] == 6 and evaluation["step"] == 800 and evaluation["tokens"] > 10000, evaluation
    records = [json.loads(line) for line in open(os.path.join(RUNS, RUN, "metrics.jsonl"))]
    val = [r["val_loss"] for r in records if r.get("step") == 800 and "val_loss" in r][-1]
    # the trainer's estimate: 5 batches of 8 random windows on each of its 6 ranks; this: every window
    assert evaluation["loss"] == pytest.approx(val, abs=0.1), (evaluation, val)
    assert "Held-out loss %.4f" % evaluation["loss"] in result.output
    report = open(os.path.join(RUNS, RUN, "report.md")).read()
    assert "## After training" in report and "%.4f" % evaluation["loss"] in report, report


CAP = 48  # inference_max_new_tokens: the most tokens any prompt gets
BLOCK = 64  # the local inventory's model context (pretrain_model.block_size)
# the export job the evaluation test ran on 3 nodes: the batches find it
RUN_VALUES = {"inference_nodes": 3}


def write_prompts(path, prompts):
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return str(path)


def batch_values(prompts_file, **extra):
    values = dict(RUN_VALUES, inference_prompts_file=prompts_file, inference_max_new_tokens=CAP)
    values.update(extra)
    return values


def batch_dirs(run_dir):
    return set(glob.glob(os.path.join(run_dir, "batch", "*")))


def part_records(batch_dir):
    """Every whole record of the part files (a torn last line left out), and the torn lines."""
    records, torn = [], 0
    for path in glob.glob(os.path.join(batch_dir, "parts", "w*", "rank-*.jsonl")):
        with open(path, "rb") as handle:
            for line in handle:
                if line.endswith(b"\n"):
                    records.append(json.loads(line))
                else:
                    torn += 1
    return records, torn


def test_a_batch_over_three_nodes_comes_back_complete_in_order_and_a_rerun_submits_nothing(trained, tmp_path):
    long_prompt = "def f(x):\n    return x\n" * 20  # over the model's 64 tokens
    prompts = [{"prompt": "def f%d(" % i, "id": "p%d" % i} for i in range(18)]
    prompts[3].update(max_new_tokens=CAP + 100)  # capped
    prompts[4].update(prompt=long_prompt)  # left-truncated
    prompts[5].update(temperature=0, max_new_tokens=5)
    prompts[6] = {"prompt": "import os\n", "seed": 7, "top_k": 5}  # no id
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", prompts)
    before_dirs = batch_dirs(trained)
    before = job_ids()
    ran = run_playbook("batch.yml", "-e", json.dumps(batch_values(prompts_file)))
    new = job_ids() - before
    assert len(new) == 1, new  # the batch: the training's inference stage exported the model

    local = os.path.join(RUNS, RUN)
    records = [json.loads(line) for line in open(os.path.join(local, "generations.jsonl"))]
    assert [r["index"] for r in records] == list(range(len(prompts)))
    assert [r["prompt"] for r in records] == [p["prompt"] for p in prompts]
    assert [r.get("id") for r in records] == [p.get("id") for p in prompts]
    # 6 ranks on the 3 nodes, prompt i on rank i mod 6
    assert [r["rank"] for r in records] == [i % 6 for i in range(len(prompts))]
    assert {r["world"] for r in records} == {6} and sorted({r["node"] for r in records}) == NODES
    assert all(isinstance(r["completion"], str) and r["tokens"] == r["max_new_tokens"] or r["finish"] == "end_of_text"
               for r in records)
    assert records[3]["capped"] is True and records[3]["max_new_tokens"] == CAP and records[3]["tokens"] == CAP
    assert not any(r["capped"] for i, r in enumerate(records) if i != 3)
    assert records[4]["truncated"] > 0 and records[4]["prompt_tokens"] == BLOCK
    assert records[5]["tokens"] == 5 and records[5]["temperature"] == 0
    assert records[6]["seed"] == 7 and records[6]["top_k"] == 5 and records[0]["seed"] == 1337

    summary = json.load(open(os.path.join(local, "summary.json")))
    assert summary["prompts"] == len(prompts) and summary["tokens"] == sum(r["tokens"] for r in records)
    assert summary["ranks"] == 6 and summary["tokens_per_second"] > 0 and summary["duplicates"] == 0
    assert re.search(r"Batch: %d prompts, %d tokens generated on 6 ranks in [\d.]+ s of the busiest rank: [\d.]+ tokens/s"
                     % (len(prompts), summary["tokens"]), ran.output), ran.output[-3000:]
    # no generated text on the terminal
    assert all(r["completion"][:24] not in ran.output for r in records if len(r["completion"].strip()) >= 24)
    # the batch's directory: named by its prompts, model and settings; the prompts copied there
    (batch_dir,) = batch_dirs(trained) - before_dirs
    with open(os.path.join(batch_dir, "prompts.jsonl")) as handle:
        assert handle.read() == open(prompts_file).read()

    # the same prompts again: the job's record says it ran, nothing is submitted
    before = job_ids()
    again = run_playbook("batch.yml", "-e", json.dumps(batch_values(prompts_file)))
    assert job_ids() - before == set()
    assert "Batch: %d prompts" % len(prompts) in again.output
    assert [json.loads(line) for line in open(os.path.join(local, "generations.jsonl"))] == records


def test_a_requeued_batch_job_generates_only_the_prompts_without_a_record(trained, tmp_path):
    # long enough that the job is requeued while it generates: 20 prompts a rank, 400 tokens each
    prompts = [{"prompt": "class C%d:\n" % i, "max_new_tokens": 400} for i in range(120)]
    prompts_file = write_prompts(tmp_path / "requeued.jsonl", prompts)
    before_dirs = batch_dirs(trained)
    playbook = BackgroundPlaybook(batch_values(prompts_file, inference_max_new_tokens=400), playbook="batch.yml")

    def some_records():
        dirs = batch_dirs(trained) - before_dirs
        if not dirs:
            return None
        records, _torn = part_records(next(iter(dirs)))
        return next(iter(dirs)) if len(records) >= 6 else None

    batch_dir = wait_for(some_records, 600, "the first records of the batch", playbook=playbook)
    job_id = slurm("squeue", "--noheader", "--name", "llmtrain-batch-" + RUN, "--format=%i").split()[0]
    slurm("scontrol", "requeue", job_id)
    seen_at_requeue = len(part_records(batch_dir)[0])
    assert seen_at_requeue < len(prompts)  # it was still generating
    result = playbook.wait(900)
    assert result.rc == 0, result.output[-4000:]

    records, _torn = part_records(batch_dir)
    counts = {}
    for record in records:
        counts[record["index"]] = counts.get(record["index"], 0) + 1
    # every prompt made once: none made again after the requeue
    assert counts == dict((i, 1) for i in range(len(prompts))), counts
    generated = [json.loads(line) for line in open(os.path.join(RUNS, RUN, "generations.jsonl"))]
    assert [r["index"] for r in generated] == list(range(len(prompts)))
    # the log of the job: two starts, the second one generating only what the first left
    (log,) = glob.glob(os.path.join(trained, "logs", "llmtrain-batch-%s-%s.out" % (RUN, job_id)))
    text = open(log, errors="replace").read()
    starts = re.findall(r"batch: rank (\d+) of 6: (\d+) of (\d+) prompts to generate", text)
    assert len(starts) == 12, starts
    first, second = starts[:6], starts[6:]
    assert sum(int(n) for _r, n, _t in first) == len(prompts)
    assert sum(int(n) for _r, n, _t in second) <= len(prompts) - seen_at_requeue
    assert json.load(open(os.path.join(RUNS, RUN, "summary.json")))["duplicates"] == 0


def test_a_bad_prompts_file_stops_the_play_before_anything_is_submitted(trained, tmp_path):
    prompts_file = tmp_path / "bad.jsonl"
    prompts_file.write_text('{"prompt": "def "}\n{"prompt": "x", "max_tokens": 5}\nnot json\n')
    before = job_ids()
    failed = run_playbook("batch.yml", "-e", json.dumps(batch_values(str(prompts_file))), check=False)
    assert failed.rc != 0
    assert 'inference_prompts_file=%s line 2: unknown key "max_tokens" (did you mean max_new_tokens?)' % prompts_file \
        in failed.output, failed.output[-3000:]
    assert "inference_prompts_file=%s line 3: it is no JSON" % prompts_file in failed.output
    assert job_ids() - before == set()


KEY = "sk-llmtrain-test-0123456789"

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


def named(ids, prefix):
    """Those of the job ids whose job's name starts with prefix."""
    lines = slurm("squeue", "--noheader", "--states=all", "--format=%i|%j").splitlines()
    return {i for i, name in (line.split("|", 1) for line in lines) if i in ids and name.startswith(prefix)}


def serve(settings, *extra, check=True):
    return run_playbook("serve.yml", "-e", json.dumps(settings), *extra, check=check, timeout=600)


def served_file():
    with open(os.path.join(RUNS, RUN, "serve.json")) as handle:
        return json.load(handle)


def job_log(job):
    with open(os.path.join(WORKSPACE, RUN, "logs", "llmtrain-serve-%s-%s.out" % (RUN, job))) as handle:
        return handle.read()


class SlowClients:
    """count connections to address:port that send a request head without a key, a header line every
    second, until closed."""

    def __init__(self, address, port, count):
        self.stop = threading.Event()
        self.sockets = []
        for _client in range(count):
            client = socket.create_connection((address, port), timeout=10)
            client.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            self.sockets.append(client)
        self.thread = threading.Thread(target=self.trickle, daemon=True)
        self.thread.start()

    def trickle(self):
        index = 0
        while not self.stop.wait(1):
            for client in self.sockets:
                try:
                    client.sendall(b"X-Slow-%d: a\r\n" % index)
                except OSError:
                    pass
            index += 1

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.stop.set()
        self.thread.join(10)
        for client in self.sockets:
            client.close()


def models_status(served, key=None):
    request = urllib.request.Request(served["url"] + "/models", headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_serve_yml_serves_the_exported_model_to_the_openai_client_reattaches_and_stops(
        trained, transformers_dir, tmp_path):
    """One server, with a key (what the messages say without one, and of a server that refuses the
    play's key, is pinned by tests/unit/plugins/module_utils/test_serve.py)."""
    # tracing on, as a user debugging the job's environment has it
    settings = dict(RUN_VALUES, slurm_env_setup=["set -x", "export PYTHONPATH=%s" % transformers_dir, "export HF_HUB_OFFLINE=1",
                                                 "export HF_HOME=%s" % (tmp_path / "hf-home")],
                    slurm_secret_env={"LLMTRAIN_SERVE_API_KEY": KEY})
    before = job_ids()

    # a bad value is refused before anything is submitted, naming the variable and the fix
    refused = serve(dict(settings, inference_serve_port=80), check=False)
    assert refused.rc != 0 and "inference_serve_port=80 must be 0 (a port free on the node" in refused.output
    assert job_ids() - before == set()

    result = serve(settings)
    served = served_file()
    job = served["job_id"]
    # the serving job (and, for these settings' job scripts, the export job again, which exports nothing new)
    assert named(job_ids() - before, "llmtrain-serve-") == {job}
    assert served["url"] == "http://%s:%d/v1" % (served["address"], served["port"]) and served["url"].startswith(
        "http://10.213.")
    assert served["model"] == RUN and served["backend"] == "transformers"
    assert served["tunnel"] == "ssh -N -L %d:%s:%d localhost" % (served["port"], served["address"], served["port"])
    assert served["url"] in result.output and served["tunnel"] in result.output
    # the key's name in serve.json, never the key, nor anywhere a user or another user reads
    assert served["api_key_variable"] == "LLMTRAIN_SERVE_API_KEY"
    assert KEY not in result.output and KEY not in open(os.path.join(RUNS, RUN, "serve.json")).read()
    assert KEY not in open(os.path.join(WORKSPACE, RUN, "serve", "endpoint.json")).read()
    assert KEY not in open(os.path.join(WORKSPACE, RUN, "scripts", "serve.sbatch")).read()
    answers = ask(transformers_dir, served, KEY)
    assert answers["models"] == [RUN]
    assert answers["completion"][1] == 8 and answers["chat"][0] == "assistant" and answers["chat"][2] == 8
    assert answers["chunks"] >= 1
    # a request with another key, or none, is refused
    assert ask(transformers_dir, served, "sk-wrong") == {"refused": 401}
    assert ask(transformers_dir, served) == {"refused": 401}
    # a hundred keyless clients trickling their heads cannot keep the keyed one out
    with SlowClients(served["address"], served["port"], 100):
        time.sleep(2)
        assert [models_status(served, KEY) for _time in range(3)] == [200, 200, 200]
    # the server is the node's: its address is the node's, not the login host's loopback
    node = slurm("squeue", "--noheader", "--jobs", job, "--format=%N").strip()
    assert served["node"] == node

    # a rerun re-attaches: the same job, nothing submitted
    again = serve(settings)
    assert served_file()["job_id"] == job and named(job_ids() - before, "llmtrain-serve-") == {job}
    assert "already running: re-attached" in again.output

    # stopped: no job, no process of it left, and nothing to stop a second time
    stopped = serve(settings, "-e", "serve_state=absent")
    assert "job %s cancelled and ended" % job in stopped.output
    assert slurm("squeue", "--noheader", "--jobs", job, "--format=%T").strip() in ("CANCELLED", "")
    assert server_processes() == []
    assert not os.path.exists(os.path.join(RUNS, RUN, "serve.json"))
    nothing = serve(settings, "-e", "serve_state=absent")
    assert "has no queued or running server job" in nothing.output
    # traced, and no line of the log holds the key
    log = job_log(job)
    assert "+ export HF_HUB_OFFLINE=1" in log and KEY not in log, log[-3000:]


# vLLM's stand-in (vLLM needs a GPU): `python -m vllm.entrypoints.cli.main serve NAME ... --host H --port P`
# answers /v1/models with the key it finds in VLLM_API_KEY, as vLLM does
VLLM_MAIN = r"""
import http.server, json, os, sys
args = sys.argv[1:]
key = os.environ.get("VLLM_API_KEY")
class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        ok = not key or self.headers.get("Authorization") == "Bearer " + key
        body = json.dumps({"object": "list", "data": [{"id": args[1], "object": "model"}]} if ok else {}).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
print("stand-in vllm serving %s; its key under its own name: %s" % (args[1], "LLMTRAIN_SERVE_API_KEY" in os.environ),
      flush=True)
http.server.HTTPServer((args[args.index("--host") + 1], int(args[args.index("--port") + 1])), Handler).serve_forever()
"""


def test_with_vllm_the_key_reaches_vllm_only_and_no_line_of_the_log(trained, tmp_path):
    standin = tmp_path / "vllm-standin"
    for name, text in {"vllm/__init__.py": "", "vllm/entrypoints/__init__.py": "", "vllm/entrypoints/cli/__init__.py": "",
                       "vllm/entrypoints/cli/main.py": VLLM_MAIN}.items():
        (standin / name).parent.mkdir(parents=True, exist_ok=True)
        (standin / name).write_text(text)
    settings = dict(RUN_VALUES, slurm_env_setup=["set -x", "export PYTHONPATH=%s" % standin],
                    slurm_secret_env={"LLMTRAIN_SERVE_API_KEY": KEY})
    serve(settings)
    served = served_file()
    assert served["backend"] == "vllm" and served["url"].startswith("http://10.213.")
    assert (models_status(served, KEY), models_status(served), models_status(served, "sk-wrong")) == (200, 401, 401)
    stopped = serve(settings, "-e", "serve_state=absent")
    assert "job %s cancelled and ended" % served["job_id"] in stopped.output
    log = job_log(served["job_id"])
    assert "+ export PYTHONPATH=" in log and "its key under its own name: False" in log, log[-3000:]
    assert KEY not in log


def test_a_slurm_python_that_cannot_serve_fails_the_play_at_once_naming_the_fix(trained):
    """The nodes' Python as it is: it has torch, and neither vLLM nor transformers."""
    before = job_ids()
    began = time.monotonic()
    failed = serve(dict(RUN_VALUES, slurm_env_setup=["set -x"], slurm_secret_env={"LLMTRAIN_SERVE_API_KEY": KEY}),
                   check=False)
    took = time.monotonic() - began
    # the play ends as soon as the job does (it waited until inference_serve_ready_timeout, 900 s, for a job that
    # stayed up with its server dead): 14 s on an idle machine, 33 s beside the other stream
    assert failed.rc != 0 and took < 90, (took, failed.output[-3000:])
    assert "cannot serve: it lacks" in failed.output and "pip install 'transformers[serving]'" in failed.output, \
        failed.output[-3000:]
    jobs = named(job_ids() - before, "llmtrain-serve-")
    assert len(jobs) == 1
    assert slurm("squeue", "--noheader", "--jobs", jobs.pop(), "--format=%T").strip() in ("FAILED", "")
    assert server_processes() == [] and KEY not in failed.output
