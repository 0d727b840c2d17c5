# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a site requires of a job, checked against what Slurm has before anything is submitted:
the node features of slurm_constraint, the GPU type of slurm_gpu_type, the reservation of
slurm_reservation, and the account and QoS (where the cluster keeps accounting); and, below, the
partition, node count and GPUs the run needs (cluster_errors, site_errors: what preflight_cluster
judges). Each message names the variable, what Slurm has and the fix."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_facts
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.sbatch_argv import OPTION_RELEASES
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import parse_version, usable_nodes

# a --constraint this check can evaluate: features joined by & (and, also ,) and | (or);
# brackets, parentheses, counts (*N) and ! are only checked feature by feature
SIMPLE_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-:]+(?:[&|,][A-Za-z0-9_.\-:]+)*$")
FEATURE = re.compile(r"[A-Za-z0-9_.\-:]+")
# the run's variables site_errors reads
SITE_VARIABLES = ("slurm_nodes", "slurm_gpus_per_node", "slurm_constraint", "slurm_gpu_type", "slurm_reservation",
                  "slurm_account", "slurm_qos", "slurm_sbatch_options")


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


# What Slurm has against what the run needs (preflight_cluster; the filters of the same names) -----

def _int(value):
    """As Jinja's int filter: a number, or 0 for what is none."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _gpus(node):
    """The GPUs Slurm registers for node (gres/gpu), 0 when none."""
    gres = node.get("gres") if isinstance(node.get("gres"), dict) else {}
    return _int((gres.get("gpu") or {}).get("total"))


def cluster_errors(cluster, partition, usable, excluded, slurm_partition, slurm_nodes, slurm_gpus_per_node,
                   bad_nodes_file):
    """What keeps the run off the cluster Slurm has, one message each: the partition is not there
    or not up, too few usable nodes, too few of them with slurm_gpus_per_node GPUs.

    cluster: as slurm_cluster_info returns it (partitions, bad_nodes); partition: the run's, of
    its partitions (none when it has no such partition); usable: the partition's usable nodes
    less the excluded ones; excluded: the names of the nodes the run keeps off."""
    errors = []
    if not partition:
        errors.append("slurm_partition=%s does not exist: Slurm has %s." % (
            slurm_partition or "(default)", ", ".join(p["name"] for p in cluster.get("partitions") or [])))
        return errors
    usable = list(usable or [])
    nodes = _int(slurm_nodes)
    if partition.get("state") != "up":
        errors.append("slurm_partition=%s is %s: ask the administrators, or pick another partition." % (
            partition["name"], str(partition.get("state")).upper()))
    if len(usable) < nodes:
        text = "slurm_nodes=%s but partition %s has %d usable node(s) (%s" % (
            slurm_nodes, partition["name"], len(usable), ", ".join(node["name"] for node in usable) or "none")
        if excluded:
            reasons = "; ".join("%s: %s" % (name, run_facts.excluded_reason(name, cluster.get("bad_nodes"))) for name in excluded)
            text += (") besides the excluded ones (%s): repair them and remove them from %s or slurm_exclude_nodes, "
                     "or lower slurm_nodes." % (reasons, bad_nodes_file))
        else:
            text += "): lower slurm_nodes or pick a larger partition."
        errors.append(text)
    gpus = _int(slurm_gpus_per_node)
    gpu_nodes = len([node for node in usable if _gpus(node) >= gpus])
    if gpus and gpu_nodes < nodes:
        errors.append("slurm_gpus_per_node=%s but only %d usable node(s) of %s register that many GPUs (gres/gpu): "
                      "lower slurm_gpus_per_node, use 0 for CPU nodes (gloo), or fix Gres= in slurm.conf."
                      % (slurm_gpus_per_node, gpu_nodes, partition["name"]))
    return errors


def site_errors(cluster, partition, usable, values):
    """What the site requires of a job (values: slurm_constraint, slurm_gpu_type, slurm_reservation,
    slurm_account, slurm_qos, slurm_nodes, slurm_gpus_per_node) against what Slurm has (cluster: as
    slurm_cluster_info returns it, with reservations, associations and the run's container where
    asked for) ->
    {errors, notes}; partition: the run's partition's name; usable: its usable nodes less the
    excluded ones."""
    values = dict(values or {})
    usable = list(usable or [])
    nodes = _int(values.get("slurm_nodes"))
    errors = constraint_errors(values.get("slurm_constraint"), usable, nodes, partition)
    errors += release_errors(values.get("slurm_sbatch_options"), cluster.get("version"))
    errors += gpu_type_errors(values.get("slurm_gpu_type"), _int(values.get("slurm_gpus_per_node")),
                              usable, nodes, partition)
    more, notes = reservation_errors(values.get("slurm_reservation"), cluster.get("reservations"), usable,
                                     nodes, partition, cluster.get("user"), values.get("slurm_account"))
    errors += more
    more, also = association_errors(values.get("slurm_account"), values.get("slurm_qos"),
                                    cluster.get("associations"), partition, cluster.get("user"),
                                    cluster.get("associations_note"))
    # the run's container, as slurm_cluster_info found it on this node (with container=...)
    found = cluster.get("container") or {}
    return {"errors": errors + more + list(found.get("errors") or []),
            "notes": notes + also + list(found.get("notes") or [])}


def judge(cluster, v, bad_nodes_file):
    """cluster: as slurm_cluster_info finds it; v: the run's variables (JUDGED) -> (errors, notes, record)."""
    partitions = cluster.get("partitions") or []
    name = v.get("slurm_partition") or next((p["name"] for p in partitions if p.get("default")), "")
    partition = next((p for p in partitions if p["name"] == name), None)
    bad = cluster.get("bad_nodes") or {}
    excluded = run_facts.hostnames(list(run_facts.hostnames(v.get("slurm_exclude_nodes") or [])) + list(bad))
    keep_off = set(excluded)  # thousands of nodes against hundreds excluded: one lookup each
    usable = [node for node in usable_nodes(cluster.get("nodes") or [], name) if node["name"] not in keep_off]
    errors = cluster_errors(cluster, partition, usable, excluded, v.get("slurm_partition"), v.get("slurm_nodes"),
                            v.get("slurm_gpus_per_node"), bad_nodes_file)
    site = site_errors(cluster, name if partition else "", usable, dict((k, v.get(k)) for k in SITE_VARIABLES))
    if partition:
        errors += site["errors"]
    record = {"slurm_partition": partition["name"] if partition else None, "slurm_version": cluster.get("version"),
              "gpu_policy": v.get("run_gpu_policy"), "usable_nodes": [node["name"] for node in usable],
              "busy_nodes": [node["name"] for node in usable if node.get("state") != "idle"],
              "excluded_nodes": dict((node, run_facts.excluded_reason(node, bad)) for node in excluded)}
    return errors, site["notes"], record
