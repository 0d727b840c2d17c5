"""plugins/module_utils/rundir/run_report.py: report.md and loss.png from a fetched run directory."""

import html
import json
import os
import re

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def loss_record(step, loss, **extra):
    record = {"step": step, "total_steps": 100, "loss": loss, "lr": 1e-3, "tokens_seen": step * 4096,
              "tokens_per_s": 1000.0 + step, "elapsed_s": step * 2.0, "eta_s": (100 - step) * 2.0,
              "nodes": {"slurm-worker-%d" % n: {"work_ms": 180.0 + n, "wait_ms": 20.0 - n} for n in range(3)}}
    record.update(extra)
    return record


def metrics_records():
    """A run preempted at step 40 and resumed there, with val losses at 50 and 100."""
    records = [{"event": "start", "step": 0, "total_steps": 100, "world_size": 12, "device": "cuda:0",
                "params": 124439808, "tokens_per_step": 4096, "tokenizer": "bpe", "vocab_size": 50257}]
    records += [loss_record(step, 5.0 - step / 40) for step in (10, 20, 30, 40)]
    records += [{"event": "checkpoint", "step": 40, "path": "/ws/run/checkpoints/step_40.pt"},
                {"event": "preempted", "step": 40, "signal": "SIGUSR2"},
                {"event": "resume", "step": 40, "total_steps": 100, "world_size": 12, "device": "cuda:0",
                 "params": 124439808, "tokens_per_step": 4096, "checkpoint": "/ws/run/checkpoints/step_40.pt",
                 "discarded_records": 0}]
    records += [loss_record(step, 5.0 - step / 40, mfu=0.40 + step / 1000) for step in range(50, 101, 10)]
    records[-6]["val_loss"] = 3.9   # step 50
    records[-1]["val_loss"] = 2.6   # step 100
    records += [{"event": "checkpoint", "step": 100, "path": "/ws/run/checkpoints/step_100.pt"},
                {"event": "done", "step": 100, "tokens_seen": 409600, "elapsed_s": 3723.4}]
    return records


FACTS = {
    "run_name": "gpt2-124m",
    "workspace": "/home/user/llmtrain",
    "cluster": {"partition": "gpu", "slurm_version": "23.11.4",
                "nodes": ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"],
                "gpus_per_node": 4, "procs_per_node": 4},
    "node_check_table": ["NODE            GPUS(ASKED/STEP/SMI/TORCH/SLURM)  VERDICT",
                         "slurm-worker-0  4/4/4/4/4                         ok"],
    "node_check_time": "2026-01-01T09:58:00Z", "node_check_job": "102", "gpu_policy": "strict",
    "network": {"job_id": "102", "time": "2026-01-01T09:58:20Z", "backend": "nccl", "ranks": 8, "busbw": 42.5,
                "latency_us": 21.4, "limit": 50.0, "fraction": 0.85, "min_fraction": 0.5, "seconds": 6.1,
                "slow": {}, "slow_fabric": None,
                "nodes": [{"node": "slurm-worker-0", "interfaces": ["mlx5_0:1", "mlx5_1:1"], "gbps": 400.0,
                           "busbw": 42.5, "fraction": 0.85, "latency_us": 21.4},
                          {"node": "slurm-worker-1", "interfaces": ["mlx5_0:1"], "gbps": 400.0,
                           "busbw": 42.5, "fraction": 0.85, "latency_us": 21.4}]},
    "excluded_nodes": {"slurm-worker-7": "named in slurm_exclude_nodes",
                       "slurm-worker-3": "no network interface ib0 on slurm-worker-3 (it has eth0, lo) "
                                         "(node check of job 99, 2026-01-01T09:00:00Z)"},
    "env": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "ib7s", "UCX_NET_DEVICES": "ib7s400p0:1,ib7s400p1:1"},
    "jobs": [{"kind": "prepare", "job_id": "101", "state": "COMPLETED", "exit_code": 0, "elapsed": "00:01:10",
              "nodelist": "slurm-worker-0", "start_time": "2026-01-01T10:00:00",
              "end_time": "2026-01-01T10:01:10", "restarts": 0},
             {"kind": "train", "job_id": "102", "state": "COMPLETED", "exit_code": 0, "elapsed": "01:02:03",
              "nodelist": "slurm-worker-[0-2]", "restarts": 1}],
    "checkpoint": {"path": "/home/user/llmtrain/gpt2-124m/checkpoints/step_100.pt", "step": 100},
    "model": {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024},
}


def make_run(tmp_path, records=None, facts=None, samples=None):
    run_dir = tmp_path / "runs" / "gpt2-124m"
    run_dir.mkdir(parents=True)
    if records is not None:
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if facts is not None:
        (run_dir / "facts.json").write_text(json.dumps(facts))
    if samples is not None:
        (run_dir / "samples.txt").write_text(samples)
    return run_dir


def report_of(run_dir):
    report_path, _plot, _warnings = run_report.write_report(str(run_dir))
    assert report_path == str(run_dir / "report.md")
    return (run_dir / "report.md").read_text()


def test_full_report(tmp_path):
    run_dir = make_run(tmp_path, metrics_records(), FACTS, "PROMPT: The history of\n| a `pipe` <b>\n")
    (run_dir / "starts.jsonl").write_text(json.dumps(dict(
        job_id="44", start=1, nodes="slurm-worker-[0-2]", left="", time="2026-01-01T10:00:00Z", node_count=3)) + "\n"
        + json.dumps(dict(event="end", job_id="44", start=1, how="finished", exit_code=0, time="2026-01-01T10:01:10Z"))
        + "\n")
    report = report_of(run_dir)
    assert report.startswith("# Run gpt2-124m\n")
    for expected in [
        "- Status: finished",
        "- Steps: 100 of 100",
        "- Final train loss: 2.5000 (step 100)",
        "- Train loss fell from 4.7500 (step 10) to 2.5000 (step 100)",
        "- Best val loss: 2.6000 (step 100)",
        "- Final val loss: 2.6000 (step 100)",
        "- Tokens seen: 409,600",
        "- Training time: 1h 02m 03s",
        "- Median throughput: 1,055 tokens/s",
        "- Median MFU: 47.5%",
        "- Preempted at step 40 (SIGUSR2)",
        "- Resumed at step 40",
        "![loss](loss.png)",
        "- Partition: gpu",
        "- Nodes: slurm-worker-0, slurm-worker-1, slurm-worker-2 (3)",
        "- GPUs per node: 4",
        "- World size: 12 ranks on cuda:0",
        "- Parameters: 124,439,808",
        "- Tokenizer: bpe, vocabulary 50,257",
        "- n_embd: 768",
        "## Node check\n\nJob 102 checked its nodes at 2026-01-01T09:58:00Z (GPUs asked/seen by the step/"
        "nvidia-smi/torch/registered by Slurm; GPU policy strict):\n\n```\n"
        "NODE            GPUS(ASKED/STEP/SMI/TORCH/SLURM)  VERDICT\n"
        "slurm-worker-0  4/4/4/4/4                         ok\n```\n",
        "Nodes the run keeps off (remove them from `bad_nodes.json` in the run directory, or from "
        "`slurm_exclude_nodes`, once they are repaired):\n\n| Node | Why |\n|---|---|\n"
        "| slurm-worker-3 | no network interface ib0 on slurm-worker-3 (it has eth0, lo) (node check of job 99, "
        "2026-01-01T09:00:00Z) |\n| slurm-worker-7 | named in slurm_exclude_nodes |\n\n## Step time",
        "| Variable | Value |",
        "| NCCL_IB_HCA | ib7s |",
        "| UCX_NET_DEVICES | ib7s400p0:1,ib7s400p1:1 |",
        "| slurm-worker-2 | 182.0 | 18.0 | 1.01x | 0 of 10 records |\n\n## NCCL",
        "| Job | Kind | State | Exit | Elapsed | Nodes | Restarts |",
        "| 102 | train | COMPLETED | 0 | 01:02:03 | slurm-worker-\\[0-2\\] | 1 |",
        "- Path: /home/user/llmtrain/gpt2-124m/checkpoints/step_100.pt",
        "```\nPROMPT: The history of\n| a `pipe` <b>\n```",
    ]:
        assert expected in report, expected
    # the env table is sorted, so the report does not depend on dict order
    assert report.index("NCCL_IB_HCA") < report.index("NCCL_SOCKET_IFNAME") < report.index("UCX_NET_DEVICES")
    assert "not recorded" not in report


def test_a_node_check_without_excluded_nodes(tmp_path):
    facts = dict(FACTS, excluded_nodes={}, node_check_job=None, node_check_time=None, gpu_policy=None)
    report = report_of(make_run(tmp_path, metrics_records(), facts))
    section = report[report.index("## Node check"):report.index("## Step time per node")]
    assert section.startswith("## Node check\n\nJob ") and "slurm-worker-0  4/4/4/4/4" in section
    assert "keeps off" not in section


def test_excluded_nodes_without_a_node_check(tmp_path):
    facts = dict(FACTS, node_check_table=[], excluded_nodes={"slurm-worker-7": "named in slurm_exclude_nodes"})
    report = report_of(make_run(tmp_path, metrics_records(), facts))
    section = report[report.index("## Node check"):report.index("## Step time per node")]
    assert section.startswith("## Node check\n\nNode check: not recorded.\n\nNodes the run keeps off")
    assert "| slurm-worker-7 | named in slurm_exclude_nodes |" in section


def test_the_network_section_per_node_against_the_link(tmp_path):
    report = report_of(make_run(tmp_path, metrics_records(), FACTS))
    section = report[report.index("## Network"):report.index("## Jobs")]
    assert section.split("\n")[2] == (
        "Job 102 measured its fabric at 2026-01-01T09:58:20Z over 8 rank(s) with nccl: all-reduce bus bandwidth "
        "42.5 GB/s, 85% of the slowest link's 50 GB/s; small-message latency 21 us; the check took 6.1 s. Below 50% "
        "of the link a node is slow.")
    assert "| Node | Interface | Link speed | Bus bandwidth | Of the link | Latency | Verdict |" in section
    assert "| slurm-worker-0 | mlx5_0:1, mlx5_1:1 | 400 Gb/s | 42.5 GB/s | 85% | 21 us | ok |" in section
    assert "slow" not in section.split("Below")[1].split("\n", 1)[1].lower()


def test_a_slow_node_on_links_with_no_speed(tmp_path):
    network = {"job_id": "7", "time": "t", "backend": "gloo", "ranks": 3, "busbw": 0.0021, "latency_us": 2600.0,
               "limit": None, "fraction": None, "min_fraction": 0.5, "seconds": 3.2, "slow_fabric": None,
               "slow": {"slurm-worker-2": "0.0021 GB/s with its ring neighbours, 0% of the other nodes' 0.61 GB/s"},
               "nodes": [{"node": "slurm-worker-0", "interfaces": ["eth0"], "gbps": None, "busbw": 0.61,
                          "fraction": None, "latency_us": 150.0},
                         {"node": "slurm-worker-2", "interfaces": ["eth0"], "gbps": None, "busbw": 0.0021,
                          "fraction": None, "latency_us": 4100.0}]}
    report = report_of(make_run(tmp_path, metrics_records(), dict(FACTS, network=network)))
    section = report[report.index("## Network"):report.index("## Jobs")]
    assert "all-reduce bus bandwidth 0.0021 GB/s (the links report no speed: the nodes are judged against each other)" \
        in section
    assert "| slurm-worker-2 | eth0 | unknown (the link reports none) | 0.0021 GB/s | - | 4100 us | SLOW |" in section
    assert section.rstrip().endswith("- slurm-worker-2: 0.0021 GB/s with its ring neighbours, 0% of the other nodes' "
                                     "0.61 GB/s")
    # a run without the check says so
    report = report_of(make_run(tmp_path / "none", metrics_records(), dict(FACTS, network=None)))
    assert "Network check: not recorded (one node, pretrain_network_check=false" in report


def test_same_inputs_same_report(tmp_path):
    run_dir = make_run(tmp_path, metrics_records(), FACTS)
    assert report_of(run_dir) == report_of(run_dir)


def test_loss_png_is_a_real_image(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    run_dir = make_run(tmp_path, metrics_records(), FACTS)
    report_of(run_dir)
    png = run_dir / "loss.png"
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    pixels = image.imread(str(png))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.shape[2] in (3, 4)
    assert not [name for name in os.listdir(run_dir) if name.startswith(".")]  # no temp files left


def test_missing_facts_say_not_recorded(tmp_path):
    records = [{k: v for k, v in r.items() if k != "nodes"} for r in metrics_records()]  # one node's run
    run_dir = make_run(tmp_path, records, {"run_name": "gpt2-124m", "cluster": {"partition": "gpu"},
                                           "checkpoint": None})
    report = report_of(run_dir)
    assert "- Partition: gpu" in report
    assert "- Nodes: not recorded" in report
    assert "## Node check\n\nNode check: not recorded.\n\n## Step time" in report  # and no excluded nodes table
    assert ("Step time per node: not recorded (one node, no `node_times.json` in the run directory, or a script whose "
            "metrics carry no `nodes`).") in report
    assert "Environment: not recorded." in report
    assert "Jobs: not recorded." in report
    assert "No checkpoint was written." in report
    assert "Samples: not recorded." in report
    assert "- Final train loss: 2.5000 (step 100)" in report


def test_no_facts_file_and_odd_values(tmp_path):
    records = metrics_records()[:5]  # start and 4 losses: no val loss, no MFU, not done
    run_dir = make_run(tmp_path, records)
    (run_dir / "metrics.jsonl").write_text((run_dir / "metrics.jsonl").read_text() + '{"step": 5, "loss"\n')
    report = report_of(run_dir)
    assert report.startswith("# Run gpt2-124m\n")  # named after the run directory
    assert "- Status: stopped before the end" in report
    assert "- Steps: 40 of 100" in report
    assert "- Val loss: not recorded" in report
    assert "MFU" not in report
    assert "1 line(s) of `metrics.jsonl` were not records" in report
    assert "Cluster: not recorded." in report
    assert "Checkpoint: not recorded." in report


def test_a_script_of_your_own_has_finished_when_its_last_record_is_at_its_total(tmp_path):
    """Its log's records (source log) carry no done event: the last one at the total is the end."""
    lines = [dict(step=s, total_steps=30, loss=5.0 - s / 100.0, source="log") for s in (10, 20, 30)]
    assert "- Status: finished" in report_of(make_run(tmp_path / "a", lines))
    assert "- Status: stopped before the end" in report_of(make_run(tmp_path / "b", lines[:2]))


def test_recoveries_list_each_start_after_the_first(tmp_path):
    records = metrics_records()
    records.insert(-2, {"event": "resume", "step": 90, "checkpoint": "/ws/run/checkpoints/step_90.pt",
                        "discarded_records": 1, "steps_lost": 3})
    # a restart inside the job (pretrain_restarts_in_job): a resume, or a start where no checkpoint was yet
    records.insert(-2, {"event": "resume", "step": 100, "checkpoint": "/ws/run/checkpoints/step_100.pt",
                        "discarded_records": 2, "steps_lost": 5, "restart_in_job": 1})
    records.insert(-2, {"event": "start", "step": 0, "restart_in_job": 2})
    report = report_of(make_run(tmp_path, records, FACTS))
    recoveries = report.split("## Recoveries\n", 1)[1].split("\n## ", 1)[0]
    assert "| 2 | stopped at step 40 with a checkpoint | 40 | step_40.pt | 0 |" in recoveries
    assert "| 3 | crash, hang or lost node | 90 | step_90.pt | 3 | 1 | - |" in recoveries
    assert "| 4 | a failed rank: restart 1 inside the job, on the same nodes | 100 | step_100.pt | 5 | 2 | - |" in recoveries
    assert "| 5 | a failed rank: restart 2 inside the job, on the same nodes | 0 | - | - | 0 | - |" in recoveries
    # with the run's starts.jsonl: each row names the nodes of its start, and those the start before had
    run = make_run(tmp_path / "s", [dict(r, job_id="45", start=2) if r.get("event") == "resume" and r["step"] == 90
                                    else r for r in records], FACTS)
    with open(os.path.join(run, "starts.jsonl"), "w") as handle:
        handle.write(json.dumps(dict(job_id="45", start=1, nodes="w[0-2]", left="")) + "\n")
        handle.write(json.dumps(dict(job_id="45", start=1, event="start", step=0)) + "\n")
        handle.write(json.dumps(dict(job_id="45", start=2, nodes="w[0,2-3]", left="w1")) + "\n")
        handle.write(json.dumps(dict(job_id="45", start=2, event="resume", step=90)) + "\n{cut sho")
    recoveries = report_of(run).split("## Recoveries\n", 1)[1].split("\n## ", 1)[0]
    assert "| 3 | crash, hang or lost node | 90 | step_90.pt | 3 | 1 | w\\[0,2-3\\] (without w1) |" in recoveries
    assert "| 2 | stopped at step 40 with a checkpoint | 40 | step_40.pt | 0 | 0 | - |" in recoveries
    plain = [r for r in metrics_records() if r.get("event") not in ("preempted", "resume")]
    assert "None: the run trained from its first start to its end in one go." in report_of(make_run(tmp_path / "b", plain))


def test_resources_used_are_each_starts_nodes_for_its_time_and_their_total(tmp_path):
    run = make_run(tmp_path, metrics_records(), dict(FACTS, cluster=dict(FACTS["cluster"], gpus_per_node=8)))
    lines = [dict(job_id="45", start=1, nodes="w[0-3]", left="", time="2026-01-01T10:00:00Z", node_count=4),
             dict(job_id="45", start=1, event="start", step=0),
             dict(event="end", job_id="45", start=1, how="requeued", exit_code=0, time="2026-01-01T11:30:00Z"),
             dict(job_id="45", start=2, nodes="w[0-2]", left="w3", time="2026-01-01T11:31:00Z", node_count=3),
             dict(event="end", job_id="45", start=2, how="finished", exit_code=0, time="2026-01-01T12:31:00Z"),
             dict(job_id="44", start=1, nodes="w[0-3]", left="", time="2025-12-31T10:00:00Z"),  # no node count: before
             dict(job_id="46", start=1, nodes="w[0-3]", left="", time="2026-01-02T08:00:00Z", node_count=4)]  # running
    with open(os.path.join(run, "starts.jsonl"), "w") as handle:
        handle.write("".join(json.dumps(line) + "\n" for line in lines) + "{cut sho")
    report = report_of(run)
    section = report.split("## Resources used\n\n", 1)[1].split("\n## ", 1)[0]
    assert section.splitlines()[0] == "Source: the run's own start and end lines (no accounting was read for this report)."
    assert section.splitlines()[4:9] == [
        "| Job | Start | Nodes | Began (UTC) | Hours | Node-hours | GPU-hours |", "|---|---|---|---|---|---|---|",
        "| 45 | 1 | 4 | 2026-01-01 10:00 | 1.50 | 6.00 | 48.00 |", "| 45 | 2 | 3 | 2026-01-01 11:31 | 1.00 | 3.00 | 24.00 |",
        "| 46 | 1 | 4 | 2026-01-02 08:00 | no end line yet | 0.00 | 0.00 |"]
    assert section.endswith("Total: 9.00 node-hours, 72.00 GPU-hours over 3 start(s).\n")
    assert report_of(run) == report  # the report holds no time of its own
    assert "Resources: not recorded" in report_of(make_run(tmp_path / "none", metrics_records(), FACTS))


def test_resources_used_are_sacct_s_where_the_collect_step_read_them_and_the_other_jobs_apart(tmp_path):
    start = dict(job_id="45", state="REQUEUED", start="2026-01-01T10:00:00", seconds=5400, nodes=4, cpus=256, gpus=32,
                 node_hours=6.0, cpu_hours=384.0, gpu_hours=48.0)
    ledger = dict(source="sacct", missing=[], train=dict(
        count=3, node_hours=9.5, cpu_hours=608.0, gpu_hours=76.0,
        starts=[start, dict(start, state="COMPLETED|x", start="2026-01-01T11:31:00", seconds=3600, nodes=3, cpus=192,
                            gpus=24, node_hours=3.0, cpu_hours=192.0, gpu_hours=24.0)]),
        others=[dict(kind="data", job_id="40", starts=1, node_hours=0.25, cpu_hours=2.0, gpu_hours=0.0)])
    run = make_run(tmp_path, metrics_records(), dict(FACTS, ledger=ledger))
    (run / "starts.jsonl").write_text(json.dumps(dict(job_id="45", start=1, nodes="w[0-3]", left="", node_count=4,
                                                      time="2026-01-01T10:00:00Z")) + "\n")
    section = report_of(run).split("## Resources used\n\n", 1)[1].split("\n## ", 1)[0].splitlines()
    assert section[0].startswith("Source: sacct (Slurm's accounting)")
    assert section[2:7] == [
        "The newest 2 of 3 starts:", "",
        "| Job | State | Began | Hours | Nodes | CPUs | GPUs | Node-hours | CPU-hours | GPU-hours |",
        "|---|---|---|---|---|---|---|---|---|---|",
        "| 45 | REQUEUED | 2026-01-01 10:00 | 1.50 | 4 | 256 | 32 | 6.00 | 384.00 | 48.00 |"]
    assert section[7] == "| 45 | COMPLETED\\|x | 2026-01-01 11:31 | 1.00 | 3 | 192 | 24 | 3.00 | 192.00 | 24.00 |"
    assert "Total: 9.50 node-hours, 608.00 CPU-hours, 76.00 GPU-hours over 3 start(s) (sacct)." in section
    assert "The run's own start and end lines (starts.jsonl) say:" in section
    assert section[-3:] == ["| Kind | Job | Starts | Node-hours | CPU-hours | GPU-hours |", "|---|---|---|---|---|---|",
                            "| data | 40 | 1 | 0.25 | 2.00 | 0.00 |"]
    without = report_of(make_run(tmp_path / "b", metrics_records(), dict(FACTS, ledger=dict(
        source="usage.json", train=None, others=[], missing=["45"]))))
    assert ("Source: the run's own start and end lines (Slurm keeps no accounting here, or it does not know each "
            "training job).") in without


def test_preempted_run(tmp_path):
    records = metrics_records()[:7]  # up to the preempted event
    report = report_of(make_run(tmp_path, records, FACTS))
    assert "- Status: stopped before the end (last event: preempted at step 40)" in report


def test_table_cells_cannot_break_rows(tmp_path):
    facts = dict(FACTS, env={"NCCL_EXTRA": "a|b"})
    report = report_of(make_run(tmp_path, metrics_records(), facts))
    assert "| NCCL_EXTRA | a\\|b |" in report


def test_samples_with_a_fence_inside_stay_fenced(tmp_path):
    report = report_of(make_run(tmp_path, metrics_records(), FACTS, "code:\n```\nx\n```\n"))
    assert "````\ncode:\n```\nx\n```\n````" in report


def test_no_metrics_still_writes_a_report(tmp_path):
    run_dir = make_run(tmp_path, facts=FACTS)
    (run_dir / "loss.png").write_bytes(PNG_MAGIC)  # from an earlier attempt
    report_path, plot_path, warnings = run_report.write_report(str(run_dir))
    report = (run_dir / "report.md").read_text()
    assert "No metrics: `metrics.jsonl` was not fetched" in report
    assert "No plot: there are no loss records (see the summary)." in report
    assert "| 102 | train | COMPLETED |" in report
    assert not (run_dir / "loss.png").exists() and plot_path is None
    assert report_path == str(run_dir / "report.md")
    assert any("no loss records" in warning for warning in warnings), warnings


def test_metrics_without_loss_records(tmp_path):
    run_dir = make_run(tmp_path, metrics_records()[:1])
    report = report_of(run_dir)
    assert "No loss records in `metrics.jsonl`" in report
    assert "- World size: 12 ranks on cuda:0" in report


def test_facts_from_elsewhere_and_the_plot(tmp_path):
    run_dir = make_run(tmp_path, metrics_records(), samples="hello\n")
    facts = tmp_path / "elsewhere.json"
    facts.write_text(json.dumps(FACTS))
    report_path, plot_path, warnings = run_report.write_report(str(run_dir), str(facts))
    assert (report_path, plot_path, warnings) == (str(run_dir / "report.md"), str(run_dir / "loss.png"), [])
    report = (run_dir / "report.md").read_text()
    assert "- Partition: gpu" in report and "```\nhello\n```" in report
    assert (run_dir / "loss.png").read_bytes().startswith(PNG_MAGIC)


def test_facts_that_are_missing_or_unreadable_are_warned_of(tmp_path):
    run_dir = make_run(tmp_path, metrics_records())
    _report, _plot, warnings = run_report.write_report(str(run_dir), str(tmp_path / "missing.json"))
    assert warnings == ["%s does not exist; the report leaves its sections as not recorded" % (tmp_path / "missing.json")]
    (run_dir / "facts.json").write_text("[1]")
    _report, _plot, warnings = run_report.write_report(str(run_dir))
    assert warnings == ["%s holds no JSON object; the report leaves its sections as not recorded" % (run_dir / "facts.json")]
    assert "Cluster: not recorded." in (run_dir / "report.md").read_text()


def test_your_own_script_gets_its_section_not_the_reference_trainers_model(tmp_path):
    script = dict(path="/home/user/llmtrain/gpt2-124m/src/train.py", args=["config/small.py", "--max_iters=20"],
                  chdir="/home/user/llmtrain/gpt2-124m/src", source_dir="/home/me/nanolm", files=7,
                  digest="0a1b", checkpoints=["ckpt.pt"])
    facts = dict(FACTS, model=None, checkpoint=None, script=script)
    report = report_of(make_run(tmp_path, metrics_records(), facts))
    assert "## Model" not in report and "n_layer" not in report
    section = report[report.index("## Training script"):report.index("## Node check")]
    assert section.splitlines()[2:] == [
        "- Script: /home/user/llmtrain/gpt2-124m/src/train.py",
        "- Arguments: config/small.py --max_iters=20",
        "- Working directory: /home/user/llmtrain/gpt2-124m/src",
        "- Source: /home/me/nanolm (7 file(s), sha1 0a1b)", ""]
    checkpoint = report[report.index("## Checkpoint"):report.index("## Samples")]
    assert "In /home/user/llmtrain/checkpoints (LLMTRAIN_CHECKPOINT_DIR): ckpt.pt" in checkpoint
    facts["script"] = dict(script, checkpoints=[], source_dir=None, args=[])
    report = report_of(make_run(tmp_path / "again", metrics_records(), facts))
    assert "- Arguments: none" in report and "- Files deployed: 7 (sha1 0a1b)" in report
    assert "Your script left nothing in /home/user/llmtrain/checkpoints (LLMTRAIN_CHECKPOINT_DIR)." in report


def test_checkpoints_are_listed_as_the_trainer_lays_them_out(tmp_path):
    """A Hugging Face Trainer's checkpoint-N/ directories, in step order, with their steps; the
    final model files it leaves beside them are not checkpoints. Thousands of checkpoints make
    one line of the first and the newest."""
    names = ["checkpoint-100", "config.json", "checkpoint-20", "model.safetensors", "checkpoint-3", "runs"]
    script = dict(path="/w/train.py", args=[], chdir="/w", source_dir=None, files=1, digest="ab", checkpoints=names)
    report = report_of(make_run(tmp_path, metrics_records(), dict(FACTS, model=None, checkpoint=None, script=script)))
    section = report[report.index("## Checkpoint"):report.index("## Samples")].splitlines()
    assert section[2:4] == [
        "In /home/user/llmtrain/checkpoints (LLMTRAIN_CHECKPOINT_DIR): checkpoint-3 (step 3), checkpoint-20 (step 20), "
        "checkpoint-100 (step 100)",
        "Other entries there, not checkpoints: config.json, model.safetensors, runs"], section
    many = ["step-%d" % step for step in range(10, 50001, 10)] + ["epoch=0-step=7.ckpt", "last.ckpt"]
    script["checkpoints"] = many
    facts = dict(FACTS, model=None, checkpoint=None, script=script)
    report = report_of(make_run(tmp_path / "many", metrics_records(), facts))
    line = report[report.index("## Checkpoint"):report.index("## Samples")].splitlines()[2]
    assert line.startswith("In /home/user/llmtrain/checkpoints (LLMTRAIN_CHECKPOINT_DIR): epoch=0-step=7.ckpt (step 7), "
                           "step-10 (step 10), step-49920 (step 49920)"), line
    assert line.endswith("step-50000 (step 50000), last.ckpt, and 4990 more (5002 checkpoints)"), line


def test_step_time_per_node_names_the_slow_node(tmp_path):
    records = metrics_records()
    for record in records:
        if "loss" in record:  # slurm-worker-1 works 2x the others from step 70 on (4 of 10 records)
            slow = 2.0 if record["step"] >= 70 else 1.05
            record["nodes"] = {"slurm-worker-0": {"work_ms": 200.0, "wait_ms": 90.0 if slow > 1.5 else 10.0},
                               "slurm-worker-1": {"work_ms": 200.0 * slow, "wait_ms": 1.0},
                               "slurm-worker-2": {"work_ms": 190.0, "wait_ms": 100.0 if slow > 1.5 else 15.0}}
    run_dir = make_run(tmp_path, records, dict(FACTS, straggler_threshold=0.5), "")
    section = report_of(run_dir).split("## Step time per node\n", 1)[1].split("\n## ", 1)[0]
    assert "more than 50 % above that record's median node's work is slow in it (pretrain_straggler_threshold)" \
        in section
    # means over the 10 records: 6 at 210 ms, 4 at 400 ms; waits 6 at 10 or 15 ms, 4 at 90 or 100 ms
    assert "| slurm-worker-0 | 200.0 | 42.0 | 1.00x | 0 of 10 records |" in section, section
    assert "| slurm-worker-1 | 286.0 | 1.0 | 1.43x | 4 of 10 records |" in section, section
    assert "| slurm-worker-2 | 190.0 | 49.0 | 0.95x | 0 of 10 records |" in section, section
    for record in records:
        if "loss" in record:
            record["nodes"]["slurm-worker-1"]["work_ms"] = 500.0
    run_dir = make_run(tmp_path / "again", records, FACTS, "")
    assert "| slurm-worker-1 | 500.0 | 1.0 | 2.50x | 10 of 10 records (straggler) |" in report_of(run_dir)


# ---------------------------------------------------------------- untrusted text

SECTIONS = ["## Summary", "## Loss", "## Cluster", "## Model", "## Node check", "## Step time per node",
            "## NCCL / UCX / Gloo environment", "## Network", "## Jobs", "## Resources used", "## Hangs", "## Checkpoint", "## Samples"]
FORGED = "2\n\n## Summary\n- Status: finished <script>alert(1)</script>"


def headings(report):
    """The lines that CommonMark could read as an ATX heading (up to 3 spaces, then #)."""
    return [line for line in report.splitlines() if line.lstrip(" ").startswith("#") and not line.startswith("    ")]


def shown(markdown):
    """What a reader sees of escaped inline text: backslash escapes and entities resolved."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown))


def with_script(facts, **script):
    return dict(facts, model=None, checkpoint=None, script=dict(
        dict(path="/ws/src/train.py", args=[], chdir="/ws/src", files=1, digest="0a1b", checkpoints=[]), **script))


# Each case: (records, facts) -> records, facts, lines report.md must hold (the last one shows the value), and
# the value as a reader sees it, its line breaks made spaces and its control characters dropped.

def forged_preemption(records, facts):
    return records[:6] + [{"event": "preempted", "step": FORGED, "signal": "SIGUSR2"}], facts, [
        "- Status: stopped before the end (last event: preempted at step 2  \\#\\# Summary - Status: finished "
        "&lt;script&gt;alert(1)&lt;/script&gt;)",
        "- Preempted at step 2  \\#\\# Summary - Status: finished &lt;script&gt;alert(1)&lt;/script&gt; (SIGUSR2)"], \
        "2  ## Summary - Status: finished <script>alert(1)</script>"


def script_signal(records, facts):
    records[6]["signal"] = "<script>alert(1)</script>\r## Forged"
    return records, facts, ["- Preempted at step 40 (&lt;script&gt;alert(1)&lt;/script&gt; \\#\\# Forged)"], \
        "<script>alert(1)</script> ## Forged"


def line_breaks_in_an_event(records, facts):
    records[0].update(device="cuda:0\r## Forged\u2028## Also\x85x\x00y", world_size="12\n## Forged")
    # an event whose name holds a line break is no event the report knows: it shows nowhere
    records.insert(1, {"event": "preempted\n## Forged event", "step": 5})
    return records, facts, ["- World size: 12 \\#\\# Forged ranks on cuda:0 \\#\\# Forged \\#\\# Also xy"], \
        "cuda:0 ## Forged ## Also xy"


def checkpoint_name(records, facts):
    facts = with_script(facts, checkpoints=["step_000100.pt", "x`\n## Forged\n`<script>.pt"])
    return records, facts, ["In /home/user/llmtrain/checkpoints (LLMTRAIN_CHECKPOINT_DIR): step_000100.pt (step 100)",
                            "Other entries there, not checkpoints: x\\` \\#\\# Forged \\`&lt;script&gt;.pt"], \
        "x` ## Forged `<script>.pt"


def node_name(records, facts):
    for record in records:
        if "loss" in record:
            record["nodes"]["evil|node\r\n## X <b>x</b>"] = {"work_ms": 181.0, "wait_ms": 19.0}
    return records, facts, ["| evil\\|node  \\#\\# X &lt;b&gt;x&lt;/b&gt; | 181.0 | 19.0 | 1.00x | 0 of 10 records |"], \
        "evil|node  ## X <b>x</b>"


def run_name(records, facts):
    return records, dict(facts, run_name="gpt2\n## Forged <script>x</script>"), [
        "# Run gpt2 \\#\\# Forged &lt;script&gt;x&lt;/script&gt;\n\n## Summary\n"], "gpt2 ## Forged <script>x</script>"


def slow_reason(records, facts):
    network = dict(facts["network"], slow={"slurm-worker-1": "<img src=x onerror=alert(1)> [a](b) *slow*\n## X"})
    return records, dict(facts, network=network), [
        "| slurm-worker-1 | mlx5_0:1 | 400 Gb/s | 42.5 GB/s | 85% | 21 us | SLOW |",
        "- slurm-worker-1: &lt;img src=x onerror=alert(1)&gt; \\[a\\](b) \\*slow\\* \\#\\# X"], \
        "<img src=x onerror=alert(1)> [a](b) *slow* ## X"


HOSTILE = [forged_preemption, script_signal, line_breaks_in_an_event, checkpoint_name, node_name, run_name,
           slow_reason]


def sections_of(facts):
    """The report's sections: the training script's instead of the model's for a script of your own,
    and the recoveries from the reference trainer's events."""
    found = ["## Training script" if s == "## Model" and "script" in facts else s for s in SECTIONS]
    if "script" not in facts:
        found.insert(found.index("## Resources used") + 1, "## Recoveries")
    return found


def hostile_report(tmp_path, case):
    records, facts, expected, value = case(metrics_records(), json.loads(json.dumps(FACTS)))
    return report_of(make_run(tmp_path, records, facts)), facts, expected, value


@pytest.mark.parametrize("case", HOSTILE, ids=[case.__name__ for case in HOSTILE])
def test_text_from_the_jobs_files_cannot_forge_the_report(tmp_path, case):
    report, facts, expected, value = hostile_report(tmp_path, case)
    found = headings(report)
    assert found[0].startswith("# Run ") and found[1:] == sections_of(facts), found
    assert "<" not in report  # no raw HTML anywhere (the report has no samples here, whose fence may show it)
    assert "\r" not in report and "\x00" not in report and "\x85" not in report and "\u2028" not in report
    for line in expected:
        assert line in report, (line, report)
    assert value in shown(expected[-1])  # and the reader still sees the value


@pytest.mark.parametrize("case", HOSTILE, ids=[case.__name__ for case in HOSTILE])
def test_a_commonmark_renderer_reads_the_values_as_plain_text(tmp_path, case):
    markdown_it = pytest.importorskip("markdown_it")
    report, facts, _expected, value = hostile_report(tmp_path, case)
    tokens = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(report)
    found = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert found[1:] == [s[3:] for s in sections_of(facts)], found
    assert found[0].startswith("Run ") and "\n" not in found[0]
    inline = [child for t in tokens if t.type == "inline" for child in t.children]
    kinds = {child.type for child in inline}
    assert not kinds & {"html_inline", "link_open", "em_open", "strong_open", "s_open", "hardbreak"}, kinds
    assert not {t.type for t in tokens} & {"html_block", "blockquote_open", "hr", "code_block"}
    assert {child.attrGet("src") for child in inline if child.type == "image"} <= {"loss.png"}
    assert {child.content for child in inline if child.type == "code_inline"} <= {
        "metrics.jsonl", "nodes", "bad_nodes.json", "slurm_exclude_nodes"}
    # the reader sees the value whole, in one line or one table cell (a | that split the row would cut it)
    texts = ["".join(c.content for c in t.children if c.type in ("text", "text_special")) for t in tokens
             if t.type == "inline"]
    assert any(value in line for line in texts), (value, texts)


def test_a_number_is_shown_as_a_number_and_a_string_that_looks_like_one_as_text(tmp_path):
    records = metrics_records()
    records[0].update(world_size="12", params="124439808")
    records[6].update(step="2")  # the preemption
    records[7].update(step="40*")  # the resume
    records.insert(8, {"event": "resume", "step": 40.0})
    records.insert(9, {"event": "resume", "step": True})
    report = report_of(make_run(tmp_path, records, FACTS))
    assert "- Preempted at step 2 (SIGUSR2)" in report
    assert "- Resumed at step 40\\*\n- Resumed at step 40.0\n- Resumed at step True\n" in report
    assert "- World size: 12 ranks on cuda:0" in report
    assert "- Parameters:" not in report  # a string is not counted as parameters
    assert run_report.md("2") == "2" and run_report.md(2) == "2" and run_report.md("1e+3") == "1e\\+3"
    assert run_report.md(1e20) == "1e+20" and run_report.md(True) == "True" and run_report.md(-2.5) == "-2.5"


@pytest.mark.parametrize("value, expected", [
    ("slurm-worker-0", "slurm-worker-0"),
    ("step_000100.pt", "step_000100.pt"),
    ("NCCL_IB_HCA", "NCCL_IB_HCA"),
    ("2026-01-01T09:58:00Z", "2026-01-01T09:58:00Z"),
    ("_x_ __y__ a__b x_ _", "\\_x\\_ \\_\\_y\\_\\_ a\\_\\_b x\\_ \\_"),
    ("a\rb\nc\r\nd\u2028e\u2029f\x0bg\x0ch\x85i", "a b c  d e f g h i"),
    ("a\x00b\x1bc\x7fd\x9be\u202ef\tg", "abcdef\tg"),
    ("<b>&amp;</b>", "&lt;b&gt;&amp;amp;&lt;/b&gt;"),
    ("\\`*_{}[]()#+-.!|~$^", "\\\\\\`\\*\\_\\{\\}\\[\\]()\\#\\+-.\\!\\|\\~\\$\\^"),
    ("[x](javascript:alert(1)) ![i](y)", "\\[x\\](javascript:alert(1)) \\!\\[i\\](y)"),
    ("", "not recorded"),
    (None, "not recorded"),
    (["a|b", "c\nd"], "a\\|b, c d"),
])
def test_md_escapes_inline_text(value, expected):
    assert run_report.md(value) == expected
    if isinstance(value, str) and value:
        # what a reader sees: the value, line breaks as spaces, controls gone
        breaks, controls = "\r\n\u2028\u2029\x0b\x0c\x85", "\x00\x1b\x7f\x9b\u202e"
        assert shown(expected) == "".join(" " if c in breaks else c for c in value.replace("\r\n", "\r ")
                                          if c not in controls).replace("\r ", "  ")


def test_a_fence_cannot_be_closed_from_inside(tmp_path):
    samples = "a\n````\n   ```\n~~~\n    `````\r\n## Forged\x00\x1b[31m\x85\n"
    report = report_of(make_run(tmp_path, metrics_records(), FACTS, samples))
    assert report.endswith("## Samples\n\n``````\na\n````\n   ```\n~~~\n    `````\n## Forged[31m\n``````\n")
    try:
        from markdown_it import MarkdownIt  # pylint: disable=import-outside-toplevel
    except ImportError:
        pass
    else:  # a CommonMark renderer sees one code block there, the whole body in it
        tokens = MarkdownIt("commonmark").parse(report)
        assert tokens[-1].type == "fence" and tokens[-1].content == samples.replace("\r", "").replace("\x00", "") \
            .replace("\x1b", "").replace("\x85", "")
        assert tokens[-2].type == "heading_close" and tokens[-3].content == "Samples"
    check = ["NODE  VERDICT", "x```\x00", "~~~~"]
    lines = run_report.node_check_lines(dict(FACTS, node_check_table=check))
    assert lines[2:5] == ["````", "NODE  VERDICT\nx```\n~~~~", "````"]


def test_numbers_that_are_not_finite_and_a_dollar_in_the_name_still_give_a_report(tmp_path):
    records = metrics_records()
    records[-1].update(step=float("inf"), tokens_seen=float("nan"), elapsed_s=float("inf"))  # the done event
    facts = dict(FACTS, run_name="gpt2 $\\foo$", straggler_threshold=float("inf"))  # mathtext in the plot's title
    report = report_of(make_run(tmp_path, records, facts))
    assert report.startswith("# Run gpt2 \\$\\\\foo\\$\n")
    assert "- Steps: inf of 100\n" in report and "- Tokens seen: nan\n" in report and "- Training time: inf\n" in report
    assert "more than 20 % above that record's median node's work is slow in it" in report


# ---------------------------------------------------------------- node_times.json

def node_times(count, slow=(), records=10, threshold=0.2):
    """node_times.json as the reference trainer keeps it: `count` nodes at 200 ms of work a step, the `slow` ones
    at 500 ms (slow in every record)."""
    nodes = {"node-%04d" % n: {"records": records, "work_ms": 200.0 + n % 3, "wait_ms": 300.0, "slow_records": 0,
                               "last_work_ms": 200.0} for n in range(count)}
    for node in slow:
        nodes[node].update(work_ms=500.0, wait_ms=1.0, slow_records=records, last_work_ms=500.0)
    return {"version": 1, "threshold": threshold, "first_step": 10, "step": 100, "records": records, "nodes": nodes}


def trainer_records():
    """The reference trainer's loss records: each node's times summarised (its slowest nodes), not listed."""
    records = metrics_records()
    for record in records:
        if record.pop("nodes", None):
            record["node_times"] = {"count": 3, "median_work_ms": 181.0, "median_wait_ms": 19.0,
                                    "slowest": {"slurm-worker-2": {"work_ms": 182.0, "wait_ms": 18.0}}}
    return records


def step_time_section(report):
    return report.split("## Step time per node\n", 1)[1].split("\n## ", 1)[0]


def test_step_times_per_node_from_node_times_json(tmp_path):
    run_dir = make_run(tmp_path, trainer_records(), FACTS)
    (run_dir / "node_times.json").write_text(json.dumps(node_times(3, slow=["node-0001"], threshold=0.3)))
    section = step_time_section(report_of(run_dir))
    assert section.startswith("\nPer node, means over the 10 loss records from step 10 to step 100 (`node_times.json`): "
                              "its work per step"), section
    assert ("a node more than 30 % above that record's median node's work is slow in it (the threshold the trainer "
            "used, in `node_times.json`)") in section
    assert section.splitlines()[3:] == [
        "| Node | Mean work ms/step | Mean wait ms/step | Work vs median | Slow in |", "|---|---|---|---|---|",
        "| node-0000 | 200.0 | 300.0 | 0.99x | 0 of 10 records |",
        "| node-0001 | 500.0 | 1.0 | 2.48x | 10 of 10 records (straggler) |",
        "| node-0002 | 202.0 | 300.0 | 1.00x | 0 of 10 records |"]
    assert not (run_dir / "nodes.md").exists()


def test_node_times_json_that_cannot_be_read_is_said_and_the_metrics_maps_serve(tmp_path):
    run_dir = make_run(tmp_path, metrics_records(), FACTS)
    for content, why in [("{", "`node_times.json` was not read: it is no JSON (Expecting property name"),
                         (json.dumps({"version": 7}), "`node_times.json` was not read: it is no version-1 "
                                                      "node_times.json (an object with version and nodes).")]:
        (run_dir / "node_times.json").write_text(content)
        section = step_time_section(report_of(run_dir))
        assert why in section, section
        assert "| slurm-worker-2 | 182.0 | 18.0 | 1.01x | 0 of 10 records |" in section
    broken = node_times(3)
    broken["nodes"]["node-0002"]["records"] = "ten"
    (run_dir / "node_times.json").write_text(json.dumps(broken))
    section = step_time_section(report_of(run_dir))
    assert "1 node entries of `node_times.json` could not be read and are left out." in section
    assert "| node-0001 | 201.0 | 300.0 | 1.00x | 0 of 10 records |" in section and "node-0002" not in section


def test_a_run_of_many_nodes_shows_the_spread_and_the_slow_ones_and_writes_every_row_to_nodes_md(tmp_path):
    names = ["node-%04d" % n for n in range(2048)]
    run_dir = make_run(tmp_path, trainer_records(), dict(FACTS, cluster=dict(FACTS["cluster"], nodes=names)))
    (run_dir / "node_times.json").write_text(json.dumps(node_times(2048, slow=["node-0042", "node-1999"])))
    report = report_of(run_dir)
    assert "- Nodes: %s, ... (2048)\n" % ", ".join(names[:32]) in report
    section = step_time_section(report)
    assert ("2048 nodes; mean work per step of the median node 201.0 ms, of the fastest 200.0 ms and the slowest "
            "500.0 ms; 90 % of the nodes between 200.0 and 202.0 ms.") in section, section
    rows = [line for line in section.splitlines() if line.startswith("| node-")]
    assert rows == ["| node-0042 | 500.0 | 1.0 | 2.49x | 10 of 10 records (straggler) |",
                    "| node-1999 | 500.0 | 1.0 | 2.49x | 10 of 10 records (straggler) |"]
    assert section.rstrip().endswith("Every node's row is in `nodes.md` beside this report.")
    nodes = (run_dir / "nodes.md").read_text()
    assert nodes.startswith("# Step time per node of run gpt2-124m\n\nPer node, means over the 10 loss records")
    assert len([line for line in nodes.splitlines() if line.startswith("| node-")]) == 2048
    # 40 slow nodes: the 32 slowest are shown
    slow = ["node-%04d" % n for n in range(100, 140)]
    history = node_times(2048, slow=slow)
    for n, node in enumerate(slow):
        history["nodes"][node]["work_ms"] = 400.0 + n
    (run_dir / "node_times.json").write_text(json.dumps(history))
    section = step_time_section(report_of(run_dir))
    assert "or that are stragglers (the 32 slowest of 40):" in section
    assert [line.split(" ")[1] for line in section.splitlines() if line.startswith("| node-")] == slow[8:]
    # none slow; then a run of three nodes leaves no nodes.md of the earlier report behind
    (run_dir / "node_times.json").write_text(json.dumps(node_times(2048)))
    assert "No node's mean work is more than 20 % above the median node's, and none is a straggler." in \
        step_time_section(report_of(run_dir))
    (run_dir / "node_times.json").unlink()
    report_of(run_dir)
    assert not (run_dir / "nodes.md").exists()


def test_a_file_the_collect_step_did_not_fetch_is_said(tmp_path):
    why = ("/ws/gpt2-124m/metrics.jsonl is not fetched: it has 1100 MiB, more than pretrain_fetch_max_mb=1024; "
           "it stays in the run directory.")
    report = report_of(make_run(tmp_path, metrics_records(), dict(FACTS, not_fetched={
        "/ws/gpt2-124m/metrics.jsonl": why})))
    assert report.split("## Summary\n\n", 1)[1].startswith(
        "- /ws/gpt2-124m/metrics.jsonl is not fetched: it has 1100 MiB, more than "
        "pretrain_fetch_max_mb=1024; it stays in the run directory.\n"
        "- The figures below are of the `metrics.jsonl` an earlier collect fetched, if any: raise "
        "pretrain_fetch_max_mb above its size to fetch it whole.\n- Status: finished\n")


def test_hangs_name_the_node_its_first_frames_and_where_the_stacks_are(tmp_path):
    """hangs/<job>-<start>/summary.json as the hang watch writes it (hang.summarize), fetched by the collect step."""
    from ansible_collections.llmtrain.slurm.plugins.module_utils.node import hang

    run = make_run(tmp_path, metrics_records(), FACTS)
    assert "None: no start of the run went without progress for pretrain_hang_timeout." in report_of(run)
    os.environ.update(SLURM_JOB_ID="45", SLURM_RESTART_COUNT="0")
    try:
        summary = hang.summarize({"slurm-worker-1": {"ranks": [{"rank": 2, "state": "T", "frames": [
            "train_step (trainer/train.py:290)", "<module> (trainer/train.py:500)"]}]}},
            ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"], {"slurm-worker-1": "rank 2 stopped (state T)"},
            15.2, 15, 41, "/ws/run/hangs/45-1")
    finally:
        for name in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT"):
            os.environ.pop(name)
    (run / "hangs" / "45-1").mkdir(parents=True)
    (run / "hangs" / "45-1" / "summary.json").write_text(json.dumps(summary))
    (run / "hangs" / "46-1").mkdir()
    (run / "hangs" / "46-1" / "summary.json").write_text("{cut short")
    section = report_of(run).split("## Hangs\n", 1)[1].split("\n## ", 1)[0]
    assert ("- Job 45, start 1, at %s: no progress for 15 s after step 41 (timeout 15 s); stacks of 1 rank(s) from 1 "
            "of 3 node(s) in /ws/run/hangs/45-1." % summary["time"]) in section, section
    assert "  - slurm-worker-1: rank 2 stopped (state T)" in section
    assert summary["frames"]["slurm-worker-1"]
    for frame in summary["frames"]["slurm-worker-1"]:
        assert "    - %s" % run_report.md(frame) in section
    # the start after it resumed: its row says why
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_records() + [
        {"event": "resume", "step": 40, "checkpoint": "/ws/c/step_40.pt", "job_id": "45", "start": 2,
         "discarded_records": 1, "steps_lost": 1}]))
    assert "| a hang in start 1 (see Hangs) | 40 | step_40.pt | 1 | 1 | - |" in report_of(run)
    # where the hang watch's requeue let the ranks save a checkpoint first (a preempted event)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_records() + [
        {"event": "preempted", "step": 42}, {"event": "resume", "step": 42, "checkpoint": "/ws/c/step_42.pt",
                                             "job_id": "45", "start": 2, "discarded_records": 0}]))
    assert "| a hang in start 1 (see Hangs); stopped at step 42 with a checkpoint | 42 | step_42.pt | 0 | 0 | - |" \
        in report_of(run)


@pytest.mark.parametrize("name", ["metrics.jsonl", "starts.jsonl", "node_times.json", "facts.json",
                                  "hangs/45-1/summary.json"])
def test_a_file_nested_too_deep_is_left_out_and_the_report_is_written(tmp_path, name):
    """A line of 50,000 '[' raised RecursionError in the report's readers (rc 1, no report)."""
    run_dir = make_run(tmp_path, metrics_records(), FACTS)
    path = run_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if name.endswith(".jsonl") else "w") as handle:  # a line more, or the whole file
        handle.write("[" * 50000 + "\n")
    report = report_of(run_dir)
    assert "- Final train loss: 2.5000 (step 100)" in report
    if name == "metrics.jsonl":
        assert "1 line(s) of `metrics.jsonl` were not records and were skipped." in report
    if name == "facts.json":
        assert report.startswith("# Run gpt2-124m\n") and "Checkpoint: not recorded." in report


SCRIPT_FACTS = dict(FACTS, model=None, jobs=[{"kind": "train", "job_id": "59", "state": "COMPLETED", "exit_code": "0:0"}],
                    script={"path": "/ws/lightning/src/train.py", "args": [], "checkpoints": [
                        "epoch=0-step=20.ckpt", "epoch=0-step=40.ckpt", "epoch=0-step=60.ckpt"]})


def test_a_script_s_run_with_checkpoints_but_no_loss_found_is_never_said_to_have_not_trained(tmp_path):
    """A Lightning run whose loss the collection did not find: the report says what is known (its
    newest checkpoint's step, the job that completed) and how to point the collection at the loss."""
    facts = dict(SCRIPT_FACTS, progress={"source": None, "tags": [], "event_files": 0})
    report = report_of(make_run(tmp_path, [], facts))
    assert "did not reach its first logged step" not in report
    assert ("No loss records in `metrics.jsonl`, yet training took steps: the newest checkpoint, epoch=0-step=60.ckpt, "
            "is of step 60; training job 59 COMPLETED.") in report, report
    assert "`pretrain_progress_tag`" in report and "`pretrain_progress_regex`" in report
    assert "No plot: there are no loss records (see the summary)." in report
    # event files whose scalars hold no known loss tag: they are named
    facts = dict(SCRIPT_FACTS, progress={"source": None, "tags": ["objective", "acc`|x"], "event_files": 1})
    report = report_of(make_run(tmp_path / "b", None, facts))
    assert ("Its TensorBoard event files hold the scalars objective, acc\\`\\|x, none of which is a loss tag known "
            "here: set `pretrain_progress_tag` to your loss's.") in report, report
    # nothing says it trained: then it did not reach its first logged step
    facts = dict(SCRIPT_FACTS, jobs=[{"kind": "train", "job_id": "59", "state": "FAILED"}],
                 script=dict(SCRIPT_FACTS["script"], checkpoints=[]))
    report = report_of(make_run(tmp_path / "c", [], facts))
    assert "No loss records in `metrics.jsonl`: training did not reach its first logged step" in report


def test_the_report_says_where_its_loss_records_came_from(tmp_path):
    records = [dict(step=step, loss=2.0 - step / 100, total_steps=60, source="events") for step in range(4, 60, 5)]
    facts = dict(SCRIPT_FACTS, progress={"source": "events", "tag": "train_loss", "unreadable": 2, "files": [
        "events/src/lightning_logs/version_59/events.out.tfevents.1765000000.n1.7.0"]})
    report = report_of(make_run(tmp_path, records, facts))
    assert ("- Loss records from: your script's TensorBoard event files, tag train_loss, in "
            "events/src/lightning_logs/version_59/events.out.tfevents.1765000000.n1.7.0 (2 record(s) did not "
            "check and were skipped)") in report, report
    # Lightning's last logged step of 60 is 59: its job completed, so it finished
    assert "- Status: finished" in report and "- Steps: 59 of 60" in report
    report = report_of(make_run(tmp_path / "m", metrics_records(), dict(FACTS, progress={"source": "metrics"})))
    assert "- Loss records from: the metrics file the trainer wrote (LLMTRAIN_METRICS_FILE)" in report


def test_after_training_says_where_the_model_is_and_its_held_out_loss(tmp_path):
    run_dir = make_run(tmp_path, metrics_records(), FACTS)
    report = report_of(run_dir)
    assert "## After training" not in report  # no model.json: nothing exported yet
    model = {"model_dir": "/ws/gpt2-124m/export/step_000800", "checkpoint": "step_000800.pt",
             "export": {"step": 800, "bytes": 497764352, "exported": True, "seconds": 3.25},
             "evaluation": {"loss": 3.28125, "perplexity": 26.6, "tokens": 1000000, "ranks": 16,
                            "text": "the validation split of /ws/gpt2-124m/data", "seconds": 41.5}}
    (run_dir / "model.json").write_text(json.dumps(model))
    section = report_of(run_dir).split("## After training\n\n", 1)[1]
    assert section.splitlines()[:4] == [
        "- Model directory (Hugging Face): /ws/gpt2-124m/export/step_000800",
        "- From checkpoint: step_000800.pt",
        "- Exported: step 800, 497764352 bytes, in 3.25 s",
        "- Held-out loss: 3.2812, perplexity 26.6, over 1000000 tokens of the validation split of /ws/gpt2-124m/data "
        "(16 ranks, 41.5 s)"]
    (run_dir / "summary.json").write_text(json.dumps({"prompts": 10000, "tokens": 1998334, "ranks": 32,
                                                      "tokens_per_second": 4842.13, "tokens_per_second_per_rank": 151.3}))
    section = report_of(run_dir).split("## After training\n\n", 1)[1]
    assert ("- Batch inference: 10000 prompts, 1998334 tokens on 32 ranks, 4842.1 tokens/s (151.3 per rank); records in "
            "`generations.jsonl`") in section
    # a job's file: text stays text, a loss that is no number is not recorded
    model.update(model_dir="/ws/<b>x\n# y", evaluation={"loss": "low", "tokens": 5}, export={})
    (run_dir / "model.json").write_text(json.dumps(model))
    section = report_of(run_dir).split("## After training\n\n", 1)[1]
    assert "&lt;b&gt;x" in section and "\n# y" not in section
    assert "- Exported: your script's checkpoint, used as it is" in section
    assert "- Held-out loss: not recorded" in section


def test_a_checkpoint_name_with_other_digits_than_0_to_9_has_no_step():
    """Arabic-Indic 42 was read as step 42, a superscript 2 made int() raise."""
    found, other = run_report.trainer_checkpoints(["checkpoint-\u0664\u0662", "step_\u00b2.pt", "checkpoint-40"])
    assert found == [(40, "checkpoint-40"), (None, "step_\u00b2.pt")] and other == ["checkpoint-\u0664\u0662"]


def test_a_metrics_line_longer_than_a_record_is_counted_unreadable_never_held_whole(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with open(str(path), "w") as handle:
        handle.write(json.dumps({"step": 1, "loss": 3.0}) + "\n")
        handle.write('{"step": 2, "loss": 2.9, "pad": "' + "x" * (3 * 1048576) + '"}\n')  # 3 MiB: past the 1 MiB bound
        handle.write("not json\n" + json.dumps({"step": 3, "loss": 2.8}) + "\n")
    losses, events, unreadable, _totals = run_report.read_metrics(str(path), 1.5)
    assert [record["step"] for record in losses] == [1, 3] and events == [] and unreadable == 2
