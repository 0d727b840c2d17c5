"""The sbatch action: a task with watch=true submits (or re-attaches) on its first attempt and watches; a retry
of the task (until) watches the job the attempt before it returned and never decides to submit again, even when
that job failed meanwhile. The module is faked here (its own tests run it); what is pinned is which module call
each attempt makes and what the registered result carries."""

import pytest

from ansible_collections.llmtrain.slurm.plugins.action.sbatch import TASK_KEY, ActionModule

ARGS = dict(name="llmtrain-tiny", content="#!/bin/bash\n", attach=True, watch=True, wait_timeout=5)


class Task:
    def __init__(self, args, register="_pretrain_watch", uuid="task-1"):
        self.args = args
        self.register = register
        self._uuid = uuid
        self.check_mode = False
        self.diff = False
        self.async_val = 0
        self.action = "llmtrain.slurm.sbatch"


class Shell:
    tmpdir = None


class Connection:
    def __init__(self):
        self._shell = Shell()
        self.become = None


def attempt(args, answer, task_vars=None, uuid="task-1"):
    """One attempt of the task: (its result, the module calls it made)."""
    plugin = ActionModule(Task(args, uuid=uuid), Connection(), None, None, None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append((module_name, dict(module_args)))
        return dict(answer)

    plugin._execute_module = execute_module
    return plugin.run(task_vars=dict(task_vars or {})), calls


def job(state, active):
    return dict(job_id="42", state=state, active=active, waits_for_nodes=False)


SUBMITTED = dict(changed=True, submitted=True, attached=False, cmd=["sbatch", "..."], job_id="42", from_record=False,
                 watched=True, done=False, jobs=[job("RUNNING", True)])


def test_a_retry_watches_the_job_of_the_attempt_before_and_keeps_what_its_submission_returned():
    first, calls = attempt(ARGS, SUBMITTED)
    assert calls == [("llmtrain.slurm.sbatch", ARGS)]
    assert first[TASK_KEY] == "task-1 llmtrain-tiny"
    # the job failed between the two attempts: the retry looks at it, it does not submit again
    failed = dict(changed=False, submitted=False, watched=True, done=False, jobs=[job("FAILED", False)])
    second, calls = attempt(ARGS, failed, {"_pretrain_watch": first})
    [(name, args)] = calls
    assert name == "llmtrain.slurm.sbatch" and args["state"] == "watched" and args["job_id"] == "42"
    assert "watch" not in args and "attach" not in args and args["content"] == ARGS["content"]
    assert second["submitted"] and second["changed"] and second["cmd"] == ["sbatch", "..."] and second["job_id"] == "42"
    assert second["jobs"][0]["state"] == "FAILED" and second["watched"]


def test_a_first_attempt_decides_as_the_module_does_whatever_an_earlier_task_registered():
    ended = dict(SUBMITTED, jobs=[job("COMPLETED", False)])
    for before in (ended,  # this task's earlier run, whose job ended: no attempt of this run
                   dict(SUBMITTED, **{TASK_KEY: "task-2 llmtrain-tiny"}),  # another task's
                   dict(SUBMITTED, **{TASK_KEY: "task-1 llmtrain-other"}),  # another run's job
                   dict(SUBMITTED, failed=True),
                   dict(SUBMITTED, watched=False),  # nothing watched (a finished run, pretrain_watch false)
                   "not a result"):
        before = dict(before, **{TASK_KEY: before.get(TASK_KEY, "task-1 llmtrain-tiny")}) if isinstance(before, dict) else before
        _result, calls = attempt(ARGS, SUBMITTED, {"_pretrain_watch": before})
        assert calls == [("llmtrain.slurm.sbatch", ARGS)], before


def test_without_watch_or_with_another_state_the_action_is_one_module_call():
    before = dict(SUBMITTED, **{TASK_KEY: "task-1 llmtrain-tiny"})
    for args in (dict(ARGS, watch=False), dict(ARGS, state="watched", job_id="42", watch=False),
                 dict(ARGS, state="absent", watch=False)):
        result, calls = attempt(args, dict(changed=False), {"_pretrain_watch": before})
        assert calls == [("llmtrain.slurm.sbatch", args)] and TASK_KEY not in result


def stage_attempt(args, task_vars):
    """One run of a task with a stage, its variables templated as a play templates them."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables = dict((name, trust_as_template(value) if isinstance(value, str) else value) for name, value in task_vars.items())
    plugin = ActionModule(Task(args), Connection(), None, DataLoader(), Templar(loader=DataLoader(), variables=variables), None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append(dict(module_args))
        return dict(changed=True, job_id="42")

    plugin._execute_module = execute_module
    return plugin, calls, variables


RUN_VARS = dict(run_name="tiny", slurm_workspace="/w/", slurm_python="/v/bin/python", slurm_env_setup=[], slurm_partition="debug",
                slurm_cpus_per_task=2, slurm_procs_per_node=2, slurm_gpus_per_node=0, slurm_exclude_nodes=[],
                slurm_sbatch_options={}, slurm_container_runtime="none", inference_nodes="{{ 1 + 1 }}", inference_mem="2G",
                inference_time_limit="00:20:00", inference_evaluate=True, inference_eval_file=None, inference_eval_max_tokens=1000)


def test_a_stage_is_made_into_its_job_from_the_tasks_variables_templated():
    plugin, calls, variables = stage_attempt(dict(stage="export", facts={"checkpoint": "step_000050.pt"}, wait=True), RUN_VARS)
    plugin.run(task_vars=variables)
    [args] = calls
    assert args["name"] == "llmtrain-export-tiny" and args["wait"] is True and args["chdir"] == "/w/tiny"
    assert args["options"]["nodes"] == 2  # inference_nodes, a template of the inventory, resolved
    assert args["done_file"] == "/w/tiny/export.done.json" and "trainer.export" in args["content"]
    assert "stage" not in args and "facts" not in args


def test_a_task_that_sets_what_its_stage_sets_or_names_no_stage_fails_before_any_module_call():
    from ansible.errors import AnsibleActionFail
    for args, message in ((dict(stage="export", facts={"checkpoint": "step_000050.pt"}, done_file="/elsewhere"),
                           "sets done_file itself"),
                          (dict(stage="exprot"), "no stage of a run; the stages: .*export"),
                          (dict(stage="export", facts={}), "cannot be made: the export job needs the fact checkpoint"),
                          (dict(stage="export", facts={"checkpoint": "step_000050.pt", "extra": 1}), "takes no fact extra")):
        plugin, calls, variables = stage_attempt(args, RUN_VARS)
        with pytest.raises(AnsibleActionFail, match=message):
            plugin.run(task_vars=variables)
        assert calls == []
