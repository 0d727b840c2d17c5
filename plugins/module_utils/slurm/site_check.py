# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a site requires of a job, checked against what Slurm has before anything is submitted:
the node features of slurm_constraint, the GPU type of slurm_gpu_type, the reservation of
slurm_reservation, and the account and QoS (where the cluster keeps accounting). Each message
names the variable, what Slurm has and the fix."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.sbatch_argv import OPTION_RELEASES
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import parse_version

# a --constraint this check can evaluate: features joined by & (and, also ,) and | (or);
# brackets, parentheses, counts (*N) and ! are only checked feature by feature
SIMPLE_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-:]+(?:[&|,][A-Za-z0-9_.\-:]+)*$")
FEATURE = re.compile(r"[A-Za-z0-9_.\-:]+")


def _listing(counts, limit=8):
    """{name: nodes} -> 'a (3 nodes), b (1 node)', the most common first, at most limit names."""
    items = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join("%s (%d node%s)" % (name, n, "" if n == 1 else "s") for name, n in items[:limit])
    return (text + (", and %d more" % (len(items) - limit) if len(items) > limit else "")) or "none"


def satisfies(features, constraint):
    """Whether a node with these features meets a simple constraint (OR of ANDs)."""
    have = set(features or [])
    return any(all(part in have for part in re.split(r"[&,]", term)) for term in constraint.split("|"))


def constraint_errors(constraint, usable, nodes_needed, partition):
    """slurm_constraint against the features of the partition's usable nodes."""
    if not constraint:
        return []
    counts = {}
    for node in usable:
        for feature in node.get("features") or []:
            counts[feature] = counts.get(feature, 0) + 1
    # (counts such as the 2 of h100*2 are not features)
    unknown = sorted(name for name in set(FEATURE.findall(constraint)) - set(counts) if not untrusted.digits(name))
    if unknown:
        return ["slurm_constraint=%s names %s, which no usable node of partition %s has; their features: %s. "
                "Name features the nodes have (scontrol show node lists AvailableFeatures), or unset slurm_constraint."
                % (constraint, " and ".join("feature " + name for name in unknown), partition, _listing(counts))]
    if SIMPLE_CONSTRAINT.fullmatch(constraint):
        matching = sum(1 for node in usable if satisfies(node.get("features"), constraint))
        if matching < nodes_needed:
            return ["slurm_constraint=%s: %d usable node%s of partition %s meet%s it, and slurm_nodes=%d; their "
                    "features: %s. Loosen the constraint, or lower slurm_nodes to %d."
                    % (constraint, matching, "" if matching == 1 else "s", partition, "s" if matching == 1 else "",
                       nodes_needed, _listing(counts), max(matching, 1))]
    return []


def gpu_type_errors(gpu_type, gpus_per_node, usable, nodes_needed, partition):
    """slurm_gpu_type against the typed GPUs (Gres=gpu:TYPE:N) the partition's usable nodes register."""
    if not gpu_type or not gpus_per_node:
        return []
    counts, enough = {}, 0
    for node in usable:
        gpu = ((node.get("gres") or {}).get("gpu") or {})
        for name in gpu.get("types") or {}:
            counts["gpu:%s" % name] = counts.get("gpu:%s" % name, 0) + 1
        if gpu.get("untyped"):
            counts["gpu (untyped)"] = counts.get("gpu (untyped)", 0) + 1
        if (gpu.get("types") or {}).get(gpu_type, 0) >= gpus_per_node:
            enough += 1
    if "gpu:" + gpu_type not in counts:
        return ["slurm_gpu_type=%s: no usable node of partition %s registers GPUs of that type; they register %s. "
                "Use a type they register (Gres=gpu:TYPE:N in scontrol show node), or unset slurm_gpu_type."
                % (gpu_type, partition, _listing(counts))]
    if enough < nodes_needed:
        return ["slurm_gpu_type=%s: %d usable node%s of partition %s register%s %d GPUs of that type "
                "(slurm_gpus_per_node) and slurm_nodes=%d. Lower slurm_nodes or slurm_gpus_per_node, or pick "
                "another type." % (gpu_type, enough, "" if enough == 1 else "s", partition, "s" if enough == 1 else "",
                                   gpus_per_node, nodes_needed)]
    return []


def reservation_errors(name, reservations, usable, nodes_needed, partition, user=None, account=None):
    """slurm_reservation against `scontrol show reservation`: it exists, is for this partition,
    user or account, and holds enough of the run's usable nodes. Returns (errors, notes)."""
    if not name:
        return [], []
    found = [r for r in reservations or [] if r.get("name") == name]
    if not found:
        names = sorted(r.get("name") for r in reservations or [])
        return ["slurm_reservation=%s does not exist; Slurm has %s (scontrol show reservation). Fix the name, or "
                "unset slurm_reservation." % (name, ", ".join(names) or "no reservation")], []
    res = found[0]
    errors, notes = [], []
    if res.get("partition") and res["partition"] != partition:
        errors.append("slurm_reservation=%s is for partition %s, and the run's is %s: set slurm_partition=%s, or "
                      "use another reservation." % (name, res["partition"], partition, res["partition"]))
    users, accounts = res.get("users") or [], res.get("accounts") or []
    allowed_users = [u for u in users if not u.startswith("-")]
    allowed_accounts = [a for a in accounts if not a.startswith("-")]
    if (user and (("-" + user) in users or allowed_users and user not in allowed_users)
            and not (account and account in allowed_accounts)):
        errors.append("slurm_reservation=%s is for %s, not for %s: ask its owner to add you, or set slurm_account "
                      "to one of its accounts." % (name, ", ".join(
                          ["users " + ", ".join(users)] + (["accounts " + ", ".join(accounts)] if accounts else [])),
                          user))
    usable_names = set(n["name"] for n in usable)
    inside = [n for n in res.get("nodes") or [] if n in usable_names]
    if len(inside) < nodes_needed:
        errors.append("slurm_reservation=%s holds %d usable node%s of partition %s (%s), and slurm_nodes=%d: lower "
                      "slurm_nodes to %d, or use a larger reservation." % (
                          name, len(inside), "" if len(inside) == 1 else "s", partition, ", ".join(inside) or "none",
                          nodes_needed, max(len(inside), 1)))
    if res.get("state") != "active":
        notes.append("slurm_reservation=%s starts at %s (Slurm's time): the run's jobs wait in the queue until then."
                     % (name, res.get("start_time")))
    return errors, notes


def association_errors(account, qos, associations, partition, user=None, why=None):
    """slurm_account and slurm_qos against the user's associations (sacctmgr show assoc): None
    where they could not be read (why: such as no accounting database), so there was nothing to
    check them against. Returns (errors, notes)."""
    if not account and not qos:
        return [], []
    if associations is None:
        return [], ["%s not checked: %s; Slurm itself takes or refuses %s when the first job is submitted." % (
            " and ".join(n for n, v in (("slurm_account", account), ("slurm_qos", qos)) if v),
            why or "the user's associations could not be read", "them" if account and qos else "it")]
    mine = [a for a in associations if not a.get("partition") or a.get("partition") == partition]
    accounts = sorted(set(a["account"] for a in mine if a.get("account")))
    errors = []
    if account and account not in accounts:
        errors.append("slurm_account=%s is not an account %s may use%s; the associations allow %s (sacctmgr show "
                      "assoc user=%s). Set one of them, or ask the administrators to add you to %s."
                      % (account, user or "you", " in partition %s" % partition if partition else "",
                         ", ".join(accounts) or "none", user or "$USER", account))
    if qos:
        chosen = [a for a in mine if not account or a.get("account") == account]
        allowed = sorted(set(q for a in chosen for q in a.get("qos") or []))
        if qos not in allowed:
            errors.append("slurm_qos=%s is not a QoS %s may use%s; allowed: %s. Set one of them, or unset slurm_qos "
                          "for the default." % (qos, user or "you", " with account %s" % account if account else "",
                                                ", ".join(allowed) or "none"))
    return errors, []


def option_release_error(name, version):
    """Why sbatch of Slurm `version` (as scontrol --version gives it) lacks the long option `name`, or
    None (also when the version is unknown: sbatch then says it itself)."""
    parsed = parse_version(str(version or ""))
    if not parsed:
        return None
    have = tuple(int(part) for part in parsed.split(".")[:2])
    first, gone = OPTION_RELEASES.get(name, (None, None))
    if first and have < first:
        return "--%s needs Slurm %d.%02d or later, and this cluster runs %s" % (name, first[0], first[1], parsed)
    if gone and have >= gone:
        return "--%s was removed in Slurm %d.%02d, and this cluster runs %s" % (name, gone[0], gone[1], parsed)
    return None


def release_errors(sbatch_options, version):
    """slurm_sbatch_options against the sbatch of the cluster's release (scontrol --version)."""
    found = []
    for key in sorted(sbatch_options or {}, key=str):
        why = option_release_error(str(key).replace("_", "-"), version)
        if why and (sbatch_options or {}).get(key) not in (None, False):
            found.append("slurm_sbatch_options: %s: %s. Leave it out on this cluster." % (key, why))
    return found
