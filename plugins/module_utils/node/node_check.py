# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node check: what a job's nodes give it, judged on the nodes the job got.

Every job of a run starts with one step of this script on its allocation (one task per
node, `check`), then judges the nodes' records on the batch node (`gather`):

    python -m llmtrain_node.node_check check --dir DIR --token TOKEN --run-dir RUN [--gpus N]
        [--require-torch] [--gpu-policy strict|report] [--gpu-diag LEVEL] [--python-name NAME]
        [--slurm-nodes FILE] [--procs N]
    python -m llmtrain_node.node_check gather --dir DIR --nodes NODE... --out FILE
        [--bad-nodes-file FILE] [--timeout S] [--python P] [--job ID] [--restart N]

`check` writes DIR/<node>.json and prints it; it never fails on what it finds. It records the
CPUs its task is bound to (the training's launcher on that node gets the same under the same srun
layout, and its --procs processes share them): `gather` names a node bound to fewer than the job
asked (SLURM_CPUS_PER_TASK), and the nodes whose processes get less than one CPU each. It imports
torch only when the job asks for GPUs (--gpus N > 0) or imports torch itself (--require-torch);
where it asks for GPUs, it also looks for GPU faults (module gpu_health: ECC, pending retirements
and remappings, clocks held down, the kernel's Xid errors, and DCGM's diagnostic at --gpu-diag).
The interfaces it looks for are those NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name in the
env file the job sources on that node (RUN/env/<node>.env, else RUN/env/cluster.env). The GPUs
Slurm registers come from the node's line in --slurm-nodes, else from its own scontrol. `gather`
prints the per-node table, writes FILE (every record and the verdict), adds the bad nodes
to --bad-nodes-file, and exits 0 when every node is good, BAD_NODES (exit_codes.py) when one or
more is bad.

It imports nothing from Ansible: it runs on the nodes as part of the llmtrain_node package (see
__init__.py), shipped to the run's scripts directory (slurm_node_check ships it to a scratch
directory); modules and filters import it as module_utils.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import tempfile

from . import bad_nodes, exit_codes, gpu, gpu_health, nccl, untrusted
from .atomic import replace_file

BAD_NODES_RC = exit_codes.BAD_NODES.code  # gather's verdict, to node_check.sh
# run_gpu_policy: strict makes a GPU count that differs from what Slurm registers a problem
GPU_POLICIES = ("strict", "report")
# A node's torch when the job asks for no GPU and does not import torch (the dataset preparation):
# importing torch takes seconds of CPU on every node, for nothing the job uses; the table shows "-".
NOT_CHECKED = dict(checked=False, error="torch not checked: the job asks for no GPU and does not import torch")
# a node's GPU health notes (no faults: correctable errors, other Xids) printed by gather, at most
NOTED_NODES = 10
NOTES_KEPT = 5
INTERFACES_FIX = ("set nccl_env_socket_ifname (or nccl_env_gloo_socket_ifname), per node under "
                  "slurm_workers where nodes differ")


def registered_gpus(gres):
    """Slurm's Gres= value of a node ("gpu:2", "gpu:a100:4(S:0-1),shard:8") -> its GPU count."""
    total = None
    for item in re.sub(r"\([^)]*\)", "", gres or "").split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        try:
            total = (total or 0) + int(count)
        except ValueError:
            total = (total or 0) + 1
    return 0 if total is None and gres is not None else total


def show_node_line(lines, node):
    """The line of node in `scontrol show node -o` output (lines: an iterable of them), None when it has none."""
    prefix = "NodeName=%s " % node
    for line in lines:
        if line.startswith(prefix):
            return line
    return None


def registered_of(line):
    """The GPU count a `scontrol show node -o` line registers (Gres=), None without one."""
    match = re.search(r"(?:^|\s)Gres=(\S*)", line or "")
    return registered_gpus(match.group(1) if match.group(1) != "(null)" else "") if match else None


def slurm_registered(node, runner=gpu.run, nodes_file=None):
    """The GPU count Slurm registers for node, None when Slurm cannot tell: from nodes_file (the
    batch node's one `scontrol show node -o` of the job's nodes) when given, else from scontrol."""
    if nodes_file:
        try:
            with open(nodes_file) as handle:
                return registered_of(show_node_line(handle, node))
        except OSError:  # the batch node's query failed: as when scontrol cannot tell
            return None
    rc, out, _err = runner(["scontrol", "show", "node", "-o", node], timeout=30)
    return registered_of(show_node_line(out.splitlines(), node)) if rc == 0 else None


def env_file_values(text):
    """The `export NAME=value` lines of an env file (values shell-quoted, as the nccl_env role
    writes them), read back as the shell would; comments and other lines are left out."""
    values = {}
    for line in (text or "").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            values[name] = value
    return values


def env_file(run_dir, node):
    """(path, text) of the env file the job sources on node (the node's own, else cluster.env);
    (None, "") when the run has none yet."""
    for name in (node + ".env", "cluster.env"):
        path = os.path.join(run_dir, "env", name)
        try:
            with open(path) as handle:
                return path, handle.read()
        except OSError:
            continue
    return None, ""


def visible_gpus(environ):
    """GPUs Slurm gave this step: CUDA_VISIBLE_DEVICES, which it sets for gres/gpu."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip() in ("", "NoDevFiles"):
        return 0
    return len([v for v in value.split(",") if v.strip()])


def missing_interfaces(wanted, present):
    """wanted: [{"name", "exact"}] (a prefix where exact is false, NCCL's rule)."""
    missing = []
    for want in wanted:
        found = any(p == want["name"] if want["exact"] else p.startswith(want["name"]) for p in present)
        if not found and want["name"] not in missing:
            missing.append(want["name"])
    return missing


def problems(record, python_name="slurm_python", gpu_policy="strict"):
    """What makes a node unfit for the job, one message per finding (empty: the node is good)."""
    node, python = record["node"], record["python"]
    found = []
    torch = record["torch"]
    if record["require_torch"] and not torch.get("importable"):
        found.append("%s=%s cannot import torch on %s (%s): install torch there, or point %s at an "
                     "interpreter that has it" % (python_name, python, node, torch.get("error"), python_name))
    asked, seen = record["gpus_requested"], record["gpus_visible"]
    smi, torch_count, registered = record["nvidia_smi_count"], record["torch_count"], record["registered"]
    if asked > 0:
        if torch.get("importable") and not torch.get("cuda_available"):
            found.append("torch %s in %s has no usable CUDA on %s (CUDA build: %s): install a CUDA build of torch "
                         "that matches the node's driver, or set slurm_gpus_per_node=0"
                         % (torch.get("version"), python, node, torch.get("cuda_version") or "none"))
        if not asked == seen == smi == (torch_count if torch.get("importable") else smi):
            why = " (%s)" % record["gpu_reason"] if record.get("gpu_reason") else ""
            found.append("slurm_gpus_per_node=%d, the job step on %s sees %d, nvidia-smi lists %d, torch sees %d, "
                         "Slurm registers %s%s: fix the node's driver or gres.conf, or lower slurm_gpus_per_node"
                         % (asked, node, seen, smi, torch_count, "?" if registered is None else registered, why))
    if gpu_policy == "strict":
        found += ["GPU fault on %s: %s (or set run_gpu_policy=report)" % (node, fault)
                  for fault in (record.get("gpu_health") or {}).get("faults", [])]
    if gpu_policy == "strict" and registered is not None and registered != record["detected"]:
        why = " (%s)" % record["gpu_reason"] if record.get("gpu_reason") else ""
        found.append("Slurm registers gpu:%d, the node detects %d%s: make gres.conf and slurm.conf Gres= "
                     "match %s, or set run_gpu_policy=report"
                     % (registered, record["detected"], why, node))
    for interface in record["missing_interfaces"]:
        found.append("no network interface %s on %s (it has %s): %s"
                     % (interface, node, ", ".join(record["interfaces"]) or "none", INTERFACES_FIX))
    if not record["workspace_shared"]:
        found.append("slurm_workspace is not shared: %s cannot see a file the batch node wrote in %s; use a "
                     "directory on the shared filesystem" % (node, record["dir"]))
    if not record["workspace_writable"]:
        found.append("slurm_workspace is not writable from %s (%s): fix its permissions or pick another directory"
                     % (node, record["dir"]))
    return found


def cpu_ranges(cpus, max_chars=200):
    """CPU numbers as Linux's lists write them (0-3,8), cut at max_chars."""
    parts, start = [], None
    for index, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if index + 1 == len(cpus) or cpus[index + 1] != cpu + 1:
            parts.append(str(start) if start == cpu else "%d-%d" % (start, cpu))
            start = None
    text = ",".join(parts)
    return text if len(text) <= max_chars else text[:max_chars - 3] + "..."


def cpu_binding(environ, procs, affinity=None):
    """The CPUs this node's task is bound to (what the training's launcher and its processes on
    the node get under the same srun layout), against the CPUs the job asked for each node's task
    (SLURM_CPUS_PER_TASK, slurm_cpus_per_task) and the processes that share them (procs, 0: not
    known). None where the system cannot tell."""
    try:
        bound = sorted(affinity if affinity is not None else os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    asked = environ.get("SLURM_CPUS_PER_TASK", "")
    asked = int(asked) if untrusted.digits(asked) and len(asked) < 7 else 1
    return dict(count=len(bound), list=cpu_ranges(bound), asked=asked, procs=procs)


def cpu_cell(binding):
    """CPUS(BOUND/ASKED): the task's CPUs over those asked; LOW where the binding gives fewer."""
    if not isinstance(binding, dict) or not isinstance(binding.get("count"), int):
        return "-"
    low = isinstance(binding.get("asked"), int) and binding["count"] < binding["asked"]
    return "%d/%s%s" % (binding["count"], binding.get("asked", "?"), " LOW" if low else "")


def cpu_notes(records):
    """Lines about CPU binding: each node (up to NOTED_NODES) whose task got fewer CPUs than the
    job asked for it, and once, the nodes whose processes get less than one CPU each."""
    bindings = [(r["node"], r.get("cpus")) for r in records if r.get("answered", True)]
    bindings = [(node, b) for node, b in bindings if isinstance(b, dict) and isinstance(b.get("count"), int)
                and isinstance(b.get("asked"), int) and isinstance(b.get("procs"), int)]
    lines = []
    low = [(node, b) for node, b in bindings if b["count"] < b["asked"]]
    for node, binding in low[:NOTED_NODES]:
        lines.append("%s: its task is bound to %d CPU(s) (%s), fewer than the %d the job asked for each node "
                     "(slurm_cpus_per_task): the node's CPU layout in Slurm (scontrol show node %s: CPUs, "
                     "CoresPerSocket, ThreadsPerCore) or a CPU binding of the job's environment (SLURM_CPU_BIND) "
                     "does not match the allocation"
                     % (node, binding["count"], binding["list"], binding["asked"], node))
    if len(low) > NOTED_NODES:
        lines.append("and %d more node(s) bound to fewer CPUs than asked" % (len(low) - NOTED_NODES))
    shared = [(node, b) for node, b in bindings if 0 < b["count"] < b["procs"]]
    if shared:
        node, binding = shared[0]
        lines.append("the %d processes of each node share the %d CPU(s) its task is bound to on %d node(s) (%s: %s), "
                     "less than one CPU each: set slurm_cpus_per_task to at least slurm_procs_per_node (%d), such as "
                     "the CPUs of a GPU times the GPUs"
                     % (binding["procs"], binding["count"], len(shared), node, binding["list"], binding["procs"]))
    return lines


def os_name(path="/etc/os-release"):
    """The system the check runs on, as os-release names it (PRETTY_NAME): the node's own, or the
    image's in the run's container; None where there is no such file."""
    try:
        with open(path) as handle:
            for line in handle.read(65536).splitlines():
                if line.startswith("PRETTY_NAME="):
                    return shlex.split(line[len("PRETTY_NAME="):])[0] if line[len("PRETTY_NAME="):] else ""
    except (OSError, ValueError, IndexError):
        return None
    return None


def health(args, detection, runner=gpu.run, which=shutil.which):
    """gpu_health.check() where the job asks for GPUs and nvidia-smi lists some, its notes cut to
    NOTES_KEPT; None elsewhere (the table shows "-")."""
    if args.gpus <= 0 or not detection["nvidia_smi_count"]:
        return None
    found = gpu_health.check(which("nvidia-smi"), runner, dmesg=which("dmesg"), dcgmi=which("dcgmi"),
                             diag_level=args.gpu_diag)
    notes = found["notes"]
    if len(notes) > NOTES_KEPT:
        notes = notes[:NOTES_KEPT] + ["and %d more note(s)" % (len(notes) - NOTES_KEPT)]
    return dict(faults=found["faults"], notes=notes)


def check(args, environ=None, runner=gpu.run, which=shutil.which):
    """This node's record (written to args.dir/<node>.json, and returned)."""
    environ = os.environ if environ is None else environ
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    present = sorted(name for _index, name in socket.if_nameindex())
    env_path, env_text = env_file(args.run_dir, node)
    try:
        wanted = nccl.interfaces(env_file_values(env_text))
    except ValueError as exc:  # a line the shell could not read either
        wanted, env_path = [], "%s (unreadable: %s)" % (env_path, exc)
    try:
        with open(os.path.join(args.dir, "token")) as handle:
            shared = handle.read().strip() == args.token
    except OSError:
        shared = False
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-test-", dir=args.dir)
        os.close(handle)
        os.unlink(probe)
        writable = True
    except OSError:
        writable = False
    torch = gpu.torch_here() if args.gpus > 0 or args.require_torch else dict(NOT_CHECKED)
    detection = gpu.detect(sys.executable, runner=runner, environ=environ, torch=torch)
    record = dict(
        node=node, token=args.token, dir=args.dir,
        python=sys.executable, python_version=sys.version.split()[0], os=os_name(),
        torch=detection["torch"], require_torch=args.require_torch,
        gpus_requested=args.gpus, gpus_visible=visible_gpus(environ),
        nvidia_smi_count=detection["nvidia_smi_count"], torch_count=detection["torch_count"],
        detected=detection["count"], gpu_reason=detection["reason"],
        gpu_names=[g["name"] for g in detection["gpus"]], gpu_health=health(args, detection, runner, which),
        registered=slurm_registered(node, runner, args.slurm_nodes),
        env_file=env_path, interfaces=present, missing_interfaces=missing_interfaces(wanted, present),
        workspace_shared=shared, workspace_writable=writable, cpus=cpu_binding(environ, args.procs),
    )
    record["problems"] = problems(record, args.python_name, args.gpu_policy)
    record["ok"] = not record["problems"]
    write_json(os.path.join(args.dir, node + ".json"), record)
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()
    return record


def no_answer(node, timeout, python):
    return dict(node=node, ok=False, answered=False, problems=[
        "%s did not answer the node check within %s s: its slurmd, its filesystem or %s (after slurm_env_setup) "
        "does not work there; see the job log" % (node, timeout, python)])


def torch_cell(torch):
    if torch.get("checked") is False:
        return "-"
    return torch.get("version") if torch.get("importable") else "NO TORCH"


def health_cell(found):
    if not found:
        return "-"
    return "FAULTY" if found.get("faults") else "ok"


def cell(record):
    if not record.get("answered", True):
        return ["-", "-", "-", "-", "-", "-", "NO ANSWER"]
    return [
        "%d/%d/%d/%d/%s" % (record["gpus_requested"], record["gpus_visible"], record["nvidia_smi_count"],
                            record["torch_count"], "?" if record["registered"] is None else record["registered"]),
        "%s/%s" % (record["python_version"], torch_cell(record["torch"])),
        cpu_cell(record.get("cpus")),
        "missing " + ",".join(record["missing_interfaces"]) if record["missing_interfaces"] else "ok",
        "ok" if record["workspace_shared"] and record["workspace_writable"]
        else "NOT SHARED" if not record["workspace_shared"] else "READ-ONLY",
        health_cell(record.get("gpu_health")),
        "ok" if record["ok"] else "BAD",
    ]


def table(records):
    """Aligned lines: one per node, GPUS = asked/step/nvidia-smi/torch/Slurm."""
    lines = [["NODE", "GPUS(ASKED/STEP/SMI/TORCH/SLURM)", "PYTHON/TORCH", "CPUS(BOUND/ASKED)", "INTERFACES", "WORKSPACE", "GPU HEALTH", "VERDICT"]]
    lines += [[r["node"]] + cell(r) for r in records]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(line)).rstrip() for line in lines]


def gather(args, now=None):
    """Judges the records of args.nodes; returns (exit code, the summary written to args.out)."""
    records = []
    for node in args.nodes:
        try:
            record = untrusted.read(os.path.join(args.dir, node + ".json"), JSON_MAX_BYTES)
            if not isinstance(record, dict) or record.get("token") != args.token:
                raise ValueError("a record of another check")
        except (OSError, ValueError):
            record = no_answer(node, args.timeout, args.python)
        records.append(record)
    bad = dict((r["node"], "; ".join(r["problems"])) for r in records if not r["ok"])
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary = dict(job_id=args.job, restart=args.restart, time=stamp, nodes=records, bad=bad, table=table(records))
    write_json(args.out, summary)
    if bad and args.bad_nodes_file:
        bad_nodes.record(args.bad_nodes_file, bad, args.job, stamp)
    for line in summary["table"]:
        sys.stdout.write("llmtrain: node check  %s\n" % line)
    for node, reason in sorted(bad.items()):
        sys.stdout.write("llmtrain: node check: %s is bad: %s\n" % (node, reason))
    for line in cpu_notes(records):
        sys.stdout.write("llmtrain: node check: %s\n" % line)
    noted = [r for r in records if (r.get("gpu_health") or {}).get("notes")]
    for record in noted[:NOTED_NODES]:
        sys.stdout.write("llmtrain: node check: %s GPU notes: %s\n" % (record["node"], "; ".join(record["gpu_health"]["notes"])))
    if len(noted) > NOTED_NODES:
        sys.stdout.write("llmtrain: node check: and %d more node(s) with GPU notes, in %s\n" % (len(noted) - NOTED_NODES, args.out))
    sys.stdout.flush()
    return (BAD_NODES_RC if bad else 0), summary


# the run's JSON records the node package reads: a record of 2,048 bad nodes is about 300 KB, a
# node's hang dump (its ranks' stacks) tens of KB; a file larger than this is no such record
JSON_MAX_BYTES = 16 * 1048576


def read_json(path, default):
    """The JSON value in path (bounded: untrusted.read), or default when it is missing, cannot be
    read or is not of default's type."""
    try:
        value = untrusted.read(path, JSON_MAX_BYTES)
    except (OSError, ValueError):
        return default
    return value if isinstance(value, type(default)) else default


def write_json(path, value):
    """Atomic: a reader sees the old file or the new one, never half."""
    replace_file(path, (json.dumps(value, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def parser():
    top = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = top.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("--dir", required=True)
    c.add_argument("--token", required=True)
    c.add_argument("--gpus", type=int, default=0)
    c.add_argument("--require-torch", action="store_true")
    c.add_argument("--gpu-policy", choices=GPU_POLICIES, default="strict")
    c.add_argument("--gpu-diag", type=int, choices=gpu_health.DIAG_LEVELS, default=0,
                   help="dcgmi diag -r LEVEL where DCGM is installed; 0: none")
    c.add_argument("--run-dir", required=True, help="its env/ holds the env file the job sources on each node")
    c.add_argument("--python-name", default="slurm_python")
    c.add_argument("--slurm-nodes", help="`scontrol show node -o` of the job's nodes, queried once for all of them")
    c.add_argument("--procs", type=int, default=0, help="the job's processes per node, which share its task's CPUs")
    g = sub.add_parser("gather")
    g.add_argument("--dir", required=True)
    g.add_argument("--token", required=True)
    g.add_argument("--nodes", nargs="+", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--bad-nodes-file")
    g.add_argument("--timeout", default="?")
    g.add_argument("--python", default="slurm_python")
    g.add_argument("--job")
    g.add_argument("--restart", type=int, default=0)
    return top


STOP_NOTICE_ENV = "LLMTRAIN_STOP_NOTICE"


def record_stop_notice():
    """SIGUSR2 is the job's stop notice (#SBATCH --signal=USR2@lead, or scancel --signal=USR2
    for a preemption), sent to every process of the job's steps. Arriving during a check, it
    would end the check's processes and make every node look as if it had not answered; the
    check has nothing to save, so it goes on, and appends the signal and the node to the file
    $LLMTRAIN_STOP_NOTICE (the training job sets it): the job then requeues itself instead of
    starting a training that Slurm would stop without a checkpoint. Without that variable (the
    other stages' jobs, which get no notice) the notice is ignored."""
    path = os.environ.get(STOP_NOTICE_ENV)
    if not path:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        return
    line = ("SIGUSR2 on %s\n" % (os.environ.get("SLURMD_NODENAME") or socket.gethostname())).encode()

    def noted(_signum, _frame):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as exc:  # the job then starts its training, which gets no notice
            sys.stderr.write("llmtrain: the stop notice came and %s could not be written: %s\n" % (path, exc))

    signal.signal(signal.SIGUSR2, noted)


def stop_recording_notices():
    """Ignore the notice from here on, as the process ends: Python gives the signals it handles
    back to their default action as it exits, where a notice would end the process with a signal
    (and a node's check look failed). The job's other check processes still record it."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def main(argv=None):
    record_stop_notice()
    try:
        args = parser().parse_args(argv)
        if args.command == "check":
            check(args)
            return 0
        return gather(args)[0]
    finally:
        stop_recording_notices()


if __name__ == "__main__":
    raise SystemExit(main())
