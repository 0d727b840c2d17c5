# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.preflight_cluster: what Slurm has, asked once and judged, in one task.

One call of llmtrain.slurm.slurm_cluster_info (partitions and nodes, the run's bad nodes, and the
reservations, associations and container the run names) asks Slurm and allocates nothing. Then,
here on the controller: the run's partition and its usable nodes (busy ones count, excluded ones do
not), what keeps the run off them (module_utils/slurm/site_check.py's cluster_errors and site_errors, one message
each: the task fails with them all), what the jobs will wait for or preflight could not check (the
task's warnings), and the record for the report, <run>/preflight.json (one call of put_files; none
in check mode). See plugins/modules/preflight_cluster.py for what it returns."""

from __future__ import annotations

import datetime
import json

from ansible_collections.llmtrain.slurm.plugins.action.run_dirs import RunAction
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container, run_facts
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.site_check import cluster_errors, site_errors
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import usable_nodes

VARIABLES = base.RUN_VARIABLES + ("slurm_nodes", "run_gpu_policy")
SITE_VARIABLES = ("slurm_nodes", "slurm_gpus_per_node", "slurm_constraint", "slurm_gpu_type", "slurm_reservation",
                  "slurm_account", "slurm_qos", "slurm_sbatch_options")


def judge(cluster, v, bad_nodes_file):
    """cluster: as slurm_cluster_info returns it; v: the run's variables -> (errors, notes, record)."""
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


class ActionModule(RunAction):

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        v = self.run_values(task_vars, VARIABLES)
        run = base.Run(v)
        runtime = v.get("slurm_container_runtime") or "none"
        args = {"bad_nodes": run.bad_nodes_file, "reservations": bool(v.get("slurm_reservation")),
                "associations": bool(v.get("slurm_account") or v.get("slurm_qos"))}
        if runtime != "none":
            args["container"] = container.settings(v)
        cluster = self._execute_module(module_name="llmtrain.slurm.slurm_cluster_info", module_args=args,
                                       task_vars=task_vars)
        if cluster.get("failed"):
            return dict(result, **cluster)
        errors, notes, record = judge(cluster, v, run.bad_nodes_file)
        result.update(changed=False, partition=record["slurm_partition"], usable_nodes=record["usable_nodes"],
                      excluded_nodes=record["excluded_nodes"], notes=notes)
        # the module's own (a bad_nodes.json that cannot be used keeps no node off) and the notes
        warnings = list(cluster.get("warnings") or []) + list(notes)
        if warnings:
            result["warnings"] = warnings
        if errors:
            result.update(failed=True, msg="\n".join(errors), errors=errors)
            return result
        if not self._task.check_mode:
            record = dict(time=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **record)
            put = self._execute_module(module_name="llmtrain.slurm.put_files", task_vars=task_vars, module_args={
                "dest": run.dir, "files": {"preflight.json": json.dumps(record, indent=4, sort_keys=True) + "\n"}, "mode": "0644"})
            if put.get("failed"):
                return dict(result, failed=True, msg="preflight.json could not be written: %s" % put.get("msg"))
        return result
