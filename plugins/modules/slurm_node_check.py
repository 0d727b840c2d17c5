#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_node_check
short_description: Check the idle nodes of a partition now, without waiting in the queue
description:
  - Runs the node check that every job of a run starts with (GPUs the step sees, C(nvidia-smi),
    C(torch.cuda.device_count()) and what Slurm registers; Python and torch; the network
    interfaces the run's env files name; the workspace shared and writable) on every node of a
    partition that is idle now, in one C(srun --immediate) step, so it never waits in the queue.
  - Busy, down and drained nodes are not checked; they are listed with their state and Slurm's
    reason. A node that became busy in the meantime makes the step fail at once, saying so.
  - Returns one row per node and the aligned table; with O(mode=strict) fails when a checked
    node is bad, one line per node saying what is wrong and the fix.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
options:
  partition:
    description: Partition whose nodes are checked; Slurm's default partition when unset.
    type: str
  python:
    description: Interpreter on the compute nodes (after O(env_setup)) that runs the check.
    type: str
    default: python3
  gpus:
    description: GPUs per node a job would ask for (C(--gres=gpu:N) on the step); 0 for CPU nodes.
    type: int
    default: 0
  gpu_type:
    description:
      - The GPU type a job would ask for, as the nodes register it (C(--gres=gpu:TYPE:N) on the step), such as
        C(h100); unset, any type.
    type: str
    version_added: 0.1.0
  require_torch:
    description: A node whose O(python) cannot import C(torch) is bad.
    type: bool
    default: true
  gpu_policy:
    description:
      - V(strict) makes a node whose GPUs differ from what Slurm registers, or that has a GPU fault (uncorrectable
        ECC errors, a pending page retirement or row remapping, clocks held down, an Xid in the kernel log that asks
        for a reset, a reboot or a new GPU, a failed DCGM diagnostic), bad; V(report) shows it only.
    type: str
    choices: [strict, report]
    default: strict
  gpu_diag:
    description:
      - C(dcgmi diag -r N) on each checked node where DCGM is installed, when O(gpus) is above 0; V(0) runs none.
        Level 1 takes seconds, 2 about two minutes; O(time_limit) must cover it.
    type: int
    choices: [0, 1, 2, 3, 4]
    default: 0
    version_added: 0.1.0
  mode:
    description:
      - V(strict) fails when a checked node is bad; V(report) returns the rows and the table only.
    type: str
    choices: [strict, report]
    default: strict
  scratch_dir:
    description:
      - A directory the login node and the compute nodes share (the workspace). The check's files
        are written below it for the step and removed afterwards.
    type: path
    required: true
  run_dir:
    description:
      - A run directory whose C(env/<node>.env) (else C(env/cluster.env)) name the interfaces NCCL and
        Gloo will use; without it, or before the run has env files, interfaces are not checked.
    type: path
  env_setup:
    description: Shell lines run on each node before O(python), such as C(module load cuda/12.4) (trusted).
    type: list
    elements: str
    default: []
  immediate:
    description: Seconds the step may wait for its nodes before it gives up (C(srun --immediate)).
    type: int
    default: 10
  time_limit:
    description: Time limit of the step, in minutes.
    type: int
    default: 5
  srun_extra_args:
    description: More C(srun) arguments, such as C(--account=NAME) (each one list item).
    type: list
    elements: str
    default: []
  container:
    description:
      - "The run's container, C({runtime, image, mounts, args, workspace}) (the run role's C(run_container),
        from C(slurm_container_*)): the check runs in it, as the run's jobs do, with O(python) the interpreter
        inside the image. O(scratch_dir) must be below the workspace, which is mounted at its own path."
      - Omitted, or with C(runtime=none), the check runs on the nodes as they are.
    type: dict
    version_added: 0.1.0
notes:
  - Supports check mode (it changes nothing on the cluster; the step only reads).
seealso:
  - module: llmtrain.slurm.slurm_gpu_check
"""

EXAMPLES = r"""
- name: What the idle nodes of the gpu partition give a job now
  llmtrain.slurm.slurm_node_check:
    partition: gpu
    python: /shared/venvs/train/bin/python
    gpus: 8
    scratch_dir: /shared/llmtrain
    run_dir: /shared/llmtrain/my-run
  register: survey
"""

RETURN = r"""
nodes:
  description: The check's record of every checked node (see C(plugins/module_utils/node/node_check.py)), with C(ok) and C(problems).
  returned: always
  type: list
  elements: dict
not_checked:
  description: The partition's nodes that were not idle, with C(name), C(state) and C(reason).
  returned: always
  type: list
  elements: dict
bad:
  description: Checked nodes that are bad, mapped to what is wrong.
  returned: always
  type: dict
table:
  description: Aligned lines, one per node of the partition (not-checked nodes last).
  returned: always
  type: list
  elements: str
cmd:
  description: The srun argument vector.
  returned: when a step ran
  type: list
  elements: str
"""

import os
import secrets
import shutil

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container, node_package, trusted_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import atomic, node_check
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import SlurmError
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import parse_nodes, usable


def idle(node):
    return node["state"] == "idle" and usable(node)


def state_of(node):
    return "+".join([node["state"]] + node.get("state_flags", []))


def not_checked_row(node):
    why = "other jobs hold it" if usable(node) else "out of service"
    return dict(name=node["name"], state=state_of(node), reason=node.get("reason") or why)


def step_argv(srun, p, partition, nodes, workdir, token):
    argv = [srun, "--job-name=llmtrain-node-check", "--immediate=%d" % p["immediate"],
            "--nodes=%d" % len(nodes), "--ntasks=%d" % len(nodes), "--ntasks-per-node=1",
            "--nodelist=" + ",".join(n["name"] for n in nodes), "--time=%d" % p["time_limit"],
            "--kill-on-bad-exit=0"]
    if partition:
        argv.append("--partition=" + partition)
    if p["gpus"] > 0:
        argv.append("--gres=gpu:%s%d" % (p["gpu_type"] + ":" if p["gpu_type"] else "", p["gpus"]))
    # what Slurm registers for each node is read from the listing this module already made,
    # not asked of the controller by every node
    check = [p["python"], "-m", "llmtrain_node.node_check", "check", "--dir", workdir, "--token", token,
             "--run-dir", p["run_dir"] or workdir, "--gpus", str(p["gpus"]), "--gpu-policy", p["gpu_policy"],
             "--gpu-diag", str(p["gpu_diag"]),
             "--slurm-nodes", os.path.join(workdir, SLURM_NODES)]
    if p["require_torch"]:
        check.append("--require-torch")
    # the env set-up lines are the inventory's trusted shell code; everything else is an argument
    # and the llmtrain_node package placed in workdir first on the path (workdir is an argument too)
    path_first = ['PYTHONPATH="$1${PYTHONPATH:+:${PYTHONPATH}}"', "export PYTHONPATH", "shift"]
    script = "\n".join(list(p["env_setup"]) + path_first + ['exec "$@"'])
    # in the run's container: its srun options, and its command prefix before the check (Python
    # finds the package in its working directory, workdir, whatever PYTHONPATH the image sets)
    inside = container.argv(p.get("container") or {}, workdir)  # without a container: nothing
    return (argv + inside["step"] + list(p["srun_extra_args"]) + ["--", "bash", "-c", script, "llmtrain-node-check", workdir]
            + inside["task"] + check)


SLURM_NODES = "slurm_nodes.txt"  # `scontrol show node -o` as the module listed the nodes


def place_scripts(workdir, token, slurm_nodes=""):
    """The check's files in a new directory of the user's alone, below a scratch directory that
    nobody else could replace while the step runs them. -> the problems that stop it."""
    uid = os.geteuid()
    problems, own, missing = trusted_dirs.check(workdir, uid, "scratch_dir")
    if not problems:
        _made, problems = trusted_dirs.make(missing, uid, "scratch_dir", private=[own])
    if problems:
        return problems
    try:
        os.mkdir(os.path.join(workdir, node_package.NAME), 0o700)
        for name, text in sorted(node_package.files().items()):  # what the step runs: python -m llmtrain_node.node_check
            atomic.replace_file(os.path.join(workdir, name), text.encode("utf-8"))
        atomic.replace_file(os.path.join(workdir, "token"), (token + "\n").encode("utf-8"))
        atomic.replace_file(os.path.join(workdir, SLURM_NODES), slurm_nodes.encode("utf-8"))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return []


def read_records(workdir, nodes, token, timeout, python):
    records = []
    for node in nodes:
        record = node_check.read_json(os.path.join(workdir, node["name"] + ".json"), {})
        if record.get("token") != token:
            record = node_check.no_answer(node["name"], timeout, python)
        records.append(record)
    return records


def check(slurm):
    """One step on the partition's idle nodes checks each; the nodes not idle are listed, not checked."""
    p, client, module = slurm.params, slurm.client, slurm.module
    result = slurm.result
    result.update(nodes=[], not_checked=[], bad={}, table=[])
    partitions = client.partitions()
    partition = p["partition"] or next((part["name"] for part in partitions if part.get("default")), None)
    if partition not in [part["name"] for part in partitions]:
        raise SlurmError("partition %r does not exist; Slurm has %s"
                         % (partition, ", ".join(part["name"] for part in partitions) or "none"))
    # kept as printed: the nodes read what Slurm registers for them from it
    listing = client.node_listing()
    members = [n for n in parse_nodes(listing) if partition in n["partitions"]]
    ready = [n for n in members if idle(n)]
    result["not_checked"] = [not_checked_row(n) for n in members if not idle(n)]
    step_error = None
    if ready:
        token = secrets.token_hex(12)
        workdir = os.path.join(p["scratch_dir"], ".llmtrain-node-check-" + token)
        problems = place_scripts(workdir, token, listing)
        if problems:
            raise SlurmError("\n".join(problems))
        try:
            argv = step_argv(client.bin("srun"), p, partition, ready, workdir, token)
            result["cmd"] = argv
            # the nodes write their records with the user's umask less group and other write
            env = dict(SLURM_UMASK="%04o" % trusted_dirs.strict_umask(), USER=client.user())  # ch-run needs USER
            rc, out, err = module.run_command(argv, environ_update=env)
            records = read_records(workdir, ready, token, p["time_limit"] * 60, p["python"])
            if rc != 0 and all(not r.get("answered", True) for r in records):
                step_error = "%s failed (rc %d): %s" % (" ".join(argv[:argv.index("--")]), rc,
                                                        (err or out).strip()[-1500:])
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        result["nodes"] = records
    if step_error:
        slurm.fail("the node check step did not run (a node may have become busy since it was listed "
                   "as idle: run it again): " + step_error)
    result["bad"] = dict((r["node"], "; ".join(r["problems"])) for r in result["nodes"] if not r["ok"])
    lines = node_check.table(result["nodes"]) if result["nodes"] else node_check.table([])
    result["table"] = lines + ["%s  not checked: %s (%s)" % (row["name"], row["state"].upper(), row["reason"])
                               for row in result["not_checked"]]
    if p["mode"] == "strict" and result["bad"]:
        slurm.fail("Node check found %d bad node(s) of %d checked:\n%s" % (
            len(result["bad"]), len(result["nodes"]),
            "\n".join("%s: %s" % item for item in sorted(result["bad"].items()))))
    return result


def main():
    SlurmModule(
        dict(
            partition=dict(type="str"),
            python=dict(type="str", default="python3"),
            gpus=dict(type="int", default=0),
            gpu_type=dict(type="str"),
            require_torch=dict(type="bool", default=True),
            gpu_policy=dict(type="str", default="strict", choices=["strict", "report"]),
            gpu_diag=dict(type="int", default=0, choices=[0, 1, 2, 3, 4]),
            mode=dict(type="str", default="strict", choices=["strict", "report"]),
            scratch_dir=dict(type="path", required=True),
            run_dir=dict(type="path"),
            env_setup=dict(type="list", elements="str", default=[]),
            immediate=dict(type="int", default=10),
            time_limit=dict(type="int", default=5),
            srun_extra_args=dict(type="list", elements="str", default=[]),
            container=dict(type="dict"),
        ),
        errors=(OSError,),
        supports_check_mode=True,
    ).run(check)


if __name__ == "__main__":
    main()
