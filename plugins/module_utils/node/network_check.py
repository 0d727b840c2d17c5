# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The network check: the fabric a job got, measured with the job's own backend and env.

The second step of the training job, right after the node check, on the same nodes, started
like the training (torch.distributed.run on every node, the node's env file sourced):

    python -m llmtrain_node.network_check --out FILE [--gpus N] [--min-fraction F]
        [--bad-nodes-file FILE] [--max-bytes B] [--budget S] [--job ID] [--restart N]

Every rank takes part in all-reduces of a few sizes (NCCL on GPUs, Gloo on CPUs), each size
bounded in time; the bus bandwidth is nccl-tests' (busbw = algbw * 2(n-1)/n, n ranks) and
the latency that of the smallest all-reduce. Each node reads the speed of the links its
traffic goes through (link_speed.py). The whole is judged against the slowest link; where
it is below --min-fraction of it, or where links report no speed, the nodes are measured in
ring-neighbour pairs (one rank per node), and a node whose best pair is below --min-fraction
of its link (or of the other nodes' pairs, where there is no speed to judge against) is
measured again, afresh and for longer: it is named when both measurements found it slow.
Rank 0 writes FILE (every figure, and the verdict: ok, slow_nodes or slow_fabric), prints a
per-node table and adds the slow nodes to --bad-nodes-file. Exit
status 0 on every rank when it measured; anything else on a rank that could not (srun then
ends the others).

It imports nothing from Ansible, and torch only when it measures: it runs on the nodes as part
of the llmtrain_node package (see __init__.py); unit tests import its arithmetic and judgement
as module_utils.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import os
import socket
import statistics
import sys
import time

from . import bad_nodes, link_speed
from .node_check import record_stop_notice, stop_recording_notices, write_json

LATENCY_BYTES = 8
PAIR_PASSES = 3
NAMED_IN_LINE = 5  # suspects a job log line names (the record has them all)
FLOAT_BYTES = 4


def bus_bandwidth(size_bytes, seconds, ranks):
    """nccl-tests' all-reduce bus bandwidth, in GB/s (1e9 bytes): the algorithm bandwidth
    (size / time) times 2(n-1)/n, what each rank's link carries in a ring all-reduce; it is
    comparable with the link's speed whatever n is."""
    if seconds <= 0 or ranks < 2:
        return None
    return size_bytes / seconds / 1e9 * 2.0 * (ranks - 1) / ranks


def sizes(max_bytes):
    """The message sizes measured: the latency size, then x16 up to max_bytes."""
    found, size = [LATENCY_BYTES], 64 * 1024
    while size <= max_bytes:
        found.append(size)
        size *= 16
    return found


def ring_pairs(count):
    """Ring-neighbour pairs of `count` nodes in rounds of disjoint pairs: [[(a, b), ...], ...]."""
    if count < 2:
        return []
    if count == 2:
        return [[(0, 1)]]
    rounds = [[], [], []]
    for k in range(count):
        last_of_odd_ring = count % 2 == 1 and k == count - 1
        rounds[2 if last_of_odd_ring else k % 2].append((k, (k + 1) % count))
    return [r for r in rounds if r]


def percent(fraction):
    """0.85 -> 85%, 0.062 -> 6.2%, 0.0034 -> 0.34%: two figures below 10%, where they tell apart."""
    value = 100.0 * fraction
    return "%.0f%%" % value if value >= 10 else "%.2g%%" % value


def judge(nodes, pairs, whole, min_fraction, suspects=None):
    """The verdict on recorded numbers.

    nodes: [dict(node, gbps)] (link speed in Gb/s, None where unknown); pairs: [dict(nodes
    [a, b], busbw GB/s, latency_us)], empty when none ran; whole: dict(busbw) of all ranks.
    suspects: the nodes an earlier measurement of the pairs found slow, where this is the
    second; a node is slow only when both found it so.
    Returns dict(limit GB/s or None, fraction, per_node {node: dict(busbw, latency_us, limit,
    fraction)}, slow {node: reason}, slow_fabric reason or None, suspects {node: reason}: every
    node these pairs found slow, also where all were and the fabric is named instead)."""
    speeds = [n["gbps"] for n in nodes]
    limit = min(speeds) / 8.0 if speeds and None not in speeds else None
    fraction = whole["busbw"] / limit if limit and whole.get("busbw") is not None else None
    per_node = {}
    for n in nodes:
        mine = [p for p in pairs if n["node"] in p["nodes"] and p.get("busbw") is not None]
        best = max((p["busbw"] for p in mine), default=None)
        own_limit = n["gbps"] / 8.0 if n["gbps"] else None
        per_node[n["node"]] = dict(
            busbw=best if mine else whole.get("busbw"),
            latency_us=min(p["latency_us"] for p in mine) if mine else whole.get("latency_us"),
            limit=own_limit, pair=bool(mine))
        value = per_node[n["node"]]["busbw"]
        per_node[n["node"]]["fraction"] = value / own_limit if own_limit and value is not None else None
    slow = {}
    measured = dict((name, v["busbw"]) for name, v in per_node.items() if v["pair"])
    for name, value in measured.items():
        own = per_node[name]
        if own["limit"]:
            if value < min_fraction * own["limit"]:
                slow[name] = ("%.3g GB/s with its ring neighbours, %s of its %.3g GB/s link (expected at "
                              "least %s)" % (value, percent(value / own["limit"]), own["limit"], percent(min_fraction)))
            continue
        others = [v for other, v in measured.items() if other != name]
        if len(others) < 2:  # two nodes: one pair, nothing to compare it with
            continue
        reference = statistics.median(others)
        if value < min_fraction * reference:
            slow[name] = ("%.3g GB/s with its ring neighbours, %s of the other nodes' %.3g GB/s (median; "
                          "expected at least %s; the link reports no speed)"
                          % (value, percent(value / reference), reference, percent(min_fraction)))
    found_slow = dict(slow)
    if suspects is not None:
        slow = dict((name, reason) for name, reason in slow.items() if name in suspects)
    slow_fabric = None
    if measured and len(slow) == len(measured):
        slow_fabric = "every node is slow: %s" % "; ".join("%s %s" % kv for kv in sorted(slow.items()))
        slow = {}
    elif not slow and fraction is not None and fraction < min_fraction:
        slow_fabric = ("all-reduce bus bandwidth %.3g GB/s, %s of the slowest link's %.3g GB/s (expected at least "
                       "%s), and no node stands out" % (whole["busbw"], percent(fraction), limit, percent(min_fraction)))
    return dict(limit=limit, fraction=fraction, per_node=per_node, slow=slow, slow_fabric=slow_fabric,
                suspects=found_slow)


def needs_pairs(nodes, whole, min_fraction):
    """Pair tests run where the whole is below min_fraction of the slowest link, or where a
    link reports no speed (the nodes are then compared with each other)."""
    if len(nodes) < 2:
        return False
    verdict = judge(nodes, [], whole, min_fraction)
    return verdict["limit"] is None or verdict["fraction"] is None or verdict["fraction"] < min_fraction


def _gb(value):
    return "-" if value is None else "%.3g" % value


def table(nodes, verdict):
    """Aligned lines, one per node: interface, link speed, measured bus bandwidth, its fraction
    of the node's link, latency."""
    lines = [["NODE", "INTERFACE", "LINK(Gb/s)", "BUSBW(GB/s)", "OF LINK", "LATENCY(us)", "VERDICT"]]
    for n in nodes:
        mine = verdict["per_node"][n["node"]]
        lines.append([n["node"], ",".join(n["interfaces"]) or "?", "%g" % n["gbps"] if n["gbps"] else "unknown",
                      _gb(mine["busbw"]), "-" if mine["fraction"] is None else "%.0f%%" % (100 * mine["fraction"]),
                      "-" if mine["latency_us"] is None else "%.0f" % mine["latency_us"],
                      "SLOW" if n["node"] in verdict["slow"] else "ok"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip() for line in lines]


class Measure:
    """Timed all-reduces on a process group (torch imported by the caller)."""

    def __init__(self, torch, dist, device, budget):
        self.torch, self.dist, self.device, self.budget = torch, dist, device, budget

    def _sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _slowest(self, seconds, group):
        value = self.torch.tensor([seconds], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX, group=group)
        return float(value.item())

    def seconds_per_all_reduce(self, size_bytes, group=None, max_iters=50):
        """Seconds per all-reduce of size_bytes as the slowest rank saw it; one warm-up, then
        as many as fit in the budget (the same count on every rank)."""
        tensor = self.torch.ones(max(1, size_bytes // FLOAT_BYTES), dtype=self.torch.float32, device=self.device)
        self._sync()
        start = time.perf_counter()
        self.dist.all_reduce(tensor, group=group)
        self._sync()
        warm = self._slowest(time.perf_counter() - start, group)
        iters = int(min(max_iters, self.budget / max(warm, 1e-6)))
        if iters < 1:
            return warm, 1
        self._sync()
        start = time.perf_counter()
        for _iteration in range(iters):
            self.dist.all_reduce(tensor, group=group)
        self._sync()
        return self._slowest(time.perf_counter() - start, group) / iters, iters

    def sweep(self, byte_sizes, ranks, group=None):
        """[dict(bytes, seconds, iters, busbw)] up to the first size that takes the whole budget, and
        at least one size past the latency one (a busy CPU can make even 8 bytes take it all, and
        a sweep without a bandwidth is no measurement)."""
        found = []
        for size in byte_sizes:
            seconds, iters = self.seconds_per_all_reduce(size, group)
            found.append(dict(bytes=size, seconds=seconds, iters=iters, busbw=bus_bandwidth(size, seconds, ranks)))
            if seconds * 2 > self.budget and size > LATENCY_BYTES:
                break
        return found


def best_of(one, other):
    """The larger of two bandwidths, either of which may be None (not measured)."""
    return other if one is None else one if other is None else max(one, other)


def summary_of(sweep):
    """(best bus bandwidth over the sizes past the latency one, latency in microseconds)."""
    busbw = max((s["busbw"] for s in sweep if s["bytes"] > LATENCY_BYTES and s["busbw"] is not None), default=None)
    return busbw, sweep[0]["seconds"] * 1e6


def run(args, environ=None, started=None):
    """One rank's part; started: time.monotonic() when the process started (the check's cost
    includes importing torch)."""
    environ = os.environ if environ is None else environ
    started = time.monotonic() if started is None else started
    import torch
    import torch.distributed as dist

    imported = time.monotonic()
    rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    local_rank = int(environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if args.gpus > 0 else "gloo"
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # the rank's GPU named, not guessed from the rank (torch 2.3 and later take it)
    bound = {"device_id": device} if backend == "nccl" and "device_id" in inspect.signature(
        dist.init_process_group).parameters else {}
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout), **bound)
    connected = time.monotonic()
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    mine = None
    if local_rank == 0:
        mine = dict(node=node, rank=rank, **link_speed.node_links(environ, backend))
        if backend == "nccl":
            mine["nvlink_gbps"] = nvlink_of_node()
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    nodes = [g for g in gathered if g]
    measure = Measure(torch, dist, device, args.budget)
    sweep = measure.sweep(sizes(args.max_bytes), world)
    busbw, latency_us = summary_of(sweep)
    whole = dict(busbw=busbw, latency_us=latency_us)

    pairs, first = [], None
    if needs_pairs(nodes, whole, args.min_fraction):
        rounds = ring_pairs(len(nodes))
        # every rank creates every group, in the same order (torch.distributed's rule)
        groups = dict(((a, b), dist.new_group([nodes[a]["rank"], nodes[b]["rank"]]))
                      for round_pairs in rounds for a, b in round_pairs)
        pair_sizes = [LATENCY_BYTES, min(args.pair_bytes, args.max_bytes)]
        pairs = measure_pairs(dist, Measure(torch, dist, device, args.budget / PAIR_PASSES), rank, world, nodes,
                              rounds, groups, pair_sizes, PAIR_PASSES)
        # every rank holds the same pairs: they agree on whether to measure again
        suspects = judge(nodes, pairs, whole, args.min_fraction)["suspects"]
        if suspects:
            # a node the pairs found slow (which the policy may exclude, or end the job for) is
            # measured again, afresh, each pair given the whole budget: it is slow when both
            # measurements found it so (one fast pair can make the others look slow)
            first = dict(slow=suspects, passes=PAIR_PASSES, budget=args.budget / PAIR_PASSES,
                         again_passes=PAIR_PASSES, again_budget=args.budget)
            if rank == 0:
                named = sorted(suspects.items())[:NAMED_IN_LINE]
                say(": a first measurement found %s%s: measuring the pairs again" % (
                    "; ".join("%s slow (%s)" % kv for kv in named),
                    " and %d more" % (len(suspects) - len(named)) if len(suspects) > len(named) else ""))
            pairs = measure_pairs(dist, Measure(torch, dist, device, args.budget), rank, world, nodes, rounds,
                                  groups, pair_sizes, PAIR_PASSES)
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return 0
    verdict = judge(nodes, pairs, whole, args.min_fraction, suspects=first["slow"] if first else None)
    result = dict(job_id=args.job, restart=args.restart, backend=backend, ranks=world,
                  verdict="slow_nodes" if verdict["slow"] else "slow_fabric" if verdict["slow_fabric"] else "ok",
                  time=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  busbw=busbw, latency_us=latency_us, limit=verdict["limit"], fraction=verdict["fraction"],
                  min_fraction=args.min_fraction, sizes=sweep, pairs=pairs, slow=verdict["slow"],
                  slow_fabric=verdict["slow_fabric"], first_measurement=first,
                  seconds=round(time.monotonic() - started, 2),
                  import_seconds=round(imported - started, 2), connect_seconds=round(connected - imported, 2),
                  nodes=[dict(n, **verdict["per_node"][n["node"]]) for n in nodes])
    result["table"] = table(nodes, verdict)
    write_json(args.out, result)
    say(": all-reduce over %d ranks (%s): bus bandwidth %s GB/s%s, latency %.0f us, %.1f s"
        % (world, backend, _gb(busbw), "" if verdict["fraction"] is None else
           ", %.0f%% of the slowest link's %.3g GB/s" % (100 * verdict["fraction"], verdict["limit"]),
           latency_us, result["seconds"]))
    for line in result["table"]:
        say("  " + line)
    for name, reason in sorted(verdict["slow"].items()):
        say(": %s is slow: %s" % (name, reason))
    if verdict["slow_fabric"]:
        say(": the fabric is slow: %s" % verdict["slow_fabric"])
    if verdict["slow"] and args.bad_nodes_file:
        bad_nodes.record(args.bad_nodes_file, {name: "slow network: " + reason for name, reason in verdict["slow"].items()},
                         args.job, result["time"])
    return 0


def measure_pairs(dist, measure, rank, world, nodes, rounds, groups, pair_sizes, passes):
    """The ring-neighbour pairs measured `passes` times over, round by round (the pairs of a
    round at once, the others waiting at a barrier), each pair keeping its best: a pair measured
    while something else held the CPUs or the switch is not the slow one. Returns every pair as
    its two ranks measured it (the slowest of the two, the same list on every rank)."""
    found = {}
    for _pass in range(passes):
        for round_pairs in rounds:
            for a, b in round_pairs:
                if rank not in (nodes[a]["rank"], nodes[b]["rank"]):
                    continue
                pair_busbw, pair_latency = summary_of(measure.sweep(pair_sizes, 2, group=groups[(a, b)]))
                key = (nodes[a]["node"], nodes[b]["node"])
                best = found.setdefault(key, dict(nodes=list(key), busbw=pair_busbw, latency_us=pair_latency))
                best["busbw"] = best_of(best["busbw"], pair_busbw)
                best["latency_us"] = min(best["latency_us"], pair_latency)
            dist.barrier()
    everything = [None] * world
    dist.all_gather_object(everything, list(found.values()))
    return list(dict((tuple(p["nodes"]), p) for measured in everything for p in measured).values())


def nvlink_of_node():
    """Gb/s of NVLink per GPU of this node ({} without nvidia-smi or NVLink)."""
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "nvlink", "-s"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict((str(k), v) for k, v in link_speed.nvlink_gbps(out).items())


def say(text):
    sys.stdout.write("llmtrain: network check%s\n" % text)
    sys.stdout.flush()


def parser():
    top = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    top.add_argument("--out", required=True)
    top.add_argument("--gpus", type=int, default=0)
    top.add_argument("--min-fraction", type=float, default=0.5)
    top.add_argument("--bad-nodes-file")
    top.add_argument("--max-bytes", type=int, default=None,
                     help="the largest all-reduce (default 16 MiB on CPUs, 256 MiB on GPUs)")
    top.add_argument("--pair-bytes", type=int, default=None, help="the pair tests' size (default 1 MiB / 64 MiB)")
    top.add_argument("--budget", type=float, default=None, help="seconds per message size (default 0.15 on CPUs, 0.3 on GPUs)")
    top.add_argument("--timeout", type=int, default=60, help="seconds for the ranks to meet, and for each collective")
    top.add_argument("--job")
    top.add_argument("--restart", type=int, default=0)
    return top


def main(argv=None):
    started = time.monotonic()
    record_stop_notice()  # the step's shell ignored it until here (torchrun still does)
    args = parser().parse_args(argv)
    if args.max_bytes is None:
        args.max_bytes = (256 if args.gpus > 0 else 16) * 1024 * 1024
    if args.pair_bytes is None:
        args.pair_bytes = (64 if args.gpus > 0 else 1) * 1024 * 1024
    if args.budget is None:
        args.budget = 0.3 if args.gpus > 0 else 0.15
    try:
        return run(args, started=started)
    except Exception as exc:  # one line for the job log, not a traceback per rank
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        sys.stderr.write("llmtrain: network check: rank %s on %s: %s: %s\n" % (
            os.environ.get("RANK"), os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
            type(exc).__name__, detail[:300]))
        return 2
    finally:
        stop_recording_notices()


if __name__ == "__main__":
    raise SystemExit(main())
