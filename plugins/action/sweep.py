# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.sweep: the members from the `sweep` variable (module_utils/sweep/
members.py; every mistake said before anything is made), each member's training job made by the
training job's class with the member's settings (jobs/sweep.py), and one call of the module on the
login node, which makes the members' run directories and submits the arrays (or, state=status,
only looks). Then, on the controller, <run_results_dir>/<sweep>/members.json and sweep.md
(module_utils/sweep/report.py); with curves, also sweep.png and the scaling law fitted over the
members' sizes (module_utils/sweep/fit.py)."""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import argument_specs
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.sweep import ARRAY_PREFIX, MEMBER_NAME, Sweep
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import Train
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_file
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.site_check import judge
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import report
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members

MODULE = "llmtrain.slurm.sweep"
# what a member's run directory and job are made from besides its training job's variables: its
# node check settings (scripts/node_check.conf)
CHECK_VARIABLES = ("slurm_node_check_timeout", "run_bad_node_policy", "run_requeue_max", "run_gpu_policy", "run_gpu_diag")
# what preflight judges the cluster by (plugins/action/preflight_cluster.py): a member that sets one of
# them differently from the sweep is judged by its own
JUDGED = ("slurm_nodes", "slurm_gpus_per_node", "slurm_constraint", "slurm_gpu_type", "slurm_reservation", "slurm_account",
          "slurm_qos", "slurm_sbatch_options", "slurm_partition", "slurm_exclude_nodes", "run_gpu_policy")


def known_variables():
    """Every variable the roles declare."""
    return sorted(set(name for entries in argument_specs.specs().values() for options in entries.values()
                      for name in options))


def member_errors(found, values):
    """What is wrong with each member's settings, as the run's variables: their types and choices by
    the argument specs, then the input checks (inputs/) of the run's values with the member's, each
    message naming the member. values: the run's variables (the run role's _run_values)."""
    spec_of = dict((name, spec) for entries in argument_specs.specs().values() for name, spec in entries.get("main", {}).items())
    before = set(inputs.validate(values))
    errors = []
    for member in found:
        settings = json.loads(json.dumps(member["settings"]))  # plain values: the messages show them so
        spec = dict((name, dict((key, value) for key, value in spec_of[name].items() if key in ("type", "elements", "choices")))
                    for name in settings if name in spec_of)
        checked = ArgumentSpecValidator(spec).validate(dict((name, settings[name]) for name in spec))
        wrong = [str(message) for message in checked.error_messages]
        if not wrong:
            wrong = [message for message in inputs.validate(dict(values, **settings)) if message not in before]
        errors += ["sweep member %s: %s" % (member["name"], message) for message in wrong]
    return errors


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        state, curves = args.pop("state", "present"), args.pop("curves", False)
        at_end = state == "watch" and curves == "end"
        curves = not at_end and boolean(curves, strict=False)
        if args or state not in ("present", "watch", "status", "stopped"):
            raise AnsibleActionFail("llmtrain.slurm.sweep takes state (present, watch, status or stopped) and curves "
                                    "(true, false, or with state=watch end) alone; it reads the sweep variable and the "
                                    "run's variables")
        values = self.values(task_vars, base.RUN_VARIABLES + tuple(Train.variables) + CHECK_VARIABLES)
        sweep = self._templar.template(task_vars.get("sweep"))
        if state == "stopped":
            return self.stop(result, task_vars, values, sweep)
        grid = sweep.get("grid") if isinstance(sweep, dict) else None
        listed = sweep.get("list") if isinstance(sweep, dict) else None
        keys = list(grid) if isinstance(grid, dict) else []
        keys += [key for entry in (listed if isinstance(listed, list) else []) if isinstance(entry, dict) for key in entry]
        swept = set(str(key).split(".", maxsplit=1)[0] for key in keys)
        given = dict(values, **self.values(task_vars, sorted(swept - set(values))))
        found, errors = members(sweep, known_variables(), given)
        if not errors and state == "present":  # the watch and the status look at members checked so
            errors = member_errors(found, self._templar.template(task_vars.get("_run_values") or {}))
        if errors:
            raise AnsibleActionFail("the sweep variable: " + "\n".join(errors))
        if state == "present" and not self._task.check_mode:
            errors = self.cluster_errors(found, dict(values, **self.values(task_vars, JUDGED)), task_vars)
            if errors:
                raise AnsibleActionFail("\n".join(errors) + "\nNothing was made or submitted.")
        values["run_name"] = sweep["name"]
        try:
            # the members' files are written by present alone: a poll makes and sends no scripts
            made = Sweep(values, found, task_vars.get("sweep_parallel", 0)).module_args(files=state == "present")
        except (KeyError, TypeError, ValueError) as err:
            raise AnsibleActionFail("the sweep's jobs cannot be made: %s" % (err.args[0] if err.args else err)) from None
        made.update(state=state, curves=curves, retries=int(self._templar.template(task_vars.get("sweep_retries", 0))),
                    split=boolean(self._templar.template(task_vars.get("sweep_split", False)), strict=False))
        result.update(self._execute_module(module_name=MODULE, module_args=made, task_vars=task_vars))
        if result.get("failed") or self._task.check_mode:
            return result
        counts = result.get("counts") or {}
        ended = at_end and not counts.get("running") and not counts.get("pending")
        if ended:  # the watch's last poll: the members' history read once, for the comparison
            curves = True
            result.update(self._execute_module(module_name=MODULE, module_args=dict(made, state="status", curves=True),
                                               task_vars=task_vars))
            if result.get("failed"):
                return result
        # what the action knows of each member, beside what the module found
        known = dict((member["name"], member) for member in found)
        dirs = dict((entry["name"], entry["run_dir"]) for entry in made["members"])
        for entry in result.get("members", []):
            member = known.get(entry["name"]) or {}
            entry.update(values=member.get("values"), run_dir=dirs.get(entry["name"]))
            if member.get("params"):  # sweep_params: the list's count, before what the records say
                entry["params"] = member["params"]
        found_members = result.get("members", [])
        line = report.counts_line(sweep["name"], found_members, made.get("parallel") or 0)
        result["sweep"] = dict(name=sweep["name"], line=line)
        local = os.path.join(self._templar.template(task_vars["run_results_dir"]), sweep["name"])
        os.makedirs(local, exist_ok=True)
        found_laws = {}
        if curves:
            report.with_compute(found_members)
            found_laws = report.laws(found_members, self._templar.template(task_vars.get("sweep_predict_params")))
            try:
                report.plot(sweep["name"], found_members, found_laws, os.path.join(local, "sweep.png"))
            except ImportError:
                result.setdefault("warnings", []).append("no sweep.png: matplotlib is not installed for the controller's Python")
            result["laws"] = found_laws
        # the curves are the plot's: members.json keeps the rest
        kept = [dict((key, value) for key, value in member.items() if key != "curve") for member in found_members]
        replace_file(os.path.join(local, "members.json"), (json.dumps(kept, indent=1, sort_keys=True) + "\n").encode("utf-8"))
        replace_file(os.path.join(local, "sweep.md"), report.markdown(sweep["name"], found_members, found_laws).encode("utf-8"))
        result["members"] = kept
        result["local_dir"] = local
        failed = [member for member in kept if member.get("state") == "failed"]
        if ended and failed:
            result.update(failed=True, msg="%d member(s) of sweep %s failed: %s. Their logs are in their run directories "
                                           "(logs/); playbooks/sweep.yml trains them again. %s/sweep.md compares the members."
                                           % (len(failed), sweep["name"], ", ".join("%s (%s)" % (m["name"], "; ".join(
                                               m.get("ended") or ["no end recorded"])) for m in failed), local))
        return result

    def stop(self, result, task_vars, values, sweep):
        """Every active member of the sweep stopped with a checkpoint: the sweep by its name (-e
        sweep=NAME) or the inventory's sweep; the module finds its members in its record."""
        name = sweep.get("name") if isinstance(sweep, dict) else sweep
        if not isinstance(name, str) or not MEMBER_NAME.fullmatch(name):
            raise AnsibleActionFail("give the sweep to stop by its name: -e sweep=NAME (got %r)" % (name,))
        values["run_name"] = name
        lead = self._templar.template(task_vars.get("pretrain_signal_lead", 300))
        result.update(self._execute_module(module_name=MODULE, task_vars=task_vars, module_args=dict(
            name=ARRAY_PREFIX + name, sweep=name, base_dir=base.Run(values).dir, state="stopped", wait_timeout=int(lead))))
        return result

    def cluster_errors(self, found, values, task_vars):
        """What keeps members off the cluster: the members whose partition, nodes, GPUs or site settings
        differ from the sweep's (which preflight checked) judged as preflight judges a run, by one look
        at the cluster (llmtrain.slurm.slurm_cluster_info), each message naming the members."""
        base_judged = dict((name, values.get(name)) for name in JUDGED)
        shapes = {}
        for member in found:
            judged = dict(base_judged, **dict((name, member["settings"][name]) for name in JUDGED if name in member["settings"]))
            if judged != base_judged:
                shapes.setdefault(json.dumps(judged, sort_keys=True), (judged, []))[1].append(member["name"])
        if not shapes:
            return []
        bad_nodes = base.Run(values).bad_nodes_file
        cluster = self._execute_module(module_name="llmtrain.slurm.slurm_cluster_info", task_vars=task_vars, module_args=dict(
            bad_nodes=bad_nodes, reservations=any(j["slurm_reservation"] for j, _names in shapes.values()),
            associations=any(j["slurm_account"] or j["slurm_qos"] for j, _names in shapes.values())))
        if cluster.get("failed"):
            raise AnsibleActionFail("the sweep's members cannot be checked against the cluster: %s" % cluster.get("msg"))
        errors = []
        for judged, names in shapes.values():
            who = "sweep member %s" % names[0] if len(names) == 1 else "sweep members %s" % ", ".join(names)
            errors += ["%s: %s" % (who, message) for message in judge(cluster, judged, bad_nodes)[0]]
        return errors

    def values(self, task_vars, names):
        """The variables of names that the play has, resolved."""
        return dict((name, self._templar.template(task_vars[name])) for name in names if name in task_vars)
