# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.preflight_cluster: what Slurm has, asked once and judged, in one task.

One call of llmtrain.slurm.slurm_cluster_info (partitions and nodes, the run's bad nodes, and the
reservations, associations and container the run names) asks Slurm, allocates nothing, and judges
what it found by the run's variables given here (module_utils/slurm/site_check.py's judge): the
run's partition and its usable nodes (busy ones count, excluded ones do not), what keeps the run off
them (one message each: the task fails with them all), what the jobs will wait for or preflight
could not check (the task's warnings), and the record for the report, <run>/preflight.json, which
the same call writes (none in check mode). See plugins/modules/preflight_cluster.py for what it returns."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.action.run_dirs import RunAction
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.site_check import SITE_VARIABLES

VARIABLES = base.RUN_VARIABLES + ("slurm_nodes", "run_gpu_policy")
# what the module judges the cluster by (module_utils/slurm/site_check.py judge)
JUDGED = SITE_VARIABLES + ("slurm_partition", "slurm_exclude_nodes", "run_gpu_policy")


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
        args["judge"] = dict((name, v.get(name)) for name in JUDGED)
        if not self._task.check_mode:
            args["judge"]["record_dir"] = run.dir
        cluster = self._execute_module(module_name="llmtrain.slurm.slurm_cluster_info", module_args=args,
                                       task_vars=task_vars)
        if cluster.get("failed"):
            return dict(result, **cluster)
        judged = cluster["judged"]
        record = judged["record"]
        # preflight.json, rewritten each time with its time, is the report's record, no change of the run
        result.update(changed=False, partition=record["slurm_partition"],
                      usable_nodes=record["usable_nodes"], excluded_nodes=record["excluded_nodes"], notes=judged["notes"])
        # the module's own (a bad_nodes.json that cannot be used keeps no node off) and the notes
        warnings = list(cluster.get("warnings") or []) + list(judged["notes"])
        if warnings:
            result["warnings"] = warnings
        if judged["errors"]:
            result.update(failed=True, msg="\n".join(judged["errors"]), errors=judged["errors"])
        return result
