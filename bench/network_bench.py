"""The network check on the local cluster: what it measures and what it costs each training job.

    python bench/network_bench.py [--runs 5] [--format markdown]

A run directory is made by the nccl_env stage (the run's scripts and env files, as every
stage makes them); then jobs of three nodes run the network check step exactly as the
training job script does (scripts/network_check.sh, policy warn), `--runs` times with the
links as they are, then twice with slurm-worker-2's host-side veth held to 20 Mbit/s by
`tc tbf` (removed afterwards). Reported: all-reduce bus bandwidth and latency over the
three ranks, each node's best ring-neighbour pair against the median of the others' (the
relative judgement the local cluster's veths need: they report no link speed), and the
step's cost (its wall time in the job, and the part spent importing torch).

Needs the local cluster up (make cluster), root for tc, and torch in the project's .venv.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKSPACE = Path("/var/tmp/llmtrain-workspace")
RUN = "bench-network"
SLURM_CONF = "/var/lib/llmtrain-local-cluster/etc/slurm.conf"
SHAPED_VETH, SHAPED_NODE = "llmtv2", "slurm-worker-2"
JOB = """#!/bin/bash
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --job-name=llmtrain-bench-network
#SBATCH --output={out}
export LLMTRAIN_RUN_DIR={run_dir}
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR=$(scontrol show hostnames "${{SLURM_JOB_NODELIST}}" | head -n 1)
start=$(date +%s.%N)
bash {run_dir}/scripts/network_check.sh --gpus 0 --procs 2 --policy warn --min-fraction 0.5 --timeout 60
echo "step_seconds $(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)")"
"""


def slurm_env():
    return dict(os.environ, SLURM_CONF=SLURM_CONF)


def prepare():
    """The run directory, its scripts and env files, as the nccl_env stage makes them."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    subprocess.run([str(BIN / "ansible-playbook"), "playbooks/nccl_env.yml", "-e", json.dumps({"run_name": RUN})],
                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
    return WORKSPACE / RUN


def one_job(run_dir, tmp):
    script = Path(tmp) / "job.sh"
    out = Path(tmp) / ("job-%d.out" % time.monotonic_ns())
    script.write_text(JOB.format(run_dir=run_dir, out=out))
    subprocess.run(["sbatch", "--wait", "--quiet", str(script)], env=slurm_env(), check=True, timeout=300)
    text = out.read_text()
    step = float(text.rsplit("step_seconds", 1)[1].split()[0])
    record = json.loads((run_dir / "network_check" / "llmtrain-bench-network.json").read_text())
    return record, step, text


def relative(record):
    """{node: its best pair / the median of the other nodes' best pairs}."""
    best = dict((n["node"], n["busbw"]) for n in record["nodes"])
    return dict((node, value / statistics.median([v for other, v in best.items() if other != node]))
                for node, value in best.items())


def row(label, record, step):
    ratios = relative(record)
    worst = min(ratios, key=ratios.get)
    return [label, "%.3g" % record["busbw"], "%.0f" % record["latency_us"],
            "%s %.3g" % (worst, ratios[worst]), ", ".join(sorted(record["slow"])) or "none",
            "%.1f" % step, "%.1f" % record["import_seconds"], "%.1f" % record["seconds"]]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    args = parser.parse_args(argv)
    run_dir = prepare()
    rows, healthy, steps = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.runs):
            record, step, _text = one_job(run_dir, tmp)
            rows.append(row("as they are, %d" % (index + 1), record, step))
            healthy.append(min(relative(record).values()))
            steps.append(step)
        subprocess.run(["tc", "qdisc", "add", "dev", SHAPED_VETH, "root", "tbf", "rate", "20mbit", "burst", "32kbit",
                        "latency", "50ms"], check=True)
        try:
            shaped = []
            for index in range(2):
                record, step, _text = one_job(run_dir, tmp)
                rows.append(row("%s at 20 Mbit/s, %d" % (SHAPED_NODE, index + 1), record, step))
                shaped.append(relative(record)[SHAPED_NODE])
                steps.append(step)
        finally:
            subprocess.run(["tc", "qdisc", "del", "dev", SHAPED_VETH, "root"], check=True)
    header = ["Links", "Bus bandwidth (GB/s)", "Latency (us)", "Lowest node: best pair / others' median",
              "Named slow", "Step (s)", "torch import (s)", "In Python (s)"]
    if args.format == "markdown":
        print("Three nodes, one Gloo rank each over `eth0` (a veth: no link speed, so each node's best "
              "ring-neighbour pair is judged against the median of the others'). Bus bandwidth is nccl-tests' "
              "(algbw x 2(n-1)/n), the best of 64 KiB, 1 MiB and 16 MiB all-reduces; latency is that of an 8-byte "
              "all-reduce.\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _column in header) + "|")
        for line in rows:
            print("| " + " | ".join(line) + " |")
        print("\nWith the links as they are, the lowest node reached %.2f-%.2f of the others (two cores shared by "
              "three nodes and whatever else runs); the shaped node reached %.4f-%.4f. The step costs %.1f-%.1f s "
              "of every training job of more than one node, most of it starting Python and importing torch on each "
              "node." % (min(healthy), max(healthy), min(shaped), max(shaped), min(steps), max(steps)))
        print("\nWhat the numbers mean. Bus bandwidth is what each rank's link carries during an all-reduce, so it "
              "is comparable with the link's speed whatever the number of ranks: on a real cluster the check reports "
              "it as a fraction of the slowest link (Ethernet `/sys/class/net/<if>/speed`, InfiniBand port rates "
              "summed over the HCAs NCCL uses). Here the links are veths on a bridge: the figure is the cost of "
              "copying through the kernel on two shared cores, not a network's, and only the comparison between "
              "nodes means anything.")
        print("\nWhy `pretrain_network_min_fraction: 0.5`. A healthy InfiniBand fabric gives NCCL's ring all-reduce "
              "about 0.8-0.9 of the link in bus bandwidth at large sizes; the check's sizes are bounded in time, which "
              "costs a little of that. What the check is for is far below: traffic on a management interface "
              "instead of the fabric (1-25 Gb/s against 200-400: under 0.13), an HCA left out of NCCL_IB_HCA "
              "(0.5 or less on two-rail nodes), a node whose pairs reach a fraction of its peers'. 0.5 sits "
              "between the two, and on the local cluster between the healthy nodes' lowest ratio and the shaped "
              "node's (table above). The GPU path (NCCL, one rank per GPU) could not be measured on this machine.")
    else:
        for line in [header] + rows:
            print("  ".join(line))


if __name__ == "__main__":
    main()
