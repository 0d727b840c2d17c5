#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_gpu_check
short_description: Compare the GPUs Slurm registers with the GPUs every node detects
description:
  - Reads what Slurm registers for each node of a partition (or node list) - GRES, state,
    reason - and detects the GPUs of every usable node with C(nvidia-smi) and C(torch) in
    one C(srun) step (one task per node), the same detection as M(llmtrain.slurm.gpu_info).
  - Returns one row per node - registered, nvidia-smi count, torch count, match, reason, fix -
    and the names of the nodes that do not match. Nodes that are DOWN, DRAIN or INVAL
    (for example after "gres/gpu count reported lower than configured") are reported with
    Slurm's reason; they cannot run the step.
  - The cost is one C(srun) whatever the number of nodes.
  - Runs on the login node.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
options:
  partition:
    description: Partition whose nodes are checked. Without it and O(nodes), every node.
    type: str
  nodes:
    description:
      - Nodes to check (names or Slurm hostlists such as C(gpu-[01-04])). With O(partition),
        only nodes of that partition.
    type: list
    elements: str
  python:
    description: Interpreter on the compute nodes in which C(torch) is probed.
    type: str
    default: python3
  mode:
    description:
      - V(report) returns the rows and the mismatches.
      - V(strict) fails when any node does not match, one line per node saying what differs
        and the likely fix.
    type: str
    choices: [report, strict]
    default: report
  gres:
    description:
      - Request the registered GPUs for the detection step (C(--gres=gpu:N)), so that clusters
        that confine devices with cgroups show them to the step.
      - V(auto) requests them when every checked node registers the same non-zero count.
    type: str
    choices: [auto, never]
    default: auto
  time_limit:
    description: Time limit of the detection step, in minutes.
    type: int
    default: 5
  srun_extra_args:
    description: More C(srun) arguments, such as C(--account=NAME) (each one list item).
    type: list
    elements: str
    default: []
notes:
  - Supports check mode (it only reads; the detection step changes nothing).
seealso:
  - module: llmtrain.slurm.gpu_info
"""

EXAMPLES = r"""
- name: Do the GPU nodes have the GPUs Slurm thinks they have?
  llmtrain.slurm.slurm_gpu_check:
    partition: gpu
    python: /shared/venvs/train/bin/python
    mode: strict

- name: Report only, for a table
  llmtrain.slurm.slurm_gpu_check:
    nodes:
      - "slurm-worker-[0-2]"
  register: gpu_check
"""

RETURN = r"""
nodes:
  description: One row per checked node.
  returned: always
  type: list
  elements: dict
  sample:
    - name: slurm-worker-0
      state: idle
      registered: 2
      nvidia_smi_count: 0
      torch_count: 0
      detected: 0
      match: false
      reason: "Slurm registers gpu:2, the node detects 0 (nvidia-smi not found ...)"
      fix: "make the NVIDIA driver on slurm-worker-0 see all 2 GPUs ..."
      slurm_reason: null
mismatches:
  description: Names of the nodes whose row does not match.
  returned: always
  type: list
  elements: str
table:
  description: The rows as aligned text lines, for printing.
  returned: always
  type: list
  elements: str
cmd:
  description: The srun argument vector (the detection script shown as C(<detection script>)).
  returned: when a step ran
  type: list
  elements: str
"""

import inspect
import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.gpu_check import compare
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import SlurmError
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import expand_hostlist, usable


def select_nodes(all_nodes, partition, wanted):
    nodes = all_nodes
    if partition:
        nodes = [n for n in nodes if partition in n["partitions"]]
    if wanted:
        names = set(name for item in wanted for name in expand_hostlist(item))
        unknown = sorted(names - set(n["name"] for n in all_nodes))
        if unknown:
            raise SlurmError("Slurm knows no node named %s" % ", ".join(unknown))
        nodes = [n for n in nodes if n["name"] in names]
    return nodes


def step_argv(srun, nodes, partition, python, gres, time_limit, extra):
    argv = [srun, "--job-name=llmtrain-gpu-check", "--nodes=%d" % len(nodes), "--ntasks=%d" % len(nodes),
            "--ntasks-per-node=1", "--nodelist=" + ",".join(n["name"] for n in nodes),
            "--time=%d" % time_limit, "--kill-on-bad-exit=0"]
    if partition:
        argv.append("--partition=" + partition)
    if gres:
        argv.append("--gres=gpu:%d" % gres)
    return argv + list(extra) + ["--", python, "-c", inspect.getsource(gpu), python]


def requested_gres(nodes, mode):
    counts = set(n["gres"].get("gpu", {}).get("total", 0) for n in nodes)
    return counts.pop() if mode == "auto" and len(counts) == 1 else 0


def parse_detections(stdout):
    """JSON lines printed by the nodes -> {node name: detection}."""
    found = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        found[record.get("slurm_node") or record.get("hostname")] = record
    return found


def format_table(rows):
    header = ("NODE", "STATE", "SLURM", "NVIDIA-SMI", "TORCH", "MATCH")
    lines = [header] + [(r["name"], r["state"], str(r["registered"]),
                         "-" if r["nvidia_smi_count"] is None else str(r["nvidia_smi_count"]),
                         "-" if r["torch_count"] is None else str(r["torch_count"]),
                         "yes" if r["match"] else "NO") for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)) for line in lines]


def check(slurm):
    """Each node's GPUs as one step detects them, against what Slurm registers."""
    p, client, module = slurm.params, slurm.client, slurm.module
    result = slurm.result
    result.update(nodes=[], mismatches=[], table=[])
    all_nodes = client.nodes()
    if p["partition"]:
        names = [part["name"] for part in client.partitions()]
        if p["partition"] not in names:
            raise SlurmError("partition %r does not exist; Slurm has %s" % (p["partition"], ", ".join(names) or "none"))
    nodes = select_nodes(all_nodes, p["partition"], p["nodes"])
    if not nodes:
        raise SlurmError("no node to check (partition %s, nodes %s)" % (p["partition"], p["nodes"]))
    ready = [n for n in nodes if usable(n)]
    detections = {}
    if ready:
        argv = step_argv(client.bin("srun"), ready, p["partition"], p["python"],
                         requested_gres(ready, p["gres"]), p["time_limit"], p["srun_extra_args"])
        result["cmd"] = argv[:-2] + ["<detection script>", argv[-1]]
        rc, out, err = module.run_command(argv)
        detections = parse_detections(out)
        if rc != 0 and not detections:
            slurm.fail("the GPU detection step did not run: %s failed (rc %d): %s"
                       % (" ".join(result["cmd"]), rc, (err or out).strip()[-1500:]))

    rows = [compare(node, detections.get(node["name"]), p["python"]) for node in nodes]
    result.update(nodes=rows, mismatches=[r["name"] for r in rows if not r["match"]], table=format_table(rows))
    if p["mode"] == "strict" and result["mismatches"]:
        slurm.fail("GPU check failed on %d of %d node(s):\n%s" % (
            len(result["mismatches"]), len(rows),
            "\n".join("%s: %s. Likely fix: %s." % (r["name"], r["reason"], r["fix"]) for r in rows if not r["match"])))
    return result


def main():
    SlurmModule(
        dict(
            partition=dict(type="str"),
            nodes=dict(type="list", elements="str"),
            python=dict(type="str", default="python3"),
            mode=dict(type="str", default="report", choices=["report", "strict"]),
            gres=dict(type="str", default="auto", choices=["auto", "never"]),
            time_limit=dict(type="int", default=5),
            srun_extra_args=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    ).run(check)


if __name__ == "__main__":
    main()
