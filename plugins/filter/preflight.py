# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the preflight role: judging inputs and what Slurm has.

  values | llmtrain.slurm.input_errors(workers)    -> [message] for slurm_*/preflight_*/nccl_env_*
  nodes | llmtrain.slurm.usable_nodes(partition)  -> nodes of the partition that can run a step
  nodes | llmtrain.slurm.out_of_service_nodes(partition) -> the partition's other nodes (down, drained, ...)
  name | llmtrain.slurm.excluded_reason(bad_nodes) -> why the run keeps off that node
  hostlists | llmtrain.slurm.hostnames           -> node names (gpu-[01-04] expanded)
  gpu_check_row | llmtrain.slurm.gpu_mismatch_line -> "node: what differs. Likely fix: ..."
  values | llmtrain.slurm.workspace_need           -> {bytes, how} the run's checkpoints take, or none
  cluster | llmtrain.slurm.cluster_errors(partition, usable, excluded, slurm_partition, slurm_nodes,
                                          slurm_gpus_per_node, bad_nodes_file) -> [message]
  cluster | llmtrain.slurm.site_errors(partition, usable, values) -> {errors, notes} of the site's options
"""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_facts
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import site_check
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import nccl
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import out_of_service_nodes, usable_nodes


def input_errors(values, workers=None):
    """workers: {node name: its variables} of the slurm_workers group (per-node nccl_env_*)."""
    errors = inputs.validate(dict(values))
    for name, variables in sorted((workers or {}).items()):
        settings = {k: variables[k] for k in list(variables) if str(k).startswith(nccl.PREFIX)}
        errors.extend("%s (host vars of %s)" % (message, name) for message in nccl.build_env(settings)[1])
    return errors


def hostnames(hostlists):
    """Node names and Slurm hostlists (gpu-[01-04], a,b) -> the node names, in order, once each."""
    return run_facts.hostnames(hostlists)


def excluded_reason(node, bad_nodes):
    """Why a run keeps off node: the reason its node check recorded in bad_nodes.json, or that
    slurm_exclude_nodes names it."""
    return run_facts.excluded_reason(node, bad_nodes)


def gpu_mismatch_line(row):
    return "%s: %s. Likely fix: %s." % (row["name"], row["reason"], row["fix"])


def workspace_need(values):
    need = inputs.workspace_need(dict(values))
    return {"bytes": need[0], "how": need[1]} if need else None


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
            reasons = "; ".join("%s: %s" % (name, excluded_reason(name, cluster.get("bad_nodes"))) for name in excluded)
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
    errors = site_check.constraint_errors(values.get("slurm_constraint"), usable, nodes, partition)
    errors += site_check.release_errors(values.get("slurm_sbatch_options"), cluster.get("version"))
    errors += site_check.gpu_type_errors(values.get("slurm_gpu_type"), _int(values.get("slurm_gpus_per_node")),
                                         usable, nodes, partition)
    more, notes = site_check.reservation_errors(values.get("slurm_reservation"), cluster.get("reservations"), usable,
                                                nodes, partition, cluster.get("user"), values.get("slurm_account"))
    errors += more
    more, also = site_check.association_errors(values.get("slurm_account"), values.get("slurm_qos"),
                                               cluster.get("associations"), partition, cluster.get("user"),
                                               cluster.get("associations_note"))
    # the run's container, as slurm_cluster_info found it on this node (with container=...)
    found = cluster.get("container") or {}
    return {"errors": errors + more + list(found.get("errors") or []),
            "notes": notes + also + list(found.get("notes") or [])}


class FilterModule(object):
    def filters(self):
        return {"input_errors": input_errors, "usable_nodes": usable_nodes,
                "out_of_service_nodes": out_of_service_nodes, "excluded_reason": excluded_reason,
                "hostnames": hostnames,
                "gpu_mismatch_line": gpu_mismatch_line,
                "workspace_need": workspace_need,
                "cluster_errors": cluster_errors,
                "site_errors": site_errors}
