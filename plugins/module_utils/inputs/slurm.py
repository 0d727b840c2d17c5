# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the slurm_* variables (the slurm role's): what a spec cannot say of them - Slurm's
syntax for partitions, memory, times and hostlists, ranges, and how they relate."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, int_or_none, one_line
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.sbatch_argv import COLLECTION_OPTIONS, SBATCH_OPTIONS

PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")
MEMORY = re.compile(r"^[1-9][0-9]*[KMGT]?$")
# minutes | MM:SS | HH:MM:SS | D-HH | D-HH:MM | D-HH:MM:SS
TIME_LIMIT = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|\d+-\d{1,2}:\d{1,2}:\d{1,2})$", re.ASCII)
NODE_ITEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\]]*")
# an account, QoS, reservation or GPU type name: Slurm's names have no blanks, commas or colons
SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-+@]*$")
# --constraint: features joined by & (and), | (or), [..] (one of), *N (counts) and parentheses
CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-&|\[\]()*!,:]+$")
# sbatch's --mail-type values (its man page, 22.05 to 25.05)
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
OPTION_KEY = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    if "slurm_client_env" in values:
        found.extend(client_env_errors(values["slurm_client_env"]))
    count(found, values, "slurm_node_check_timeout", 10, "seconds the node check step of a job may take")
    if "slurm_exclude_nodes" in values:
        nodes = values["slurm_exclude_nodes"]
        if not isinstance(nodes, list) or not all(
                isinstance(n, str) and all(NODE_ITEM.fullmatch(i.strip()) for i in n.split(",")) for n in nodes):
            found.append("slurm_exclude_nodes=%r must be a list of node names or hostlists, such as "
                         "[gpu-07, \"gpu-[10-12]\"]." % (nodes,))
    found.extend(site_errors(values))
    found.extend(container.input_errors(values))
    return found


def client_env_errors(env):
    """slurm_client_env: a mapping of environment variable names to one-line strings."""
    if env is None:
        return []
    if not isinstance(env, dict):
        return ["slurm_client_env=%r must be a mapping of environment variables to values, such as "
                "{SLURM_CONF: /etc/slurm-b/slurm.conf}." % (env,)]
    found = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            found.append("slurm_client_env: %r is not an environment variable name (letters, digits and _, not "
                         "starting with a digit)." % (name,))
        elif not isinstance(value, (str, int, float)) or isinstance(value, bool) or not one_line(str(value)):
            found.append("slurm_client_env.%s=%r must be one line of text." % (name, value))
        elif name == "PATH" and not all(part.startswith("/") for part in str(value).split(":") if part):
            found.append("slurm_client_env.PATH=%r must list absolute directories, as the whole PATH of the Slurm "
                         "commands (such as /opt/slurm/bin:/usr/bin:/bin)." % (value,))
    return found


def site_errors(values):
    """What the site requires of a job: account, QoS, reservation, constraint, typed GPUs, mail and
    any other sbatch option (slurm_sbatch_options)."""
    found = []
    for name, what in (("slurm_account", "an account name, such as ml-team"),
                       ("slurm_qos", "a QoS name, such as normal or high"),
                       ("slurm_reservation", "a reservation name, as `scontrol show reservation` lists it"),
                       ("slurm_gpu_type", "a GPU type as the nodes register it (their Gres=gpu:TYPE:N), such as h100")):
        if name in values and not (isinstance(values[name], str) and SLURM_NAME.fullmatch(values[name])):
            found.append("%s=%r must be %s: letters, digits and _ . - + @, no blanks, commas or colons."
                         % (name, values[name], what))
    if "slurm_constraint" in values and not (isinstance(values["slurm_constraint"], str)
                                             and CONSTRAINT.fullmatch(values["slurm_constraint"])):
        found.append("slurm_constraint=%r must be node features in --constraint's syntax, such as h100, "
                     "\"h100&ib\" or \"a100|h100\" (no blanks)." % (values["slurm_constraint"],))
    if values.get("slurm_gpu_type") and int_or_none(values.get("slurm_gpus_per_node")) == 0:
        found.append("slurm_gpu_type=%s asks for GPUs of that type, but slurm_gpus_per_node=0 asks for none: set "
                     "slurm_gpus_per_node, or unset slurm_gpu_type." % values["slurm_gpu_type"])
    if "slurm_mail_type" in values:
        kinds = str(values["slurm_mail_type"]).split(",")
        bad = [kind for kind in kinds if kind.strip().upper() not in MAIL_TYPES]
        if bad or not one_line(values["slurm_mail_type"]):
            found.append("slurm_mail_type=%r must be sbatch --mail-type values joined by commas, such as END,FAIL "
                         "(%s)." % (values["slurm_mail_type"], ", ".join(MAIL_TYPES)))
    if "slurm_mail_user" in values:
        if not one_line(values["slurm_mail_user"]) or " " in str(values["slurm_mail_user"]):
            found.append("slurm_mail_user=%r must be one mail address or user name, such as ada@example.org."
                         % (values["slurm_mail_user"],))
        elif "slurm_mail_type" not in values:
            found.append("slurm_mail_user=%s is set but slurm_mail_type is not, so no mail is sent: set "
                         "slurm_mail_type, such as END,FAIL." % values["slurm_mail_user"])
    if "slurm_sbatch_options" in values:
        found.extend(sbatch_option_errors(values["slurm_sbatch_options"]))
    return found


def sbatch_option_errors(options):
    """slurm_sbatch_options: {long option: value} of sbatch options the collection does not set."""
    if not isinstance(options, dict):
        return ["slurm_sbatch_options=%r must be a mapping of sbatch long options to values, such as "
                "{wckey: llm, nice: 10} (true for a flag)." % (options,)]
    found = []
    for key in sorted(options, key=str):
        value = options[key]
        name = key.replace("_", "-") if isinstance(key, str) else key
        if not isinstance(key, str) or not OPTION_KEY.fullmatch(key):
            found.append("slurm_sbatch_options: %r is not an sbatch long option name: write it without its dashes, "
                         "such as wckey or cpu-freq." % (key,))
        elif name in COLLECTION_OPTIONS and COLLECTION_OPTIONS[name].startswith("the collection"):
            found.append("slurm_sbatch_options: %s is one the collection sets itself (%s): leave it out."
                         % (key, COLLECTION_OPTIONS[name][len("the collection ("):-1]))
        elif name in COLLECTION_OPTIONS:
            found.append("slurm_sbatch_options: %s is one the collection sets for every job: set %s instead."
                         % (key, COLLECTION_OPTIONS[name]))
        elif name not in SBATCH_OPTIONS:
            found.append("slurm_sbatch_options: %s is not an option of sbatch (or one the module sets itself: job "
                         "name, comment, chdir, parsable, wait): see `man sbatch`." % key)
        elif not (value is True or isinstance(value, (int, float)) and not isinstance(value, bool)
                  or isinstance(value, str) and one_line(value)):
            found.append("slurm_sbatch_options: %s=%r must be a string or number on one line, or true for a flag "
                         "(false or null: leave it out)." % (key, value))
    return found
