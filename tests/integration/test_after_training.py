"""After training, on the local cluster: the local inventory's run (test_pipeline's, made once per
stream: pretrain.yml here finds it finished, or trains it) leaves its newest checkpoint exported
as a Hugging Face model that transformers (5.25.0 from PyPI, pinned, installed as the Hugging Face
Trainer test installs it) loads with our logits, evaluated over every rank of a job with the
trainer's own val loss; export.yml again submits nothing."""

import json
import os
import subprocess
import sys

import pytest

from cluster import ROOT, RUNS, WORKSPACE, job_ids, pinned_packages, run_playbook

RUN = "local-demo"
STEP = "step_000800"
FILES = os.path.join(ROOT, "tests", "integration", "files", "hf_trainer")


@pytest.fixture(scope="module")
def transformers_dir():
    return pinned_packages("hf-transformers-5.25.0", os.path.join(FILES, "requirements.txt"))


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
