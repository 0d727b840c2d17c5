"""A node that computes slower than the others, on the real local cluster: the reference trainer
records each node's work and wait per step, the watch names the slow node while the job runs,
and the report's step-time table marks it. The slow node is made by a fault hook on the ranks'
PYTHONPATH (tests/faults: TRAINER_FAULT_SLOW_NODE sleeps before each step on that node)."""

import json
import os
import re
import shutil
import time

from cluster import ROOT, run_playbook

WORKSPACE = "/var/tmp/llmtrain-workspace"
RUNS = os.path.join(ROOT, "runs")
SESSION = "%05x" % (int(time.time()) % 0xFFFFF)
SLOW_NODE, SLOW_S = "slurm-worker-1", 0.05


def test_a_slow_node_is_named_by_the_watch_and_marked_in_the_report(local_cluster):
    run = "straggler-" + SESSION
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    settings = {
        "pretrain_run_name": run, "pretrain_steps": 40, "pretrain_checkpoint_interval": 0,
        "pretrain_model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}, "pretrain_batch_size": 4,
        "pretrain_extra_args": ["--log-interval", "4", "--eval-interval", "0", "--warmup", "5"],
        "pretrain_poll_interval": 2, "deploy_dataset_max_bytes": 200000,
        "nccl_env_extra": {"PYTHONPATH": os.path.join(ROOT, "tests", "faults"),
                           "TRAINER_FAULT_SLOW_NODE": "%s:%s" % (SLOW_NODE, SLOW_S)},
    }
    result = run_playbook("pretrain.yml", "-e", json.dumps(settings), "--tags", "nccl_env,deploy,pretrain")
    named = re.findall(r"straggler: (\S+) took ([\d.]+)x the median work per step", result.output)
    records = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    timed = [r["nodes"] for r in records if "nodes" in r]
    work = [{node: times["work_ms"] for node, times in nodes.items()} for nodes in timed]
    print("stragglers: named=%s, work_ms per record=%s" % (named, work))
    # named once, while the job ran, and no other node
    assert [node for node, _ratio in named] == [SLOW_NODE], result.output[-4000:]
    assert len(timed) == 10 and all(sorted(nodes) == ["slurm-worker-%d" % n for n in range(3)] for nodes in timed)
    # what the others waited for is the slow node's extra work: it waits least, they wait about as long
    for nodes in timed[1:]:
        others = [nodes[n] for n in nodes if n != SLOW_NODE]
        assert all(nodes[SLOW_NODE]["work_ms"] > o["work_ms"] + 0.6 * SLOW_S * 1000 for o in others), nodes
        assert all(nodes[SLOW_NODE]["wait_ms"] < o["wait_ms"] for o in others), nodes
    table = open(os.path.join(RUNS, run, "report.md")).read().split("## Step time per node\n", 1)[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| slurm-worker-")}
    assert sorted(rows) == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"], table
    assert rows[SLOW_NODE].endswith("(straggler) |") and not any("straggler" in rows[n] for n in rows if n != SLOW_NODE)
