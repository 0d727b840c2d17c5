# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the slurm_* variables (the slurm role's): what a spec cannot say of them - Slurm's
syntax for partitions, memory, times and hostlists, ranges, and how they relate."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, int_or_none, one_line

PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")
MEMORY = re.compile(r"^[1-9][0-9]*[KMGT]?$")
# minutes | MM:SS | HH:MM:SS | D-HH | D-HH:MM | D-HH:MM:SS
TIME_LIMIT = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|\d+-\d{1,2}:\d{1,2}:\d{1,2})$")
NODE_ITEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\]]*")


def errors(values):
    """values: the variables that are set -> [message] about the slurm_* among them."""
    found = []
    if "slurm_partition" in values and not PARTITION.fullmatch(str(values["slurm_partition"] or "")):
        found.append("slurm_partition=%r is not a partition name: use one that `sinfo -s` lists "
                     "(letters, digits, . _ -)." % values["slurm_partition"])
    count(found, values, "slurm_nodes", 1, "how many nodes the job runs on")
    gpus = count(found, values, "slurm_gpus_per_node", 0, "GPUs per node, 0 for CPU nodes (gloo)")
    procs = count(found, values, "slurm_procs_per_node", 1, "training processes per node, usually one per GPU")
    count(found, values, "slurm_cpus_per_task", 1, "CPUs for each node's launcher task and its workers")
    if gpus and procs and procs > gpus:
        found.append("slurm_procs_per_node=%d is more than slurm_gpus_per_node=%d: each process needs its own "
                     "GPU, so set slurm_procs_per_node to %d or fewer." % (procs, gpus, gpus))
    if "slurm_mem_per_cpu" in values and not MEMORY.fullmatch(str(values["slurm_mem_per_cpu"])):
        found.append("slurm_mem_per_cpu=%r is not a Slurm memory size: a number with an optional K, M, G or T "
                     "suffix, such as 2G or 512M." % values["slurm_mem_per_cpu"])
    if "slurm_time_limit" in values:
        limit = str(values["slurm_time_limit"])
        if not (TIME_LIMIT.fullmatch(limit) or limit.upper() in ("UNLIMITED", "INFINITE")):
            found.append("slurm_time_limit=%r is not a Slurm time: use minutes, HH:MM:SS or D-HH:MM:SS "
                         "(for example \"04:00:00\" or \"2-00:00:00\")." % values["slurm_time_limit"])
    if "slurm_master_port" in values and str(values["slurm_master_port"]) != "auto":
        port = int_or_none(values["slurm_master_port"])
        if port is None or not 1024 <= port <= 65535:
            found.append("slurm_master_port=%r must be auto (derived from the job id) or a port from 1024 "
                         "to 65535 that is free on the first node." % values["slurm_master_port"])
    if "slurm_workspace" in values:
        workspace = str(values["slurm_workspace"] or "")
        if not workspace.startswith("/") or "\n" in workspace or "\0" in workspace:
            found.append("slurm_workspace=%r must be an absolute path to a directory that the login node and "
                         "every compute node share." % values["slurm_workspace"])
        elif "\\" in workspace:
            found.append("slurm_workspace=%r contains a backslash, which turns off Slurm's %%j/%%x in the job log "
                         "names there: pick a path without one." % values["slurm_workspace"])
    if "slurm_python" in values and not one_line(values["slurm_python"]):
        found.append("slurm_python=%r must name the Python interpreter on the compute nodes, such as "
                     "python3 or /shared/venvs/train/bin/python." % (values["slurm_python"],))
    if "slurm_env_setup" in values:
        setup = values["slurm_env_setup"]
        if not isinstance(setup, list) or not all(isinstance(line, str) and "\n" not in line for line in setup):
            found.append("slurm_env_setup=%r must be a list of shell lines, one line per item, such as "
                         "['module load cuda/12.4']." % (setup,))
    count(found, values, "slurm_node_check_timeout", 10, "seconds the node check step of a job may take")
    if "slurm_exclude_nodes" in values:
        nodes = values["slurm_exclude_nodes"]
        if not isinstance(nodes, list) or not all(
                isinstance(n, str) and all(NODE_ITEM.fullmatch(i.strip()) for i in n.split(",")) for n in nodes):
            found.append("slurm_exclude_nodes=%r must be a list of node names or hostlists, such as "
                         "[gpu-07, \"gpu-[10-12]\"]." % (nodes,))
    return found
