"""The fabric a training job got: its network check (the step after the node check) measures
all-reduce bus bandwidth and latency with the run's own Gloo settings, and names a node whose
link is slow. The local cluster's links are veths (no speed): the nodes are judged against
each other. One node is slowed by a token bucket (tc tbf) on its host-side veth; netem is not
in this kernel. While training, the reference trainer records each node's work and wait per step
and the watch names a node that computes slower than the others (a straggler), made here by a
fault hook on the ranks' PYTHONPATH (tests/faults: TRAINER_FAULT_SLOW_NODE sleeps before each
step on that node)."""

import json
import os
import re
import shutil
import subprocess
import time

import pytest

from cluster import NETNS_PREFIX, NODE_RE, NODES, ROOT, RUNS, WORKSPACE, node, run_playbook

# the local cluster's veth of node N on the host side (roles/local_cluster: <prefix>v<N>)
VETH = NETNS_PREFIX.replace("-", "") + "v%d"
QUICK = dict(pretrain_steps=10, pretrain_checkpoint_interval=0, pretrain_poll_interval=2,
             pretrain_model={"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32}, pretrain_batch_size=4,
             pretrain_extra_args=["--log-interval", "5", "--eval-interval", "0"], deploy_dataset_max_bytes=200000)


def fresh(run):
    for base in (WORKSPACE, RUNS):
        shutil.rmtree(os.path.join(base, run), ignore_errors=True)
    return run


def values(run, **more):
    # the stages up to training; the cluster is up (the session's), preflight is test_preflight.py's
    return ["--skip-tags", "local_cluster,preflight,inference", "-e", json.dumps(dict(QUICK, run_name=run, **more))]


def network_record(run):
    with open(os.path.join(RUNS, run, "facts.json")) as handle:
        return json.load(handle)["network"]


def job_log(run):
    logs = sorted(os.listdir(os.path.join(RUNS, run, "logs")))
    with open(os.path.join(RUNS, run, "logs", logs[-1])) as handle:
        return handle.read()


@pytest.fixture
def slow_node(local_cluster):
    """Node 2's traffic from the bridge held to 20 Mbit/s for the test, removed after it
    whatever the test did."""
    index = 2
    subprocess.run(["tc", "qdisc", "add", "dev", VETH % index, "root", "tbf", "rate", "20mbit", "burst", "32kbit",
                    "latency", "50ms"], check=True)
    try:
        yield node(index)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", VETH % index, "root"], check=True)


# 150 ms more work a step on node 1: a step's work on the others is 10-60 ms here, and varies by
# about as much when the other test stream keeps the cores busy; the straggler stays apart.
STRAGGLER, STRAGGLER_S = node(1), 0.15


def test_every_training_job_measures_its_fabric_and_the_watch_names_a_straggler(local_cluster):
    run = fresh("fabric-ok")
    started = time.monotonic()
    # 24 steps, a loss record every 4: node 1's ranks sleep STRAGGLER_S before each step
    straggler = dict(pretrain_steps=24, pretrain_extra_args=["--log-interval", "4", "--eval-interval", "0"],
                     nccl_env_extra={"PYTHONPATH": os.path.join(ROOT, "tests", "faults"),
                                     "TRAINER_FAULT_SLOW_NODE": "%s:%s" % (STRAGGLER, STRAGGLER_S)})
    result = run_playbook("pretrain.yml", *values(run, **straggler))
    played_s = time.monotonic() - started
    log = job_log(run)
    # the step ran between the node check and the training, on the job's three nodes
    assert log.index("llmtrain: node check of job") < log.index("llmtrain: network check of job") \
        < log.index("llmtrain: network check: all-reduce over 3 ranks (gloo)")
    network = network_record(run)
    assert network["backend"] == "gloo" and network["ranks"] == 3
    assert [n["node"] for n in network["nodes"]] == NODES
    for entry in network["nodes"]:
        # veths report no speed; a bus bandwidth between 1 MB/s and 100 GB/s, a latency under a second
        assert entry["interfaces"] == ["eth0"] and entry["gbps"] is None and entry["fraction"] is None
        assert 0.001 < entry["busbw"] < 100 and 0 < entry["latency_us"] < 1e6, entry
    pairs = [(p["nodes"], round(p["busbw"], 3)) for p in network["pairs"]]
    print("pairs: %s; first measurement: %s" % (pairs, network["first_measurement"]))
    assert network["slow"] == {} and network["slow_fabric"] is None, network
    assert network["seconds"] < 30, network
    report = open(os.path.join(RUNS, run, "report.md")).read()
    section = report[report.index("## Network"):report.index("## Jobs")]
    assert "over 3 rank(s) with gloo: all-reduce bus bandwidth" in section
    assert len(re.findall(r"\| " + NODE_RE + r" \| eth0 \| unknown \(the link reports none\) \| [0-9.]+ GB/s \| - \| "
                          r"\d+ us \| ok \|", section)) == 3, section
    # the watch printed the table once
    assert result.output.count("network check of job") == 1, result.output[-4000:]
    print("network check: %.1f s inside the step (torch import %.1f s); play %.0f s"
          % (network["seconds"], network["import_seconds"], played_s))

    # the straggler: named by the watch while the job ran, once, and no other node
    named = re.findall(r"straggler: (\S+) took ([\d.]+)x the median work per step", result.output)
    records = [json.loads(line) for line in open(os.path.join(RUNS, run, "metrics.jsonl"))]
    # each record carries the slowest nodes (all 3 of 3 here); the run's whole per-node history
    # is node_times.json, which the collect step fetched beside the metrics
    timed = [r["node_times"]["slowest"] for r in records if "node_times" in r]
    assert all(r["node_times"]["count"] == 3 for r in records if "node_times" in r)
    history = json.load(open(os.path.join(RUNS, run, "node_times.json")))
    assert sorted(history["nodes"]) == NODES, history
    assert history["records"] == len(timed), (history["records"], len(timed))
    work = [{node: times["work_ms"] for node, times in nodes.items()} for nodes in timed]
    print("stragglers: named=%s, work_ms per record=%s" % (named, work))
    assert [node for node, _ratio in named] == [STRAGGLER], result.output[-4000:]
    assert len(timed) == 6 and all(sorted(nodes) == NODES for nodes in timed)
    # what the others waited for is the slow node's extra work: it waits least, they wait about as long
    for nodes in timed[1:]:
        others = [nodes[n] for n in nodes if n != STRAGGLER]
        assert all(nodes[STRAGGLER]["work_ms"] > o["work_ms"] + 0.6 * STRAGGLER_S * 1000 for o in others), nodes
        assert all(nodes[STRAGGLER]["wait_ms"] < o["wait_ms"] for o in others), nodes
    table = report.split("## Step time per node\n", 1)[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| " + node(""))}
    assert sorted(rows) == NODES, table
    assert rows[STRAGGLER].endswith("(straggler) |") and not any("straggler" in rows[n] for n in rows if n != STRAGGLER)


def test_a_slow_node_is_named_by_the_watch_and_the_report_and_training_goes_on(slow_node):
    run = fresh("fabric-slow")
    result = run_playbook("pretrain.yml", *values(run))  # policy warn: the play succeeds
    network = network_record(run)
    assert list(network["slow"]) == [slow_node], network
    # found by the first measurement of the pairs, and again by the second
    assert list(network["first_measurement"]["slow"]) == [slow_node], network
    assert "llmtrain: network check: a first measurement found %s slow (" % slow_node in job_log(run)
    assert "of the other nodes'" in network["slow"][slow_node] and "the link reports no speed" in network["slow"][slow_node]
    others = [n["busbw"] for n in network["nodes"] if n["node"] != slow_node]
    mine = [n["busbw"] for n in network["nodes"] if n["node"] == slow_node][0]
    assert mine < 0.5 * min(others), network["nodes"]
    assert re.search(r"network check: %s is slow: [0-9.e-]+ GB/s with its ring neighbours" % slow_node, result.output), \
        result.output[-5000:]
    assert "llmtrain: network check: training goes on (pretrain_network_policy=warn)" in job_log(run)
    report = open(os.path.join(RUNS, run, "report.md")).read()
    assert re.search(r"\| %s \| eth0 \| [^|]+ \| [0-9.e-]+ GB/s \| - \| \d+ us \| SLOW \|" % slow_node, report), report
    assert "Steps: 10 of 10" in report
