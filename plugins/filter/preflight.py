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
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.site_check import cluster_errors, site_errors
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


class FilterModule(object):
    def filters(self):
        return {"input_errors": input_errors, "usable_nodes": usable_nodes,
                "out_of_service_nodes": out_of_service_nodes, "excluded_reason": excluded_reason,
                "hostnames": hostnames,
                "gpu_mismatch_line": gpu_mismatch_line,
                "workspace_need": workspace_need,
                "cluster_errors": cluster_errors,
                "site_errors": site_errors}
