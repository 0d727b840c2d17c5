"""A poll of a 2,048-node job: what the watch returns stays a few KB, the node and network
checks' per-node records staying in their files (written here by the checks' own code)."""

import contextlib
import io
import json
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import network_check, node_check
from ansible_collections.llmtrain.slurm.plugins.modules import slurm_job_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.module_utils.test_node_check import gather_args, record
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, job_text, run, scontrol_job

NODES = ["gpu-node-%04d" % i for i in range(2048)]
BAD, SLOW = NODES[7], NODES[1500]


def node_check_file(tmp_path):
    (tmp_path / "check").mkdir()
    for node in NODES:
        missing = ["ib1"] if node == BAD else []
        rec = record(node=node, gpus_requested=8, gpus_visible=8, nvidia_smi_count=8, torch_count=8, detected=8,
                     registered=8, gpu_names=["NVIDIA H100 80GB HBM3"] * 8, interfaces=["eth0", "ib0", "lo"],
                     missing_interfaces=missing)
        (tmp_path / "check" / (node + ".json")).write_text(json.dumps(rec))
    with contextlib.redirect_stdout(io.StringIO()):
        node_check.gather(gather_args(tmp_path, *NODES, bad_nodes_file=False))
    return tmp_path / "node_check.json"


def network_check_file(tmp_path):
    """What the network check's rank 0 writes (network_check.run) after pair tests in which one
    node is slow."""
    nodes = [dict(node=node, rank=8 * i, kind="ib", interfaces=["mlx5_0"], gbps=400.0) for i, node in enumerate(NODES)]
    pairs = [dict(nodes=[a, b], busbw=2.0 if SLOW in (a, b) else 45.0, latency_us=20.0)
             for a, b in zip(NODES, NODES[1:] + NODES[:1])]
    verdict = network_check.judge(nodes, pairs, dict(busbw=20.0, latency_us=30.0), 0.5)
    result = dict(job_id="42", restart=1, backend="nccl", ranks=8 * len(NODES), verdict="slow_nodes",
                  time="2026-11-30T10:01:00Z", busbw=20.0, latency_us=30.0, limit=verdict["limit"],
                  fraction=verdict["fraction"], min_fraction=0.5, sizes=[], pairs=pairs, slow=verdict["slow"],
                  slow_fabric=verdict["slow_fabric"], seconds=14.2, import_seconds=3.1, connect_seconds=2.4,
                  nodes=[dict(n, **verdict["per_node"][n["node"]]) for n in nodes],
                  table=network_check.table(nodes, verdict))
    path = tmp_path / "network_check.json"
    network_check.write_json(str(path), result)
    return path


def metrics_file(tmp_path):
    """Loss records as the reference trainer writes them (node_times: the slowest nodes only)."""
    path = tmp_path / "metrics.jsonl"
    slowest = dict((node, dict(work_ms=201.0, wait_ms=30.0)) for node in NODES[:8])
    path.write_text("".join(json.dumps(dict(step=s, total_steps=100000, loss=3.0, lr=3e-4, tokens_per_s=1e6,
                                            elapsed_s=s, eta_s=1e5,
                                            node_times=dict(count=2048, median_work_ms=200.0, median_wait_ms=30.0,
                                                            slowest=slowest))) + "\n" for s in range(10, 410, 10)))
    return path


def on_2048_nodes(name):
    text = re.sub(r"\bNodeList=\S+", "NodeList=gpu-node-[0000-2047]", job_text(name, 42))
    return re.sub(r"\bNumNodes=\S+", "NumNodes=2048", text)


def test_a_poll_of_a_2048_node_job_returns_a_few_kb(monkeypatch, capsys, tmp_path):
    args = dict(job_id=["42"], metrics_file=str(metrics_file(tmp_path)), log_lines=30,
                node_check_file=str(node_check_file(tmp_path)), network_check_file=str(network_check_file(tmp_path)))
    assert (tmp_path / "node_check.json").stat().st_size > 1000000  # what each poll shipped whole
    s = Slurm(monkeypatch, [(scontrol_job(42), (0, on_2048_nodes("running"), ""))])
    result = run(slurm_job_info.main, args, capsys)
    s.done()
    assert len(json.dumps(result)) <= 16 * 1024  # the result as Ansible receives it
    job = result["jobs"][0]
    assert job["nodelist"] == "gpu-node-[0000-2047]" and job["num_nodes"] == 2048 and job["nodes"] == []
    assert result["progress"]["step"] == 400

    check = result["node_check"]
    assert (check["checked"], check["bad_count"], list(check["bad"])) == (2048, 1, [BAD])
    assert check["file"] == args["node_check_file"]
    assert check["table"][0].startswith("NODE") and check["table"][1].startswith(BAD + " ")
    assert check["table"][2] == "(2047 other node(s) passed; every node's line is in %s)" % check["file"]

    network = result["network_check"]
    assert (network["checked"], network["slow_count"], list(network["slow"])) == (2048, 1, [SLOW])
    assert (network["verdict"], network["busbw"], network["ranks"]) == ("slow_nodes", 20.0, 16384)
    assert network["table"][1].startswith(SLOW + " ") and len(network["table"]) == 3
    assert network["table"][2] == "(2047 other node(s) ok; every node's line is in %s)" % network["file"]


def test_an_ended_job_has_its_nodes_for_the_collect_step(monkeypatch, capsys):
    s = Slurm(monkeypatch, [(scontrol_job(42), (0, on_2048_nodes("failed"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["42"]), capsys)
    s.done()
    assert result["jobs"][0]["nodes"] == NODES
