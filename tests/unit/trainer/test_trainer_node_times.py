"""Per-node step times at cluster sizes this machine cannot run (the record, node_times.json), and
metrics.jsonl cut back to the step a run resumes from."""

import contextlib
import io
import json
import time
import types

import pytest
import torch
from trainer.clock import RunClock
from trainer.metrics import NODE_TIMES_FILE, RECORD_BYTES, SLOWEST_NODES, MetricsLog, NodeTimes
from trainer.train import Training

RANKS_PER_NODE = 8


def node_name(n, length):
    """A realistic Slurm node name of exactly `length` characters."""
    return f"gpu-h100-{n:05d}.rack{n // 32:03d}.train.cluster.example.org.internal"[:length].ljust(length, "x")


class Cluster:
    """The collectives of a job of `nodes` nodes x RANKS_PER_NODE ranks, as rank 0 sees them:
    gather_floats gives every rank's [work_s, wait_s] from times(rank)."""

    is_main, active = True, True

    def __init__(self, nodes, times):
        self.world_size, self.times = nodes * RANKS_PER_NODE, times

    def mean(self, tensor):
        return float(tensor)

    def gather_floats(self, values):
        assert len(values) == 2  # this rank's [work_s, wait_s]
        return [list(self.times(rank)) for rank in range(self.world_size)]


def training(nodes, times, out_dir, name_length=40, steps_per_record=10):
    """Training's state as Training.record reads it, on rank 0 of a CUDA job of `nodes` nodes,
    the last record `steps_per_record` steps ago."""
    cfg = types.SimpleNamespace(grad_accum=1, steps=604_800, warmup=2000, lr=3e-4, min_lr=3e-5)
    metrics = types.SimpleNamespace(lines=[])
    metrics.write = lambda record: metrics.lines.append(json.dumps(record) + "\n")
    clock = RunClock(0, prior_elapsed=123_456.789)
    clock.started, clock.last_time = 0.0, time.perf_counter() - 2.0
    return types.SimpleNamespace(
        cfg=cfg, dist=Cluster(nodes, times), node_names=[node_name(r // RANKS_PER_NODE, name_length)
                                                         for r in range(nodes * RANKS_PER_NODE)],
        wait_clock=types.SimpleNamespace(take=lambda: 0.5), node_times=NodeTimes(out_dir / NODE_TIMES_FILE),
        metrics=metrics, clock=clock, steps_per_record=steps_per_record,
        tokens_per_step=nodes * RANKS_PER_NODE * 8 * 4096, grad_norm=torch.tensor(0.123456),
        tokens_seen=1_234_567_890_123, device=torch.device("cuda"), flops_per_token=6e9, peak_flops=989e12,
        evaluate=lambda: 2.3456789012345, events=None, wandb=None)


def record(run, step, evaluate=True):
    """Training.record of `step` on run; returns the line it wrote."""
    run.clock.last_step = step - run.steps_per_record
    with contextlib.redirect_stdout(io.StringIO()):
        Training.record(run, step, torch.tensor(2.345678901234), evaluate)
    return run.metrics.lines[-1]


def slow_nodes_times(slow):
    """[work_s, wait_s] of a rank over 10 steps: 2.0 s of work, on the nodes in `slow` 3.0 s."""
    return lambda rank: (3.0, 0.1) if rank // RANKS_PER_NODE in slow else (2.0 + rank % RANKS_PER_NODE * 0.01, 1.1)


@pytest.mark.parametrize("nodes, name_length", [(8, 40), (2048, 40), (8192, 40), (2048, 64)])
def test_a_loss_record_stays_under_1_kb_at_any_node_count(tmp_path, nodes, name_length):
    slow = {nodes - 1, nodes // 2, 3}
    line = record(training(nodes, slow_nodes_times(slow), tmp_path, name_length), 604_700)
    assert len(line.encode()) <= RECORD_BYTES
    times = json.loads(line)["node_times"]
    assert times["count"] == nodes
    # a node is its slowest rank: 2.0 s + 7 x 0.01 s over 10 steps
    assert (times["median_work_ms"], times["median_wait_ms"]) == (207.0, 110.0)
    slowest = list(times["slowest"])
    assert 6 <= len(slowest) <= SLOWEST_NODES  # as many as fit: 8 for short names, 6 at 64 characters
    assert set(slowest[:3]) == {node_name(n, name_length) for n in slow}
    assert times["slowest"][slowest[0]] == {"work_ms": 300.0, "wait_ms": 10.0}


def test_node_times_json_holds_each_node_s_means_and_its_slow_records(tmp_path):
    run = training(4, lambda rank: (2.0, 1.0), tmp_path)
    record(run, 10)
    run.dist.times = slow_nodes_times({1})  # node 1 is slow: 300 ms against a median of 207
    record(run, 20, evaluate=False)
    run.dist.times = slow_nodes_times({1, 2})  # median (207 + 300) / 2: 1.2 x 253.5 is not exceeded
    record(run, 30)
    saved = json.loads((tmp_path / NODE_TIMES_FILE).read_text())
    names = [node_name(n, 40) for n in range(4)]
    assert {k: v for k, v in saved.items() if k != "nodes"} == {
        "version": 1, "threshold": 0.2, "first_step": 10, "step": 30, "records": 3}
    assert list(saved["nodes"]) == names
    assert saved["nodes"][names[1]] == {"records": 3, "work_ms": round((200 + 300 + 300) / 3, 2),
                                        "wait_ms": round((100 + 10 + 10) / 3, 2), "slow_records": 1,
                                        "last_work_ms": 300.0}
    assert saved["nodes"][names[0]] == {"records": 3, "work_ms": round((200 + 207 + 207) / 3, 2),
                                        "wait_ms": round((100 + 110 + 110) / 3, 2), "slow_records": 0,
                                        "last_work_ms": 207.0}
    assert saved["nodes"][names[2]]["slow_records"] == 0


def save(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def test_a_resumed_run_s_node_times_count_only_the_records_up_to_its_checkpoint(tmp_path):
    run = training(2, slow_nodes_times({0}), tmp_path)
    record(run, 10)
    checkpointed = torch.load(io.BytesIO(save(run.node_times.state)), weights_only=True)  # as a checkpoint holds it
    record(run, 20)
    resumed = NodeTimes(tmp_path / NODE_TIMES_FILE, checkpointed)
    resumed.write()  # at start-up, as metrics.jsonl is cut back
    saved = json.loads((tmp_path / NODE_TIMES_FILE).read_text())
    assert (saved["first_step"], saved["step"], saved["records"]) == (10, 10, 1)
    assert saved["nodes"][node_name(0, 40)]["records"] == 1
    NodeTimes(tmp_path / NODE_TIMES_FILE).write()  # a fresh run, or a checkpoint without node times
    assert not (tmp_path / NODE_TIMES_FILE).exists()


def metrics_file(path, steps):
    """A metrics.jsonl of `steps` steps as the trainer writes it (a loss record at every step, a
    checkpoint event every 100); returns its lines."""
    lines = [json.dumps({"event": "start", "step": 0, "total_steps": steps}) + "\n"]
    for step in range(1, steps + 1):
        lines.append(json.dumps({"step": step, "total_steps": steps, "loss": 2.0 + 1.0 / step, "lr": 3e-4,
                                 "grad_norm": 0.5, "tokens_seen": step * 65536, "tokens_per_s": 123456.7,
                                 "elapsed_s": step * 0.5, "eta_s": 1000.0,
                                 "node_times": {"count": 2048, "median_work_ms": 210.5, "median_wait_ms": 12.25,
                                                "slowest": {node_name(n, 40): {"work_ms": 250.0, "wait_ms": 1.5}
                                                            for n in range(5)}}}) + "\n")
        if step % 100 == 0:
            lines.append(json.dumps({"event": "checkpoint", "step": step, "path": f"checkpoints/step_{step:06d}.pt"})
                         + "\n")
    path.write_text("".join(lines))
    return lines


def steps_of(lines):
    return [json.loads(line)["step"] for line in lines]


@pytest.mark.parametrize("cut_short", [False, True])
def test_resume_keeps_exactly_the_records_up_to_its_step_and_counts_the_rest(tmp_path, cut_short):
    path = tmp_path / "metrics.jsonl"
    lines = metrics_file(path, 6000)
    if cut_short:  # killed while writing a record
        with open(path, "a") as f:
            f.write('{"step": 6001, "total_steps": 6000, "lo')
    assert path.stat().st_size > 4_000_000
    log = MetricsLog(path, 5000)
    kept = [line for line in lines if json.loads(line)["step"] <= 5000]
    assert path.read_text() == "".join(kept)  # the checkpoint event of step 5000 is kept with its record
    assert log.dropped == len(lines) - len(kept) + cut_short
    log.write({"event": "resume", "step": 5000})
    log.file.close()
    assert steps_of(path.read_text().splitlines()) == steps_of(kept) + [5000]


def test_a_complete_record_without_its_newline_is_dropped_as_cut_short(tmp_path):
    """The line could not take the next record without being joined to it."""
    path = tmp_path / "metrics.jsonl"
    lines = metrics_file(path, 10)
    path.write_text("".join(lines).rstrip("\n"))
    log = MetricsLog(path, 10)
    log.file.close()
    assert (path.read_text(), log.dropped) == ("".join(lines[:-1]), 1)


def test_a_fresh_start_drops_every_record_and_a_resume_with_nothing_after_its_step_changes_nothing(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = metrics_file(path, 300)
    log = MetricsLog(path, 300)
    log.file.close()
    assert (path.read_text(), log.dropped) == ("".join(lines), 0)
    log = MetricsLog(path, 0)
    log.file.close()
    assert (path.read_text(), log.dropped) == ("", len(lines))
