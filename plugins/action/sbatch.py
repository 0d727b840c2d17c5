# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.sbatch: one call of the module, except on a retry (until) of a task
with state=present and watch=true that already has its job. Ansible gives a retry the result of the
attempt before it under the task's `register` name; when that result is this task's own (this task's
id in it) and names a job it watched, the retry watches that job (state=watched) instead of deciding
again whether to submit - a job that failed between two attempts is never submitted again by the
task that watched it. What the submission returned (submitted, attached, cmd, script_kept) and
whether the task changed anything carry over from attempt to attempt.

A stage's job is then one task: submitted, or re-attached to, and watched, one progress line per
retry (the callback llmtrain.slurm.job_progress). See plugins/modules/sbatch.py for the options.

With `stage` the task names a stage of the run (prepare, venv, train, generate, export, batch, serve)
instead of a script: the stage's class (plugins/module_utils/jobs) makes the job's name, options,
script and done record from the run's variables, resolved here, and the `facts` the play found
before it (a checkpoint's name, ...). The task then sets only how the play waits for it."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base, stages

MODULE = "llmtrain.slurm.sbatch"
# what a retry keeps of the attempts before it
CARRIED = ("submitted", "attached", "cmd", "script_kept", "from_record")
# the key of a result that names the task it came from (its id)
TASK_KEY = "watch_task"


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("stage") is not None:
            args = self.stage_args(args, task_vars or {})
        before = self.attempt_before(args, task_vars or {})
        if before is not None:
            args.update(state="watched", job_id=before["job_id"])
            args.pop("watch", None)
            args.pop("attach", None)
        result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        if before is not None:
            result.update((key, before[key]) for key in CARRIED if key in before)
            result["changed"] = bool(result.get("changed") or before.get("changed"))
            result.setdefault("job_id", before["job_id"])
            result["watched"] = True
        if result.get("watched"):
            result[TASK_KEY] = self.task_key(args)
        return result

    def stage_args(self, args, task_vars):
        """The task's arguments with those of its stage's job (jobs/): the job's own may not be given."""
        stage = args.pop("stage")
        facts = args.pop("facts", None) or {}
        if stage not in stages.STAGES:
            raise AnsibleActionFail("stage=%r is no stage of a run; the stages: %s" % (stage, ", ".join(stages.STAGES)))
        job_class = stages.STAGES[stage]
        values = {}
        for name in base.RUN_VARIABLES + tuple(job_class.variables):
            if name in task_vars:
                values[name] = self._templar.template(task_vars[name])
        try:
            made = job_class(values, facts).module_args()
        except (KeyError, ValueError) as err:
            raise AnsibleActionFail("the %s job cannot be made: %s" % (stage, err.args[0] if err.args else err)) from None
        given = sorted(set(made) & set(args))
        if given:
            raise AnsibleActionFail("with stage=%s the job sets %s itself; leave %s out of the task"
                                    % (stage, ", ".join(given), "it" if len(given) == 1 else "them"))
        args.update(made)
        return args

    def task_key(self, args):
        """This task and the job name it watches."""
        return "%s %s" % (self._task._uuid, args.get("name"))  # pylint: disable=protected-access

    def attempt_before(self, args, task_vars):
        """The result of this task's attempt before this one, when this is a retry of a watch that has its job."""
        if args.get("state", "present") != "present" or not boolean(args.get("watch", False), strict=False):
            return None
        register = self._task.register
        before = task_vars.get(register) if register else None
        if not isinstance(before, dict) or before.get(TASK_KEY) != self.task_key(args):
            return None
        if not before.get("watched") or not before.get("job_id") or before.get("failed"):
            return None
        # a retry follows an attempt whose job was still active (the until condition was not met); an
        # earlier run of this task that ended with its job is no attempt of this one
        jobs = before.get("jobs")
        job = jobs[-1] if isinstance(jobs, list) and jobs and isinstance(jobs[-1], dict) else {}
        if not job.get("active") or job.get("waits_for_nodes"):
            return None
        return before
