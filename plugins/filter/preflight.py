# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the preflight role: judging inputs and what the node probe found.

  values | llmtrain.slurm.input_errors(workers)    -> [message] for slurm_*/preflight_*/nccl_env_*
  nodes | llmtrain.slurm.usable_nodes(partition)  -> nodes of the partition that can run a step
  nodes | llmtrain.slurm.out_of_service_nodes(partition) -> the partition's other nodes (down, drained, ...)
  name | llmtrain.slurm.probe_errors(found, python, workspace) -> [message] for one node
  name | llmtrain.slurm.probe_summary(found)      -> one table cell
  gpu_check_row | llmtrain.slurm.gpu_mismatch_line -> "node: what differs. Likely fix: ..."
  values | llmtrain.slurm.workspace_need           -> {bytes, how} the run's checkpoints take, or none
"""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs, nccl
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm_parse import out_of_service_nodes, usable_nodes


def input_errors(values, workers=None):
    """workers: {node name: its variables} of the slurm_workers group (per-node nccl_env_*)."""
    errors = inputs.validate(dict(values))
    for name, variables in sorted((workers or {}).items()):
        settings = {k: variables[k] for k in list(variables) if str(k).startswith(nccl.PREFIX)}
        errors.extend("%s (host vars of %s)" % (message, name) for message in nccl.build_env(settings)[1])
    return errors


def probe_errors(node, found, python, workspace, torch_required=True):
    """torch_required: false while the venv that will hold torch is yet to be made (deploy_venv_create)."""
    result = found.get(node)
    if result is None:
        return ["%s printed nothing in the probe step: check that slurm_python=%s runs there (after "
                "slurm_env_setup)." % (node, python)]
    errors = []
    if torch_required and not result["torch"]["importable"]:
        errors.append("slurm_python=%s cannot import torch on %s (%s): install torch there, or point "
                      "slurm_python at an interpreter that has it." % (python, node, result["torch"].get("error")))
    for interface in result["missing_interfaces"]:
        errors.append("no network interface %s on %s (it has %s): set nccl_env_socket_ifname (or "
                      "nccl_env_gloo_socket_ifname), per node under slurm_workers where nodes differ."
                      % (interface, node, ", ".join(result["interfaces"]) or "none"))
    if not result["workspace_shared"]:
        errors.append("slurm_workspace=%s is not shared: %s cannot see a file the login node wrote there; "
                      "use a directory on the shared filesystem." % (workspace, node))
    if not result["workspace_writable"]:
        errors.append("slurm_workspace=%s is not writable from %s: fix its permissions or pick another "
                      "directory." % (workspace, node))
    return errors


def probe_summary(node, found):
    result = found.get(node)
    if not result:
        return "no answer"
    torch = result["torch"]
    return "%-9s  %-12s  %s" % (
        "ok" if result["workspace_shared"] and result["workspace_writable"] else "NOT SHARED" if not result["workspace_shared"] else "READ-ONLY",
        "%s/%s" % (result["python_version"], torch["version"] if torch["importable"] else "NO TORCH"),
        "missing " + ",".join(result["missing_interfaces"]) if result["missing_interfaces"] else "ok")


def gpu_mismatch_line(row):
    return "%s: %s. Likely fix: %s." % (row["name"], row["reason"], row["fix"])


def workspace_need(values):
    need = inputs.workspace_need(dict(values))
    return {"bytes": need[0], "how": need[1]} if need else None


class FilterModule(object):
    def filters(self):
        return {"input_errors": input_errors, "usable_nodes": usable_nodes,
                "out_of_service_nodes": out_of_service_nodes, "probe_errors": probe_errors,
                "probe_summary": probe_summary, "gpu_mismatch_line": gpu_mismatch_line,
                "workspace_need": workspace_need}
