"""network_check: the fabric a job got, measured and judged (arithmetic and verdicts on recorded numbers)."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import network_check
from ansible_collections.llmtrain.slurm.tests.unit.test_node_package import ship_node_package
from ansible_collections.llmtrain.slurm.tests.faults.trainer_faults import FAULTS_DIR


@pytest.mark.parametrize("size, seconds, ranks, busbw", [
    # 1 GB in 1 s: algbw 1 GB/s; a ring all-reduce moves 2(n-1)/n of it over each rank's link
    (1e9, 1.0, 2, 1.0), (1e9, 1.0, 4, 1.5), (1e9, 1.0, 8, 1.75), (1e9, 0.5, 8, 3.5),
    # nccl-tests' line for 8 GPUs: 128 MiB in 1.42 ms -> algbw 94.5, busbw 165.4 GB/s
    (134217728, 0.00142, 8, 165.4),
])
def test_bus_bandwidth_is_nccl_tests_definition(size, seconds, ranks, busbw):
    assert network_check.bus_bandwidth(size, seconds, ranks) == pytest.approx(busbw, rel=1e-3)


def test_bus_bandwidth_needs_two_ranks_and_some_time():
    assert network_check.bus_bandwidth(1e6, 0.1, 1) is None
    assert network_check.bus_bandwidth(1e6, 0.0, 4) is None


def test_sizes_start_with_the_latency_size_and_stop_at_the_largest():
    assert network_check.sizes(16 * 2 ** 20) == [8, 65536, 2 ** 20, 16 * 2 ** 20]
    assert network_check.sizes(256 * 2 ** 20) == [8, 65536, 2 ** 20, 16 * 2 ** 20, 256 * 2 ** 20]


@pytest.mark.parametrize("count", range(2, 9))
def test_ring_pairs_cover_every_neighbour_once_in_rounds_of_disjoint_pairs(count):
    rounds = network_check.ring_pairs(count)
    pairs = [p for r in rounds for p in r]
    expected = {(0, 1)} if count == 2 else {(k, (k + 1) % count) for k in range(count)}
    assert set(pairs) == expected and len(pairs) == len(expected)
    for r in rounds:
        members = [n for p in r for n in p]
        assert len(members) == len(set(members)), r
    assert len(rounds) <= 3
    assert network_check.ring_pairs(1) == []


def nodes(*speeds):
    return [dict(node="n%d" % i, gbps=g, interfaces=["eth0"]) for i, g in enumerate(speeds)]


def ring(*busbw):
    count = len(busbw)
    return [dict(nodes=["n%d" % k, "n%d" % ((k + 1) % count)], busbw=b, latency_us=50.0 + k) for k, b in enumerate(busbw)]


# Recorded on the local cluster (3 nodes, veths with no speed): pairs n0-n1, n1-n2, n2-n0 in GB/s
LOCAL = (0.398, 0.490, 0.757)
# The same with n2's veth held to 20 Mbit/s by tbf
LOCAL_N2_SHAPED = (0.518, 0.00237, 0.00239)


def test_virtual_links_healthy_nothing_named():
    verdict = network_check.judge(nodes(None, None, None), ring(*LOCAL), dict(busbw=0.63, latency_us=1278), 0.5)
    assert verdict["slow"] == {} and verdict["slow_fabric"] is None
    assert verdict["limit"] is None and verdict["fraction"] is None
    # each node's best pair: n1's (0.49) is 65% of the others' 0.757, above half
    assert [verdict["per_node"][n]["busbw"] for n in ("n0", "n1", "n2")] == [0.757, 0.490, 0.757]
    assert verdict["per_node"]["n0"]["latency_us"] == 50.0


def test_virtual_links_the_shaped_node_is_named_relatively():
    verdict = network_check.judge(nodes(None, None, None), ring(*LOCAL_N2_SHAPED), dict(busbw=0.002), 0.5)
    assert list(verdict["slow"]) == ["n2"]
    assert verdict["slow"]["n2"] == ("0.00239 GB/s with its ring neighbours, 0.46% of the other nodes' 0.518 GB/s "
                                     "(median; expected at least 50%; the link reports no speed)")


def test_a_node_is_named_only_when_both_measurements_found_it_slow():
    """The second measurement of the pairs names only what the first found too: n1 was suspected and
    is slow again; n2 is slow only in the second (one fast pair, n0-n1, made it look so)."""
    second = ring(0.9, 0.30, 0.35)  # n0-n1, n1-n2, n2-n0: n1's best 0.9, n2's best 0.35 against 0.9
    assert sorted(network_check.judge(nodes(None, None, None), second, dict(busbw=0.5), 0.5)["slow"]) == ["n2"]
    verdict = network_check.judge(nodes(None, None, None), second, dict(busbw=0.5), 0.5, suspects={"n1": "..."})
    assert verdict["slow"] == {} and verdict["slow_fabric"] is None and list(verdict["suspects"]) == ["n2"]
    shaped = network_check.judge(nodes(None, None, None), ring(*LOCAL_N2_SHAPED), dict(busbw=0.002), 0.5,
                                 suspects={"n2": "..."})
    assert list(shaped["slow"]) == ["n2"]


def test_two_nodes_without_speed_have_nothing_to_compare():
    verdict = network_check.judge(nodes(None, None), ring(0.001, 0.001)[:1], dict(busbw=0.001), 0.5)
    assert verdict["slow"] == {} and verdict["slow_fabric"] is None


def test_infiniband_whole_at_85_percent_is_fine():
    # 4 nodes x 400 Gb/s NDR (50 GB/s): 42.5 GB/s bus bandwidth
    four = nodes(400.0, 400.0, 400.0, 400.0)
    whole = dict(busbw=42.5, latency_us=20.0)
    assert not network_check.needs_pairs(four, whole, 0.5)
    verdict = network_check.judge(four, [], whole, 0.5)
    assert verdict["limit"] == 50.0 and verdict["fraction"] == pytest.approx(0.85)
    assert verdict["slow"] == {} and verdict["slow_fabric"] is None
    assert verdict["per_node"]["n3"]["busbw"] == 42.5 and verdict["per_node"]["n3"]["fraction"] == pytest.approx(0.85)


def test_a_link_renegotiated_down_is_named_against_its_own_speed():
    # n1's HCA came up at 100 Gb/s instead of 400: the whole is 11 GB/s, 88% of the slowest link
    # (itself), but n1's pairs reach 11 of its 12.5 GB/s while the others' 45 of 50
    four = nodes(400.0, 100.0, 400.0, 400.0)
    whole = dict(busbw=11.0)
    verdict = network_check.judge(four, [], whole, 0.5)
    assert verdict["fraction"] == pytest.approx(0.88) and verdict["slow"] == {}
    # a node whose link is fine but whose traffic is not (a bad cable, a congested switch port)
    assert network_check.needs_pairs(nodes(400.0, 400.0, 400.0), dict(busbw=3.0), 0.5)
    verdict = network_check.judge(nodes(400.0, 400.0, 400.0), ring(45.0, 3.1, 3.0), dict(busbw=3.0), 0.5)
    assert list(verdict["slow"]) == ["n2"]
    assert verdict["slow"]["n2"] == "3.1 GB/s with its ring neighbours, 6.2% of its 50 GB/s link (expected at least 50%)"
    assert verdict["per_node"]["n0"]["fraction"] == pytest.approx(0.9)


@pytest.mark.parametrize("fraction, text", [
    (0.85, "85%"), (0.1, "10%"), (0.062, "6.2%"), (0.0046, "0.46%"), (1.0, "100%")])
def test_percent_keeps_two_figures_below_ten(fraction, text):
    assert network_check.percent(fraction) == text


def test_every_node_slow_names_the_fabric_not_a_node():
    three = nodes(400.0, 400.0, 400.0)
    verdict = network_check.judge(three, ring(5.0, 5.0, 5.0), dict(busbw=4.0), 0.5)
    assert verdict["slow"] == {}
    assert verdict["slow_fabric"].startswith("every node is slow: n0 5 GB/s with its ring neighbours, 10% of its 50 GB/s")
    # the pairs found every node slow: they are measured again before the fabric is named
    assert sorted(verdict["suspects"]) == ["n0", "n1", "n2"]
    # and without pair numbers: the whole against the slowest link (nothing to measure again)
    verdict = network_check.judge(three, [], dict(busbw=4.0), 0.5)
    assert verdict["suspects"] == {}
    assert verdict["slow_fabric"] == ("all-reduce bus bandwidth 4 GB/s, 8% of the slowest link's 50 GB/s (expected at "
                                      "least 50%), and no node stands out")


def test_table_names_interface_link_busbw_fraction_latency_and_verdict():
    three = nodes(None, None, None)
    verdict = network_check.judge(three, ring(*LOCAL_N2_SHAPED), dict(busbw=0.002), 0.5)
    lines = network_check.table(three, verdict)
    assert lines[0].split() == ["NODE", "INTERFACE", "LINK(Gb/s)", "BUSBW(GB/s)", "OF", "LINK", "LATENCY(us)", "VERDICT"]
    assert lines[1].split() == ["n0", "eth0", "unknown", "0.518", "-", "50", "ok"]
    assert lines[3].split() == ["n2", "eth0", "unknown", "0.00239", "-", "51", "SLOW"]
    four = nodes(400.0, 400.0, 400.0, 400.0)
    lines = network_check.table(four, network_check.judge(four, [], dict(busbw=42.5, latency_us=20.0), 0.5))
    assert lines[1].split() == ["n0", "eth0", "400", "42.5", "85%", "20", "ok"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_program_measures_two_gloo_ranks_on_this_machine(tmp_path):
    """The program as the nodes run it (python -m llmtrain_node.network_check, no Ansible), two ranks over loopback."""
    pytest.importorskip("torch")
    out = tmp_path / "net.json"
    port = free_port()
    ship_node_package(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "llmtrain_node.network_check", "--out", str(out),
                               "--max-bytes", str(2 ** 20), "--budget", "0.05", "--job", "7"],
                              cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", SLURMD_NODENAME="node%d" % rank,
                                       PYTHONPATH=""))
             for rank in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    result = json.loads(out.read_text())
    assert [n["node"] for n in result["nodes"]] == ["node0", "node1"]
    assert result["backend"] == "gloo" and result["ranks"] == 2 and result["job_id"] == "7"
    assert result["busbw"] > 0 and result["latency_us"] > 0
    assert [s["bytes"] for s in result["sizes"]][0] == 8
    # lo reports no speed: the two nodes are measured as a pair, and two cannot be compared
    assert len(result["pairs"]) == 1 and result["slow"] == {} and result["verdict"] == "ok"
    assert "llmtrain: network check: all-reduce over 2 ranks (gloo): bus bandwidth" in outputs[0]
    assert "llmtrain: network check  node1  lo" in outputs[0]


def test_a_busy_cpu_that_spends_the_budget_on_8_bytes_still_gets_a_bandwidth_and_no_crash():
    """Under load even the latency size can take the whole budget: the sweep measures one size past it
    all the same (it stopped there, and two ranks compared None with None: a TypeError that ended the
    check on every rank), and a pair's best keeps a measured bandwidth over an unmeasured one."""
    class Slow(network_check.Measure):
        def __init__(self):
            super().__init__(None, None, None, budget=0.05)

        def seconds_per_all_reduce(self, size, group=None):
            return 0.04, 1  # every size takes most of the budget

    sweep = Slow().sweep(network_check.sizes(2 ** 20), 2)
    assert [s["bytes"] for s in sweep][:1] == [network_check.LATENCY_BYTES] and len(sweep) == 2
    busbw, latency_us = network_check.summary_of(sweep)
    assert busbw is not None and busbw > 0 and latency_us == 40000.0
    assert network_check.best_of(None, None) is None
    assert network_check.best_of(None, 2.0) == 2.0 and network_check.best_of(3.0, None) == 3.0
    assert network_check.best_of(3.0, 2.0) == 3.0


def test_a_node_slow_only_in_the_first_measurement_is_measured_again_and_not_named(tmp_path):
    """Three ranks over loopback (no link speed: the nodes are judged against each other). node1's
    all-reduces wait 20 ms each during the first pair measurement only (a fault hook, as a passing
    load would make them): the check says what it found, measures the pairs again, and names no node.
    A budget of a second, not the default's fraction: on a machine busy with other tests, a shorter second
    measurement of loopback pairs could find another node slow by chance."""
    pytest.importorskip("torch")
    out = tmp_path / "net.json"
    port = free_port()
    ship_node_package(tmp_path)
    # imported by its name, so that the fault hook can wrap it (python -m runs it as __main__)
    program = "import sys; from llmtrain_node import network_check; sys.exit(network_check.main())"
    procs = [subprocess.Popen([sys.executable, "-c", program, "--out", str(out), "--max-bytes", str(2 ** 20),
                               "--budget", "1.0", "--job", "8"],
                              cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo", SLURMD_NODENAME="node%d" % rank,
                                       PYTHONPATH=str(FAULTS_DIR), TRAINER_FAULT_NETWORK_SLOW_ONCE="node1:0.02",
                                       OMP_NUM_THREADS="1"))
             for rank in range(3)]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    result = json.loads(out.read_text())
    first = result["first_measurement"]
    assert list(first["slow"]) == ["node1"] and "of the other nodes'" in first["slow"]["node1"], result
    assert first["passes"] == first["again_passes"] == network_check.PAIR_PASSES and first["again_budget"] == 1.0
    assert re.search(r"llmtrain: network check: a first measurement found node1 slow \([0-9.e-]+ GB/s with its ring "
                     r"neighbours, .*\): measuring the pairs again", outputs[0]), outputs[0]
    assert result["slow"] == {} and result["verdict"] == "ok", result
    # each pair keeps its best of both measurements: node1's pairs now stand with the others'
    assert len(result["pairs"]) == 3 and all(p["busbw"] > 0 for p in result["pairs"])
