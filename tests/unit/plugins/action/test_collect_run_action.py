"""The collect_run action (the pretrain role's collect step in one task) against a run directory here:
the real read_files, fetch_files and put_files modules in-process, a connection that copies files,
and sacct's ledger given. What a user finds afterwards in runs/<run_name>/ and the run directory."""

import json
import os

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmtrain.slurm.plugins.action.collect_run import ActionModule
from ansible_collections.llmtrain.slurm.plugins.modules import fetch_files, put_files, read_files
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_fetch_files_action import Connection, Loader, run_module

MODULES = {"llmtrain.slurm.read_files": read_files.main, "llmtrain.slurm.fetch_files": fetch_files.main,
           "llmtrain.slurm.put_files": put_files.main}
LEDGER = {"source": "sacct", "gpu_hours": 1.5}


class Task:
    def __init__(self, args, check_mode=False):
        self.args = args
        self.check_mode = check_mode
        self.async_val = 0
        self.action = "llmtrain.slurm.collect_run"


class Templar:
    """The play's variables are given resolved."""

    @staticmethod
    def template(value):
        return value


class Collect(ActionModule):
    def __init__(self, args, base, check_mode=False):
        super().__init__(Task(args, check_mode), Connection(), None, Loader(base), Templar(), None)
        self.calls = []

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):  # pylint: disable=arguments-differ
        self.calls.append(module_name)
        if module_name == "llmtrain.slurm.run_ledger":
            return {"changed": False, "ledger": LEDGER}
        args = dict(module_args, _ansible_check_mode=self._task.check_mode)
        return run_module(MODULES[module_name], {k: v for k, v in args.items() if v is not None})


def variables(tmp_path, own_script=False, **more):
    run_dir = str(tmp_path / "ws" / "tiny")
    values = {
        "run_dir": run_dir, "run_local_dir": str(tmp_path / "runs" / "tiny"), "run_script": "train.py" if own_script else "",
        "run_code_chdir": run_dir + "/code", "run_wandb_project": "", "slurm_python": "/opt/venv/bin/python",
        "pretrain_fetch_max_mb": 16, "pretrain_progress_regex": [], "pretrain_progress_tag": "",
        "pretrain_progress_total_steps": None, "pretrain_script_args": [], "run_name": "tiny",
        "run_code_script": run_dir + "/code/train.py" if own_script else "",
        "run_source_dir": "", "pretrain_model": "tiny", "slurm_partition": "debug", "slurm_gpus_per_node": "0",
        "pretrain_signal_lead": 60, "slurm_procs_per_node": 1, "run_gpu_policy": "warn", "pretrain_straggler_threshold": "1.5",
        "slurm_exclude_nodes": [], "run_source": {"files": ["train.py", "model.py"], "digest": "d1"}}
    values.update(more)
    return values


def make_run(tmp_path, metrics=True):
    run_dir = tmp_path / "ws" / "tiny"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    for name in ("step_000050.pt", "step_000100.pt", ".step_000150.pt.tmp"):
        (run_dir / "checkpoints" / name).write_bytes(b"x")
    os.utime(str(run_dir / "checkpoints" / "step_000050.pt"), (1, 1))
    if metrics:
        (run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps({"event": "train", "step": s, "loss": 5.0 - s / 100}) + "\n" for s in (10, 20)))
    (run_dir / "logs" / "llmtrain-tiny-7.out").write_text("step 10 | loss 4.9000\nstep 20 | loss 4.8000\n")
    return run_dir


JOB = {"job_id": "7", "state": "COMPLETED", "exit_code": "0:0", "active": False}


def job(run_dir):
    return dict(JOB, stdout_path=str(run_dir / "logs" / "llmtrain-tiny-7.out"))


def test_it_fetches_the_run_writes_its_facts_here_and_there_and_the_report(tmp_path):
    run_dir = make_run(tmp_path)
    local = tmp_path / "runs" / "tiny"
    action = Collect({"job": job(run_dir), "job_id": "7"}, str(tmp_path))
    result = action.run(task_vars=variables(tmp_path))
    assert not result.get("failed"), result
    # three module calls and one write on the cluster
    assert action.calls == ["llmtrain.slurm.read_files", "llmtrain.slurm.fetch_files", "llmtrain.slurm.run_ledger",
                            "llmtrain.slurm.put_files"]
    assert sorted(result["fetched"]) == ["logs/llmtrain-tiny-7.out", "metrics.jsonl"]
    assert (local / "metrics.jsonl").read_text() == (run_dir / "metrics.jsonl").read_text()
    # the checkpoints by name, oldest first; a file being written (.name) is none
    assert result["checkpoints"] == ["step_000050.pt", "step_000100.pt"]
    facts = json.loads((local / "facts.json").read_text())
    assert facts["run_name"] == "tiny" and facts["ledger"] == LEDGER and facts["not_fetched"] == {}
    assert facts["model"] == "tiny" and facts["script"] is None and facts["cluster"]["partition"] == "debug"
    assert facts["jobs"][0]["job_id"] == "7" and facts["jobs"][0]["state"] == "COMPLETED"
    assert facts["progress"] == {"source": "metrics"}
    # kept in the run directory for a controller that did not watch, without what only this one fetched
    kept = json.loads((run_dir / "facts.json").read_text())
    assert kept == {k: v for k, v in facts.items() if k not in ("ledger", "not_fetched")}
    assert result["report"] == str(local / "report.md") and "tiny" in (local / "report.md").read_text()
    # again: nothing new to copy
    again = Collect({"job": job(run_dir), "job_id": "7"}, str(tmp_path)).run(task_vars=variables(tmp_path))
    assert again["fetched"] == [] and again["checkpoints"] == result["checkpoints"]


def test_your_scripts_loss_comes_from_its_log_lines_when_it_writes_no_metrics(tmp_path):
    run_dir = make_run(tmp_path, metrics=False)
    local = tmp_path / "runs" / "tiny"
    values = variables(tmp_path, own_script=True, pretrain_progress_regex=[r"step (?P<step>\d+) \| loss (?P<loss>[\d.]+)"])
    result = Collect({"job": job(run_dir), "job_id": "7"}, str(tmp_path)).run(task_vars=values)
    assert not result.get("failed"), result
    records = [json.loads(line) for line in (local / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["loss"], r["source"]) for r in records] == [(10, 4.9, "log"), (20, 4.8, "log")]
    facts = json.loads((local / "facts.json").read_text())
    assert facts["progress"]["source"] == "log"
    # the run's settings, made from its variables: your script as it ran, no model of ours
    assert facts["model"] is None and facts["cluster"]["gpus_per_node"] == 0 and facts["straggler_threshold"] == 1.5
    assert facts["script"] == {"path": str(run_dir / "code" / "train.py"), "args": [], "chdir": str(run_dir / "code"),
                               "source_dir": "", "files": 2, "digest": "d1", "checkpoints": ["step_000050.pt", "step_000100.pt"]}


def test_a_metrics_file_that_leads_outside_the_run_directory_stays_and_is_said(tmp_path):
    run_dir = make_run(tmp_path)
    private = tmp_path / "private.txt"
    private.write_text("not for the report\n")
    (run_dir / "metrics.jsonl").unlink()
    os.symlink(str(private), str(run_dir / "metrics.jsonl"))
    result = Collect({"job": job(run_dir), "job_id": "7"}, str(tmp_path)).run(task_vars=variables(tmp_path))
    why = result["refused"][str(run_dir / "metrics.jsonl")]
    assert "outside the run directory" in why and why in result["warnings"]
    assert not (tmp_path / "runs" / "tiny" / "metrics.jsonl").exists()
    facts = json.loads((tmp_path / "runs" / "tiny" / "facts.json").read_text())
    assert facts["not_fetched"] == result["refused"]


def test_a_finished_run_reuses_the_facts_its_watch_kept(tmp_path):
    run_dir = make_run(tmp_path)
    kept = {"run_name": "tiny", "jobs": [{"kind": "train", "job_id": "5", "state": "COMPLETED"}]}
    (run_dir / "facts.json").write_text(json.dumps(kept))
    result = Collect({"job": job(run_dir), "reuse": True}, str(tmp_path)).run(task_vars=variables(tmp_path))
    assert result["facts"] == kept


def test_check_mode_writes_nothing_here(tmp_path):
    run_dir = make_run(tmp_path)
    result = Collect({"job": job(run_dir), "job_id": "7"}, str(tmp_path), check_mode=True).run(task_vars=variables(tmp_path))
    assert not result.get("failed"), result
    assert not (tmp_path / "runs").exists() and not (run_dir / "facts.json").exists()


def test_a_missing_variable_is_named(tmp_path):
    values = variables(tmp_path)
    del values["pretrain_fetch_max_mb"]
    with pytest.raises(AnsibleActionFail, match="pretrain_fetch_max_mb"):
        Collect({"job": {}}, str(tmp_path)).run(task_vars=values)


def results(tmp_path, stage, own_script=False, check_mode=False, **args):
    values = {k: v for k, v in variables(tmp_path, own_script).items() if k in ("run_dir", "run_local_dir", "run_script")}
    return Collect(dict(args, stage=stage), str(tmp_path), check_mode).run(task_vars=values)


def test_the_reference_trainers_samples_become_samples_txt_and_the_report_shows_them(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "samples.json").write_text(json.dumps([{"prompt": "Once", "completion": " upon a time"},
                                                      {"prompt": "The \"end\"", "completion": "."}]))
    result = results(tmp_path, "generate")
    local = tmp_path / "runs" / "tiny"
    assert result["changed"] and (local / "samples.txt").read_text() == (
        '=== prompt 1: "Once"\nOnce upon a time\n\n=== prompt 2: "The \\"end\\""\nThe "end".\n\n')
    assert "Once upon a time" in (local / "report.md").read_text()
    # the same samples again: nothing written
    assert results(tmp_path, "generate")["changed"] is False


def test_samples_that_cannot_be_read_fail_saying_why_and_what_to_change(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "samples.txt").write_text("x" * (1048576 + 1))
    with pytest.raises(AnsibleActionFail, match=r"samples.txt cannot be used: .*make inference_script print less"):
        results(tmp_path, "generate", own_script=True)
    with pytest.raises(AnsibleActionFail, match=r"samples.json cannot be used: it does not exist.*inference_prompts"):
        results(tmp_path, "generate")


def test_the_export_and_its_evaluation_become_model_json(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "export").mkdir()
    (run_dir / "export" / "exported.json").write_text(json.dumps({"format": "hf", "params": 1000}))
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "step_000100.json").write_text(json.dumps({"loss": 3.5}))
    model = {"model_dir": str(run_dir / "export" / "step_000100"), "name": "step_000100", "checkpoint": "step_000100.pt",
             "job_id": "12"}
    result = results(tmp_path, "export", model=model, evaluate=True)
    written = json.loads((tmp_path / "runs" / "tiny" / "model.json").read_text())
    assert written == result["model"] == dict(model, export={"format": "hf", "params": 1000}, evaluation={"loss": 3.5})
    # not evaluated: no evaluation read
    again = results(tmp_path, "export", model=model, evaluate="false")
    assert again["model"]["evaluation"] == {} and again["changed"]
    with pytest.raises(AnsibleActionFail, match="stage=export needs model"):
        results(tmp_path, "export")


class Watching(Collect):
    """slurm_cluster_info answers with a drained node."""

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, **kwargs):  # pylint: disable=arguments-differ
        if module_name == "llmtrain.slurm.slurm_cluster_info":
            self.calls.append(module_name)
            return {"changed": False, "nodes": [
                {"name": "n1", "state": "idle", "state_flags": ["drain"], "partitions": ["debug"], "reason": "lost"},
                {"name": "n0", "state": "idle", "state_flags": [], "partitions": ["debug"]}]}
        return super()._execute_module(module_name, module_args, task_vars, **kwargs)


def watched(tmp_path, **ended):
    """Collect a run whose watched job ended so; the result and the module calls."""
    run_dir = make_run(tmp_path)
    the_job = dict(job(run_dir), success=False, **ended)
    watch = {"job_id": "7", "watched": True, "jobs": [the_job], "log": {"errors": ["srun: error: Node failure on n1", "Traceback"]}}
    action = Watching({"job": the_job, "job_id": "7", "watch": watch}, str(tmp_path))
    return action.run(task_vars=variables(tmp_path)), action.calls, tmp_path / "runs" / "tiny"


def test_a_failed_job_fails_the_step_once_the_run_is_collected_and_reported(tmp_path):
    result, calls, local = watched(tmp_path, state="FAILED", exit_code="1:0")
    assert result["failed"] and result["msg"].startswith("Training job 7 (llmtrain-tiny) ended FAILED, exit code 1:0.")
    assert "checkpoints stay in %s/checkpoints" % (tmp_path / "ws" / "tiny") in result["msg"]
    assert (local / "report.md").exists() and result["checkpoints"] == ["step_000050.pt", "step_000100.pt"]
    assert "llmtrain.slurm.slurm_cluster_info" not in calls


def test_a_requeued_job_waiting_for_lost_nodes_names_them_and_the_checkpoint_it_resumes_from(tmp_path):
    result, calls, _local = watched(tmp_path, state="PENDING", active=True, waits_for_nodes=True, restarts=1,
                                    reason="ReqNodeNotAvail", partition="debug")
    assert calls[-1] == "llmtrain.slurm.slurm_cluster_info" and result["failed"]
    lines = result["msg"].split("\n")
    assert lines[0].startswith("Training job 7 (llmtrain-tiny) lost a node and was requeued by Slurm (restart 1)")
    assert lines[1].startswith("Out of service in partition debug: n1 (") and "n0" not in lines[1]
    assert lines[2] == "From the log: srun: error: Node failure on n1"
    assert "resumes from the newest checkpoint (step_000100.pt)" in lines[3]


def test_a_job_whose_dependency_failed_is_said_never_to_start(tmp_path):
    result, _calls, _local = watched(tmp_path, state="PENDING", active=True, reason="DependencyNeverSatisfied",
                                     dependency="afterok:5(failed)")
    assert result["failed"] and result["msg"].startswith(
        "Training job 7 (llmtrain-tiny) never starts: job 5, which it waits for (afterok:5(failed)), failed")


def test_a_job_that_ended_well_or_a_watch_that_failed_says_nothing_more(tmp_path):
    run_dir = make_run(tmp_path)
    good = dict(job(run_dir), success=True)
    result = Watching({"job": good, "job_id": "7", "watch": {"jobs": [good]}}, str(tmp_path)).run(task_vars=variables(tmp_path))
    assert not result.get("failed"), result
    # the watch's own failure (the controller lost) is the play's: the step adds none
    running = dict(job(run_dir), success=False, active=True, state="RUNNING")
    result = Watching({"job": running, "job_id": "7", "watch": {"failed": True, "jobs": [running]}},
                      str(tmp_path)).run(task_vars=variables(tmp_path))
    assert not result.get("failed"), result
