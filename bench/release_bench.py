"""The local cluster on each Slurm release it runs: bring-up and the pipeline's wall time.

    python bench/release_bench.py [--releases system,24.11,26.05] [--runs 2] [--steps 200] [--format markdown]

For each release, on a cluster of its own beside any other (its own directory, addresses and
ports) and a roots directory of its own, so that nothing cached elsewhere counts:
1. cold bring-up: `ansible-playbook playbooks/local_cluster.yml` with no root built yet (for a
   release: debootstrap and apt from Debian's mirror, then the cluster);
2. bring-up with the root cached: the cluster taken down, then up again (`--runs` times);
3. the pipeline: `ansible-playbook playbooks/pretrain.yml` with the local inventory's model,
   `--steps` steps, a new run each time (`--runs` times), and the Slurm version its report names.
Everything it made is taken down and removed at the end.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLUSTER = dict(local_cluster_dir="/var/lib/llmtrain-local-cluster-bench", local_cluster_cluster_name="llmtrainb",
               local_cluster_node_prefix="slurmb-worker-", local_cluster_subnet_prefix="10.213.20",
               local_cluster_bridge="llmtbr20", local_cluster_netns_prefix="llmtb-", local_cluster_slurmctld_port=8817,
               local_cluster_slurmd_port=8818, local_cluster_slurmdbd_port=8819,
               local_cluster_link_system_config=False, slurm_workspace="/var/tmp/llmtrain-workspace-bench",
               run_results_dir="/var/tmp/llmtrain-bench-runs")


def env():
    out = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (BIN, os.environ.get("PATH", "")))
    out.pop("SLURM_CONF", None)
    return out


def play(playbook, values):
    start = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "playbooks/" + playbook, "-e", json.dumps(values)], cwd=ROOT,
                          env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit("%s failed:\n%s" % (playbook, proc.stdout[-4000:]))
    return time.monotonic() - start


def spread(values, unit="s"):
    if len(values) == 1:
        return "%.1f %s" % (values[0], unit)
    return "%.1f %s (min %.1f, max %.1f, n=%d)" % (statistics.median(values), unit, min(values), max(values), len(values))


def bench_release(release, runs, steps, roots):
    values = dict(CLUSTER, local_cluster_release=release, local_cluster_roots_dir=roots)
    down = dict(values, local_cluster_state="absent")
    found = {}
    play("local_cluster.yml", down)
    shutil.rmtree(CLUSTER["local_cluster_dir"], ignore_errors=True)
    found["cold"] = [play("local_cluster.yml", values)]
    found["cached"] = []
    for _run in range(runs):
        play("local_cluster.yml", down)
        shutil.rmtree(CLUSTER["local_cluster_dir"], ignore_errors=True)
        found["cached"].append(play("local_cluster.yml", values))
    found["pipeline"], versions = [], set()
    for index in range(runs):
        run = "release-bench-%d" % index
        for base in (CLUSTER["slurm_workspace"], CLUSTER["run_results_dir"]):
            shutil.rmtree(os.path.join(base, run), ignore_errors=True)
        settings = dict(values, run_name=run, pretrain_steps=steps, pretrain_checkpoint_interval=steps)
        found["pipeline"].append(play("pretrain.yml", settings))
        report = Path(CLUSTER["run_results_dir"], run, "report.md").read_text()
        versions.update(re.findall(r"^- Slurm version: (\S+)", report, flags=re.M))
    found["version"] = ", ".join(sorted(versions))
    play("local_cluster.yml", down)
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--releases", default="system,24.11,26.05")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("the local cluster needs root")
    roots = "/var/tmp/llmtrain-bench-roots-%d" % os.getpid()
    results = {}
    try:
        for release in args.releases.split(","):
            results[release] = bench_release(release, args.runs, args.steps, roots)
    finally:
        subprocess.run([str(BIN / "ansible-playbook"), "playbooks/local_cluster.yml", "-e",
                        json.dumps(dict(CLUSTER, local_cluster_state="absent"))], cwd=ROOT, env=env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        for path in (roots, CLUSTER["local_cluster_dir"], CLUSTER["slurm_workspace"], CLUSTER["run_results_dir"]):
            shutil.rmtree(path, ignore_errors=True)
    lines = []
    if args.format == "markdown":
        lines.append("Each release on a 3-node local cluster of its own (3 nodes x 2 ranks, CPU, gloo); the "
                     "pipeline trains %d steps of the local inventory's model, a new run each time. Cold: no "
                     "root built yet (debootstrap and apt from deb.debian.org for a release; for system, "
                     "Debian 12's packages are already installed). Medians of %d runs where more than one." % (
                         args.steps, args.runs))
        lines.append("")
        lines.append("| release | Slurm (the report's) | bring-up, cold | bring-up, root cached | pipeline wall time |")
        lines.append("|---|---|---|---|---|")
        for release, found in results.items():
            cells = (release, found["version"], spread(found["cold"]), spread(found["cached"]), spread(found["pipeline"]))
            lines.append("| %s | %s | %s | %s | %s |" % cells)
    else:
        for release, found in results.items():
            lines.append("%s (%s): cold %s, cached %s, pipeline %s" % (
                release, found["version"], spread(found["cold"]), spread(found["cached"]), spread(found["pipeline"])))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
