"""The reference pipeline with a BPE tokenizer on the local cluster: the preparation job trains
it on the corpus (offline) and keeps it with the data, the trainer pads the vocabulary and
carries the tokenizer in its checkpoints, and the samples are decoded with it."""

import json
import os
import re
import shutil
import subprocess

from cluster import BIN, RUNS, WORKSPACE, run_playbook
RUN = "bpe-demo"


def test_bpe_prepare_train_and_generate_on_the_cluster(local_cluster):
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, RUN), ignore_errors=True)
    settings = dict(run_name=RUN, deploy_tokenizer="bpe", deploy_vocab_size=1000,
                    deploy_dataset_max_bytes=400000, pretrain_steps=150, pretrain_checkpoint_interval=0,
                    pretrain_extra_args=["--warmup", "10", "--eval-interval", "0", "--log-interval", "10"],
                    inference_max_new_tokens=40,
                    # the tokenizer changes nothing of the fabric: the network check, which test_fabric.py
                    # tests, would add about 5 s to the training job's start
                    pretrain_network_check=False)
    # every stage but the cluster's (the session's, up already) and preflight (test_preflight.py's)
    run_playbook("pretrain.yml", "--skip-tags", "local_cluster,preflight", "-e", json.dumps(settings))

    data = os.path.join(WORKSPACE, RUN, "data")
    meta = json.load(open(os.path.join(data, "meta.json")))
    assert (meta["tokenizer"], meta["vocab_size"], meta["dtype"]) == ("bpe", 1000, "uint16"), meta
    tokenizer_json = open(os.path.join(data, "tokenizer.json")).read()
    # the checkpoint: a vocabulary padded to a multiple of 64, and the data's tokenizer in it
    code = ("import sys, json, torch; s = torch.load(sys.argv[1], map_location='cpu', weights_only=False); "
            "print(json.dumps([s['model_config']['vocab_size'], s['tokenizer']]))")
    checkpoint = os.path.join(WORKSPACE, RUN, "checkpoints", "step_000150.pt")
    vocab, carried = json.loads(subprocess.run([os.path.join(BIN, "python"), "-c", code, checkpoint], check=True,
                                               stdout=subprocess.PIPE, universal_newlines=True, timeout=120).stdout)
    assert vocab == 1024 and carried == {"kind": "bpe", "vocab_size": 1000, "json": tokenizer_json}

    local = os.path.join(RUNS, RUN)
    losses = [r["loss"] for r in map(json.loads, open(os.path.join(local, "metrics.jsonl"))) if "loss" in r]
    assert losses[-1] < losses[0] - 1.0, (losses[0], losses[-1])  # it learned
    report = open(os.path.join(local, "report.md")).read()
    assert "- Tokenizer: bpe, vocabulary 1,000" in report, report
    samples = open(os.path.join(local, "samples.txt")).read()
    completions = re.split(r"^=== prompt \d+: .*$", samples, flags=re.M)[1:]
    # 40 BPE tokens of text like the corpus's: more characters than tokens
    assert len(completions) == 3 and all(len(c.strip()) > 40 for c in completions), samples
