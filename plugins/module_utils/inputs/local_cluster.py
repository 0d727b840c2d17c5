# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local cluster's checks (roles/local_cluster, validate.yml): what runs as root, and every
local_cluster_* value that becomes a name, an address, a path or a line of slurm.conf."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import int_or_none

OCTET = r"(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"
# (name, pattern its value must match whole, what the message says it must be)
SHAPES = (
    ("local_cluster_node_prefix", r"[a-z][a-z0-9-]{0,40}",
     "start with a-z and hold only a-z, 0-9 and - (it becomes a hostname)"),
    ("local_cluster_partition", r"[A-Za-z0-9_-]+", "hold only letters, digits, - and _"),
    ("local_cluster_dir", r"/[A-Za-z0-9._/-]+",
     "be an absolute path of letters, digits and ._/- (it is written into slurm.conf)"),
    ("local_cluster_subnet_prefix", OCTET + r"([.]" + OCTET + r"){2}", "be three octets such as 10.213.0"),
    ("local_cluster_netns_prefix", r"[a-z][a-z0-9-]{0,8}",
     "be 1 to 9 characters of a-z, 0-9 and -, starting with a letter"),
    ("local_cluster_bridge", r"[a-z][a-z0-9]{0,14}", "be 1 to 15 characters of a-z and 0-9, starting with a letter"),
    ("local_cluster_roots_dir", r"/[A-Za-z0-9._/-]+", "be an absolute path of letters, digits and ._/-"),
)


def whole(value, low, high=None):
    """value as a whole number from low to high (None: no bound), else None."""
    found = int_or_none(value)
    return found if found is not None and found >= low and (high is None or found <= high) else None


def errors(values, uid, machine_cpus):
    """values: the role's local_cluster_* variables; uid: the user id the role runs as; machine_cpus:
    this machine's online CPUs -> [message], each starting with the variable it is about."""
    v = values
    found = []
    if str(uid).strip() != "0":
        found.append("the role must run as root (it runs as uid %s): run as root or with become: true" % str(uid).strip())
    if whole(v["local_cluster_nodes"], 1, 245) is None:
        found.append("local_cluster_nodes=%s must be a number from 1 to 245 (node i has the address "
                     "local_cluster_subnet_prefix.(10 + i))" % v["local_cluster_nodes"])
    cpus = v["local_cluster_cpus_per_node"]
    if cpus is not None and whole(cpus, 1) is None:
        found.append("local_cluster_cpus_per_node=%s must be a whole number >= 1, or null for this machine's CPUs" % cpus)
    elif cpus is not None and v["local_cluster_task_plugin"] == "task/affinity" and int(cpus) > int(machine_cpus):
        found.append("local_cluster_cpus_per_node=%s is more than the %s CPUs of this machine, which task/affinity binds "
                     "tasks to (a task on a CPU the machine lacks cannot start): set it to at most %s (null: all of "
                     "them), or local_cluster_task_plugin=task/none" % (cpus, machine_cpus, machine_cpus))
    if whole(v["local_cluster_gres_gpus"], 0, 16) is None:
        found.append("local_cluster_gres_gpus=%s must be a number from 0 to 16" % v["local_cluster_gres_gpus"])
    gpu_type = v["local_cluster_gres_gpu_type"]
    if gpu_type and not re.fullmatch(r"[A-Za-z0-9_]{1,32}", str(gpu_type)):
        found.append("local_cluster_gres_gpu_type=%s must be a GPU type name: letters, digits and _ (such as tiny)" % gpu_type)
    if whole(v["local_cluster_sched_interval"], 1) is None:
        found.append("local_cluster_sched_interval=%s must be a whole number of seconds >= 1" % v["local_cluster_sched_interval"])
    if whole(v["local_cluster_cred_expire"], 5) is None:
        found.append("local_cluster_cred_expire=%s must be at least 5 (Slurm ignores smaller values and uses 120)"
                     % v["local_cluster_cred_expire"])
    for name, pattern, what in SHAPES:
        if not re.fullmatch(pattern, str(v[name])):
            found.append("%s=%s must %s" % (name, v[name], what))
    found += release_errors(v)
    return ["local_cluster: " + message for message in found]


def release_errors(v):
    """local_cluster_release and the settings of a release run from its root."""
    release, suites = str(v["local_cluster_release"]), v["local_cluster_release_suites"] or {}
    if release == "system":
        return []
    # the release names its root's directory in local_cluster_roots_dir (the module local_release_root
    # refuses the same): ASCII digits only, and nothing that leads out of it
    if not re.fullmatch(r"[0-9]+[.][0-9]+", release):
        return ["local_cluster_release=%s must be system or a Slurm release: digits 0-9, a dot and digits 0-9, such as 24.11"
                % release]
    if release not in suites:
        return ["local_cluster_release=%s must be system (this machine's Slurm) or a release that local_cluster_release_suites "
                "names a Debian suite for: %s" % (release, ", ".join(suites))]
    found = []
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,30}", str(suites[release])):
        found.append("local_cluster_release_suites must name a Debian suite (such as trixie) for each release")
    if str(v["local_cluster_accounting"]).lower() in ("true", "yes", "on", "1") and "slurmdbd" not in v["local_cluster_release_packages"]:
        found.append("local_cluster_accounting runs the slurmdbd of Slurm %s from its root (a controller does not take an "
                     "older slurmdbd), which local_cluster_release_packages lacks: add slurmdbd to it" % release)
    return found
