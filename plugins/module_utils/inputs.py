# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the inventory's cluster-shape variables (slurm_*, preflight_*), done before
anything reaches Slurm. Every message names the variable, the bad value and the fix."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils import nccl

PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")
MEMORY = re.compile(r"^[1-9][0-9]*[KMGT]?$")
# minutes | MM:SS | HH:MM:SS | D-HH | D-HH:MM | D-HH:MM:SS
TIME_LIMIT = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|\d+-\d{1,2}:\d{1,2}:\d{1,2})$")


def _int(value):
    """value as an int when it is one (or a string of digits), else None; bools are not ints."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^-?\d+$", value.strip()):
        return int(value)
    return None


def _count(errors, values, name, minimum, fix):
    if name not in values:
        return None
    number = _int(values[name])
    if number is None or number < minimum:
        errors.append("%s=%r must be a whole number >= %d: %s." % (name, values[name], minimum, fix))
        return None
    return number


def validate(values):
    """values: the slurm_*, preflight_* and nccl_env_* variables that are set -> [message]."""
    errors = []
    if "slurm_partition" in values and not PARTITION.match(str(values["slurm_partition"] or "")):
        errors.append("slurm_partition=%r is not a partition name: use one that `sinfo -s` lists "
                      "(letters, digits, . _ -)." % values["slurm_partition"])
    _count(errors, values, "slurm_nodes", 1, "how many nodes the job runs on")
    gpus = _count(errors, values, "slurm_gpus_per_node", 0, "GPUs per node, 0 for CPU nodes (gloo)")
    procs = _count(errors, values, "slurm_procs_per_node", 1, "training processes per node, usually one per GPU")
    _count(errors, values, "slurm_cpus_per_task", 1, "CPUs for each node's launcher task and its workers")
    if gpus and procs and procs > gpus:
        errors.append("slurm_procs_per_node=%d is more than slurm_gpus_per_node=%d: each process needs its own "
                      "GPU, so set slurm_procs_per_node to %d or fewer." % (procs, gpus, gpus))
    if "slurm_mem_per_cpu" in values and not MEMORY.match(str(values["slurm_mem_per_cpu"])):
        errors.append("slurm_mem_per_cpu=%r is not a Slurm memory size: a number with an optional K, M, G or T "
                      "suffix, such as 2G or 512M." % values["slurm_mem_per_cpu"])
    if "slurm_time_limit" in values:
        limit = str(values["slurm_time_limit"])
        if not (TIME_LIMIT.match(limit) or limit.upper() in ("UNLIMITED", "INFINITE")):
            errors.append("slurm_time_limit=%r is not a Slurm time: use minutes, HH:MM:SS or D-HH:MM:SS "
                          "(for example \"04:00:00\" or \"2-00:00:00\")." % values["slurm_time_limit"])
    if "slurm_master_port" in values and str(values["slurm_master_port"]) != "auto":
        port = _int(values["slurm_master_port"])
        if port is None or not 1024 <= port <= 65535:
            errors.append("slurm_master_port=%r must be auto (derived from the job id) or a port from 1024 "
                          "to 65535 that is free on the first node." % values["slurm_master_port"])
    if "slurm_workspace" in values:
        workspace = str(values["slurm_workspace"] or "")
        if not workspace.startswith("/") or "\n" in workspace or "\0" in workspace:
            errors.append("slurm_workspace=%r must be an absolute path to a directory that the login node and "
                          "every compute node share." % values["slurm_workspace"])
    if "slurm_python" in values:
        python = values["slurm_python"]
        if not isinstance(python, str) or not python.strip() or "\n" in python or "\0" in python:
            errors.append("slurm_python=%r must name the Python interpreter on the compute nodes, such as "
                          "python3 or /shared/venvs/train/bin/python." % (python,))
    if "slurm_env_setup" in values:
        setup = values["slurm_env_setup"]
        if not isinstance(setup, list) or not all(isinstance(line, str) and "\n" not in line for line in setup):
            errors.append("slurm_env_setup=%r must be a list of shell lines, one line per item, such as "
                          "['module load cuda/12.4']." % (setup,))
    if "preflight_gpu_policy" in values and values["preflight_gpu_policy"] not in ("strict", "report"):
        errors.append("preflight_gpu_policy=%r must be strict (fail on a GPU mismatch) or report (only "
                      "show it)." % values["preflight_gpu_policy"])
    errors.extend(nccl.build_env({k: v for k, v in values.items() if k.startswith(nccl.PREFIX)})[1])
    return errors
