"""The collection against local Slurm clusters of growing node count, up to the largest this machine holds.

    python bench/cluster_scale_bench.py [--sizes 3,16,32,64,128,245] [--pipeline-sizes 3,16,32] [--format markdown]

At each node count N a cluster of its own (directory, subnet, bridge, namespaces, node names
and ports apart from the test cluster's, so that both can run on one machine) is brought up
with the local_cluster role, then timed, with the Slurm RPCs each costs (`sdiag`):
1. bring-up until every node is idle (within local_cluster_node_timeout);
2. preflight (`playbooks/preflight.yml`, slurm_nodes=N), the node listing
   (`slurm_cluster_info`), the node check of every idle node (`playbooks/node_check.yml`) and
   one poll of the watch (`slurm_job_info`) on a running job of all N nodes;
3. at the --pipeline-sizes, the whole pipeline (`playbooks/pretrain.yml`, a few CPU steps,
   one rank per node): wall time per stage, and that it finishes.
The counts go up until a cluster does not come up; the table says why. The cluster is taken
down after each count (also on failure or Ctrl-C) and its directory removed; the integration
tests' lock is held meanwhile. Only the tables are printed.
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from pipeline_bench import BIN, ROOT, env, play

LOCK = "/tmp/llmtrain-integration.lock"
CLUSTER_DIR = "/var/lib/llmtrain-scale-cluster"
# every name and address differs from the local_cluster role's defaults (the test cluster's)
CLUSTER = dict(local_cluster_dir=CLUSTER_DIR, local_cluster_cluster_name="llmscale",
               local_cluster_node_prefix="scale-", local_cluster_subnet_prefix="10.214.0",
               local_cluster_bridge="llmscbr0", local_cluster_netns_prefix="llsc-",
               local_cluster_slurmctld_port=6827, local_cluster_slurmd_port=6828,
               local_cluster_link_system_config=False, local_cluster_install_packages=False,
               local_cluster_node_timeout=180)
STEPS = 20


def inventory(tmp, nodes, workspace):
    """An inventory like inventories/local for `nodes` nodes of the bench's cluster -> its path."""
    inv = Path(tmp) / ("inventory-%d" % nodes)
    (inv / "group_vars").mkdir(parents=True)
    hosts = yaml.safe_load((ROOT / "inventories/local/hosts.yml").read_text())
    hosts["all"]["children"]["slurm_workers"]["hosts"] = dict((CLUSTER["local_cluster_node_prefix"] + str(i), None) for i in range(nodes))
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    values = yaml.safe_load((ROOT / "inventories/local/group_vars/all.yml").read_text())
    values.update(CLUSTER, local_cluster_enabled=False, local_cluster_nodes=nodes, slurm_nodes=nodes,
                  slurm_procs_per_node=1, slurm_workspace=str(workspace), pretrain_steps=STEPS,
                  pretrain_checkpoint_interval=STEPS, inference_max_new_tokens=20,
                  pretrain_extra_args=["--warmup", "2", "--eval-interval", str(STEPS), "--eval-iters", "1",
                                       "--log-interval", "5"])
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump(values))
    return str(inv)


def rpcs():
    """RPCs slurmctld has answered since it started, `sdiag`'s own aside."""
    out = subprocess.run(["sdiag"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                         check=False, timeout=60).stdout
    table = out.split("Remote Procedure Call statistics by message type", 1)[-1].split("Remote Procedure Call statistics by user")[0]
    return sum(int(count) for name, count in re.findall(r"^\s*(\w+)\s+\(\s*\d+\)\s+count:(\d+)", table, flags=re.M)
               if name != "REQUEST_STATS_INFO")


def measured(what, *argv):
    """(seconds, RPCs) of one call of play() or of a command."""
    before, started = rpcs(), time.monotonic()
    if what == "play":
        play(*argv)
    else:
        proc = subprocess.run(argv, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False, timeout=600)
        if proc.returncode != 0:
            raise SystemExit("%s failed (rc %d):\n%s" % (" ".join(argv), proc.returncode, proc.stdout[-3000:]))
    return time.monotonic() - started, rpcs() - before


def rss_mb(pidfile):
    try:
        pid = Path(pidfile).read_text().split()[0]
        status = Path("/proc/%s/status" % pid).read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    except (OSError, AttributeError, IndexError):
        return 0.0


def memory():
    """(slurmctld MB, all slurmd MB) resident."""
    run = Path(CLUSTER_DIR) / "run"
    return rss_mb(run / "slurmctld.pid"), sum(rss_mb(p) for p in run.glob("slurmd-*.pid"))


def adhoc(inv, name, args):
    return [str(BIN / "ansible"), "slurm_login", "-i", inv, "-m", name] + (["-a", json.dumps(args)] if args else [])


def watch_poll(inv, nodes):
    """One poll of the watch on a running job of every node: (seconds, RPCs)."""
    job = subprocess.run(["sbatch", "--parsable", "--nodes=%d" % nodes, "--ntasks-per-node=1", "--time=10",
                          "--job-name=llmtrain-scale-watch", "--output=/dev/null", "--wrap", "sleep 600"],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 120
        while subprocess.run(["squeue", "--noheader", "--format=%T", "--job", job], stdout=subprocess.PIPE,
                             universal_newlines=True, check=True).stdout.strip() != "RUNNING":
            if time.monotonic() > deadline:
                raise SystemExit("the watch job of %d nodes did not start within 120 s" % nodes)
            time.sleep(0.5)
        return measured("cmd", *adhoc(inv, "llmtrain.slurm.slurm_job_info", {"job_id": [job]}))
    finally:
        subprocess.run(["scancel", job], check=False)


# the stages' roles, by the names their plays had when each stage was a play of its own
STAGE_ROLES = {"local_cluster": "Local Slurm cluster", "preflight": "Preflight", "nccl_env": "NCCL / UCX / Gloo environment",
               "deploy": "Deploy", "pretrain": "Pretrain", "inference": "Inference"}


def stage_times(lines, wall):
    """{stage: seconds} from ansible-playbook's output: a PLAY banner starts a stage of the play's name, a
    TASK banner of a stage's role (llmtrain.slurm.<role> : ...) that stage; the run role's tasks and
    the argument checks count to the stage they run in."""
    banners = []
    for t, line in lines:
        if line.startswith("PLAY ["):
            banners.append((t, re.sub(r"^PLAY \[(.*)\].*", r"\1", line)))
        role = re.match(r"^TASK \[llmtrain\.slurm\.(\w+) : ", line)
        if role and role.group(1) in STAGE_ROLES and (not banners or banners[-1][1] != STAGE_ROLES[role.group(1)]):
            banners.append((t, STAGE_ROLES[role.group(1)]))
    ends = [t for t, _name in banners[1:]] + [wall]
    times = {}
    for (t, name), end in zip(banners, ends):
        times[name] = times.get(name, 0) + end - t
    return times


def pipeline(inv, nodes, workspace):
    try:
        wall, lines, _rc = play("playbooks/pretrain.yml", "-i", inv, "-e", json.dumps({"run_name": "scale-%d" % nodes}))
    except SystemExit as failed:
        return dict(ok=False, why=str(failed))
    done = (Path(workspace) / ("scale-%d" % nodes) / "train.done.json").exists()
    return dict(ok=done, why="" if done else "no train.done.json", wall=wall, stages=stage_times(lines, wall))


def cluster(inv, state):
    play("playbooks/local_cluster.yml", "-i", inv, "-e", "local_cluster_state=%s" % state)


def leftovers():
    """Pids of processes that still run the bench cluster's configuration or munge key."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and CLUSTER_DIR.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def take_down(inv):
    """The role's absent; then whatever still runs with the bench's configuration, by pid."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave the cluster up
    try:
        try:
            cluster(inv, "absent")
        except SystemExit as failed:
            print("taking the cluster down failed: %s" % failed, file=sys.stderr)
        for pid in leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(CLUSTER_DIR, ignore_errors=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def one_size(tmp, nodes, with_pipeline, result):
    """Fills `result` as the figures come, so that those before a failure are kept."""
    workspace = Path(tmp) / "workspace"
    workspace.mkdir(mode=0o755, exist_ok=True)
    inv = inventory(tmp, nodes, workspace)
    try:
        started = time.monotonic()
        try:
            cluster(inv, "present")
        except SystemExit as failed:
            result["failed"] = str(failed)
            result["why"] = why_down(nodes)
            return
        result["up"] = time.monotonic() - started
        result["memory"] = memory()
        result["preflight"] = measured("play", "playbooks/preflight.yml", "-i", inv, "-e",
                                       json.dumps({"run_name": "scale-%d" % nodes}))
        result["listing"] = measured("cmd", *adhoc(inv, "llmtrain.slurm.slurm_cluster_info", {}))
        started = time.monotonic()
        try:
            result["node_check"] = measured("play", "playbooks/node_check.yml", "-i", inv, "-e",
                                            json.dumps({"run_name": "scale-%d" % nodes}))
        except SystemExit:
            # nodes that did not answer in time are named on stderr; the watch is still measured
            result["node_check"] = "failed after %.0f s" % (time.monotonic() - started)
        result["baseline"] = measured("cmd", *adhoc(inv, "ansible.builtin.ping", {}))
        result["watch"] = watch_poll(inv, nodes)
        if with_pipeline:
            result["pipeline"] = pipeline(inv, nodes, workspace)
    finally:
        take_down(inv)


def why_down(nodes):
    """What the bench cluster's logs say about a failed bring-up."""
    logs = Path(CLUSTER_DIR) / "log"
    errors = []
    for path in sorted(logs.glob("*.log")):
        errors += [line.strip() for line in path.read_text(errors="replace").splitlines() if "error" in line.lower()]
    return "%d nodes; last errors: %s" % (nodes, " / ".join(errors[-3:]) or "none logged")


def render(args, results):
    out = ["Each node count is a cluster of its own (slurmctld and one slurmd per node in its own network "
           "namespace, all on this machine's %d cores). Seconds, and the RPCs slurmctld answered meanwhile "
           "(`sdiag`). The ansible ad-hoc calls include Ansible's own start, shown by a `ping` of the login "
           "host." % os.cpu_count(), "",
           "| nodes | bring-up | slurmctld / all slurmd RSS | preflight | node listing | node check, all nodes "
           "| watch poll, job of all nodes | ansible ping |", "|---:|---|---|---|---|---|---|---|"]

    def cell(pair):
        return pair if isinstance(pair, str) else "%.1f s, %d RPCs" % tuple(pair)

    for r in results:
        if "up" not in r:
            out.append("| %d | did not come up: %s | | | | | | |" % (r["nodes"], r.get("why", r["failed"]).replace("|", "/")))
            continue
        out.append("| %d | %.0f s | %.0f / %.0f MB | %s |" % (
            r["nodes"], r["up"], r["memory"][0], r["memory"][1],
            " | ".join(cell(r[k]) if k in r else "" for k in ("preflight", "listing", "node_check", "watch", "baseline"))))
    out += ["", "245 nodes is the most the local_cluster role's addresses allow (<subnet prefix>.10 to .254). "
            "Memory is far from a limit (a slurmd holds about 6 MB); the CPUs are not: the node check starts one "
            "Python that imports torch per node, all on these %d cores, and a node that has not answered by the "
            "check's deadline counts as bad." % os.cpu_count()]
    for r in results:
        if "up" in r and "failed" in r:
            out += ["", "At %d nodes: %s" % (r["nodes"], r["failed"][-500:].replace("\n", " "))]
    runs = [r for r in results if "pipeline" in r]
    if runs:
        stages = []
        for r in runs:
            stages += [s for s in r["pipeline"].get("stages", {}) if s not in stages]
        out += ["", "Whole pipeline (`playbooks/pretrain.yml`, %d steps on CPU, one rank per node), seconds per "
                "play:" % STEPS, "",
                "| nodes | finished | wall | " + " | ".join(stages) + " |",
                "|---:|---|---|" + "---|" * len(stages)]
        for r in runs:
            p = r["pipeline"]
            out.append("| %d | %s | %s | %s |" % (
                r["nodes"], "yes" if p["ok"] else "no: " + p["why"][-200:].replace("|", "/").replace("\n", " "),
                "%.0f s" % p["wall"] if "wall" in p else "",
                " | ".join("%.1f" % p["stages"][s] if s in p.get("stages", {}) else "" for s in stages)))
    if args.format == "text":
        return "\n".join(line.replace("|", " ") for line in out)
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", default="3,16,32,64,128,245",
                        help="node counts, in order; the first that does not come up ends the list")
    parser.add_argument("--pipeline-sizes", default="3,16,32", help="node counts that also run the whole pipeline")
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the bench runs Slurm clusters of its own and needs root")
    with_pipeline = set(int(x) for x in args.pipeline_sizes.split(",") if x)
    os.environ["SLURM_CONF"] = os.path.join(CLUSTER_DIR, "etc", "slurm.conf")
    results = []
    tmp = tempfile.mkdtemp(prefix="llmtrain-scale-", dir="/var/tmp")
    os.chmod(tmp, 0o755)  # the collection refuses a workspace that others could replace
    try:
        with open(LOCK, "w") as lock:
            print("waiting for %s" % LOCK, file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
            for nodes in (int(x) for x in args.sizes.split(",")):
                print("%d nodes" % nodes, file=sys.stderr, flush=True)
                result = dict(nodes=nodes)
                results.append(result)
                try:
                    one_size(tmp, nodes, nodes in with_pipeline, result)
                except (SystemExit, subprocess.SubprocessError) as failed:
                    result["failed"] = str(failed)
                print(json.dumps(result), file=sys.stderr, flush=True)
                if "failed" in result:
                    break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(render(args, results))


if __name__ == "__main__":
    main()
