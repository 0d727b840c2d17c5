# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.collect_run: the training's collect step in one task. Three module
calls on the cluster (read_files: the stages' records, the checkpoints, your script's event files
and trainer state; fetch_files: what changed of the metrics, logs and event files; run_ledger), one
put_files of facts.json, and the rest here on the controller: the loss from your script's event
files or log lines, the run's facts, report.md and loss.png. See plugins/modules/collect_run.py."""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.utils.display import Display

from ansible_collections.llmtrain.slurm.plugins.action.fetch_files import ActionModule as FetchFiles
from ansible_collections.llmtrain.slurm.plugins.action.fetch_files import make_dirs, private_bits
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress, trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_facts
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import train as train_job
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files, run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.script_args import total_of
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_with
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.run_report import write_report
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import out_of_service_nodes
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.messages import (
    job_failure_message, lost_nodes_message, never_starts_message)

display = Display()

# the run's variables the step reads (resolved from the task's own)
VARIABLES = ("run_dir", "run_local_dir", "run_script", "run_code_chdir", "run_wandb_project", "slurm_python",
             "pretrain_fetch_max_mb", "pretrain_progress_regex", "pretrain_progress_tag",
             "pretrain_progress_total_steps", "pretrain_script_args", "run_name", "run_code_script", "run_source_dir",
             "pretrain_model", "slurm_partition", "slurm_gpus_per_node", "pretrain_signal_lead", "slurm_procs_per_node",
             "run_gpu_policy", "pretrain_straggler_threshold", "slurm_exclude_nodes")
# what the inference stage's steps read
RESULT_VARIABLES = ("run_dir", "run_local_dir", "run_script")
# each stage's collect step, by its method
STAGES = {"train": "train", "generate": "samples", "export": "export"}
# a MiB: the samples' bound, and pretrain_fetch_max_mb's unit (which bounds your script's log read here)
MB = 1048576


def fetch_names(job):
    """What the collect step copies to the controller: the name under runs/<run_name>/ -> the path in
    the run directory (the job's log by the path Slurm gives, which must lie there too)."""
    names = {run_files.METRICS: run_files.METRICS, run_files.NODE_TIMES: run_files.NODE_TIMES,
             run_files.STARTS: run_files.STARTS}
    log = (job or {}).get("stdout_path") or ""
    if log:
        names["logs/" + os.path.basename(log)] = log
    return names


def fetch_patterns(own_script, wandb):
    """What it finds by name: the hangs' summaries, the reference trainer's TensorBoard event files
    (your script has no tensorboard/ there) and, with run_wandb_project (the job points W&B there,
    WANDB_DIR), the offline W&B record logs, for 'wandb sync runs/<run>/wandb/offline-run-*' from
    the controller (online runs are with W&B already)."""
    return ([{"path": "hangs", "pattern": "*/" + run_files.HANG_SUMMARY}]
            + ([] if own_script else [{"path": "tensorboard", "pattern": "events.out.tfevents.*"}])
            + ([{"path": "wandb", "pattern": "offline-run-*/run-*.wandb"}] if wandb else []))


def outside_refused(paths, run_dir):
    """Your script's event files that lie outside the run directory: path -> why they stay."""
    return {path: "%s is not fetched: it lies outside the run directory %s (run_script_chdir); the watch read it, "
                  "the report has not" % (path, run_dir) for path in paths}


def log_metrics(text, patterns=None, state=None):
    """The metrics file (JSON lines) of your script's log: one record per progress line. A pattern
    that backtracks past its CPU time is warned about, and the records of the others kept.
    state: a Hugging Face Trainer's state as read_files returns it (trainer_state.compact), the steps of its lines."""
    try:
        compiled = log_progress.compile_patterns(patterns or log_progress.DEFAULT_PATTERNS)
    except ValueError as err:
        raise AnsibleActionFail(str(err)) from None
    records, warnings = log_progress.records(str(text or "").splitlines(), compiled, trainer_state.from_result(state))
    for message in warnings.values():
        display.warning(message)
    return "".join(json.dumps(dict(r, source="log"), sort_keys=True) + "\n" for r in records)


def event_metrics(paths, tag=None, total_steps=None, script_args=None, max_steps=None):
    """{text (metrics JSON lines), records (how many), source, tag, files, tags, unreadable} of your script's
    TensorBoard event files (else Lightning metrics.csv files) at paths, on this controller
    (event_files.metrics_of); each record's total: total_steps, else the one the script's arguments
    set, else a Hugging Face Trainer's max_steps (script_args.total_of)."""
    if script_args is not None and not isinstance(script_args, (list, tuple)):
        raise AnsibleActionFail("pretrain_script_args must be a list of the script's arguments, not %r" % (script_args,))
    found = event_files.metrics_of(list(paths), tag or None, total_of(total_steps, script_args, max_steps))
    text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in found.pop("records"))
    found.update(text=text, records=text.count("\n"))
    return found


def samples_text(samples):
    """The reference trainer's samples (samples.json: [{prompt, completion}]) as samples.txt shows them."""
    parts = []
    for index, sample in enumerate(s for s in samples if isinstance(s, dict)):
        prompt, completion = str(sample.get("prompt", "")), str(sample.get("completion", ""))
        parts.append("=== prompt %d: %s\n%s%s\n\n" % (index + 1, json.dumps(prompt), prompt, completion))
    return "".join(parts)


def fact_settings(v, job_name, source):
    """The run's settings its facts name (run_facts.py); job_name: the training job's; source: what is
    deployed of your script (run_source: its files and digest), None for the reference trainer."""
    script = None
    if v["run_script"]:
        script = {"path": v["run_code_script"], "args": v["pretrain_script_args"], "chdir": v["run_code_chdir"],
                  "source_dir": v["run_source_dir"], "files": len((source or {}).get("files") or []),
                  "digest": (source or {}).get("digest")}
    return {"run_name": v["run_name"], "workspace": v["run_dir"], "job_name": job_name,
            "model": v["pretrain_model"], "script": script, "partition": v["slurm_partition"],
            "gpus_per_node": int(v["slurm_gpus_per_node"]), "signal_lead": int(v["pretrain_signal_lead"]),
            "procs_per_node": int(v["slurm_procs_per_node"]), "gpu_policy": v["run_gpu_policy"],
            "straggler_threshold": float(v["pretrain_straggler_threshold"]), "exclude_nodes": v["slurm_exclude_nodes"]}


def nice_json(value):
    """As Ansible's to_nice_json writes it, with a line end."""
    return json.dumps(value, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


class ActionModule(FetchFiles):

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(("stage", "job", "job_id", "reuse", "model", "evaluate", "watch"))

    def run(self, tmp=None, task_vars=None):
        result = super(FetchFiles, self).run(tmp, task_vars)  # pylint: disable=bad-super-call
        del tmp  # tmp no longer has any effect
        task_vars = task_vars or {}
        stage = self._task.args.get("stage") or "train"
        if stage not in STAGES:
            raise AnsibleActionFail("stage=%r: collect_run collects %s" % (stage, ", ".join(sorted(STAGES))))
        try:
            result.update(getattr(self, STAGES[stage])(self.values(task_vars, stage), task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)  # pylint: disable=protected-access
        return result

    def values(self, task_vars, stage):
        """The run's variables the stage's step reads, resolved, and the task's arguments."""
        values = {}
        for name in VARIABLES if stage == "train" else RESULT_VARIABLES:
            if name not in task_vars:
                raise AnsibleActionFail("collect_run needs the variable %s: run it in a play of the %s role"
                                        % (name, "pretrain" if stage == "train" else "inference"))
            values[name] = self._templar.template(task_vars[name])
        job = self._task.args.get("job") or {}
        if not isinstance(job, dict):
            raise AnsibleActionFail("job: give the job's record as the watch returned it, not %r" % (job,))
        watch = self._task.args.get("watch") or {}
        if not isinstance(watch, dict):
            raise AnsibleActionFail("watch: give the watching task's result (llmtrain.slurm.sbatch), not %r" % (watch,))
        job_id = self._task.args.get("job_id")
        model = self._task.args.get("model") or {}
        if stage == "export" and not (isinstance(model, dict) and model.get("name") and model.get("model_dir")):
            raise AnsibleActionFail("stage=export needs model: {model_dir, name, checkpoint, job_id} (got %r)" % (model,))
        values.update(job=job, job_id="" if job_id is None else str(job_id).strip(), watch=watch,
                      reuse=boolean(self._task.args.get("reuse", False), strict=False), model=model,
                      evaluate=boolean(self._task.args.get("evaluate", False), strict=False))
        return values

    def samples(self, v, task_vars):
        """The samples job's output, bounded, to runs/<run_name>/samples.txt (the reference trainer's JSON
        made readable; your inference_script's standard output as it is), and the report."""
        own = bool(v["run_script"])
        name = "samples.txt" if own else "samples.json"
        read = self.module("llmtrain.slurm.read_files", dict(src=v["run_dir"], names=[name], max_bytes=MB), task_vars)
        if name not in read.get("files", {}):
            raise AnsibleActionFail(
                "%s/%s cannot be used: %s. It stays in the run directory; %s." % (
                    v["run_dir"], name, read.get("errors", {}).get(name, "it does not exist"),
                    "make inference_script print less (its standard output is the samples)" if own
                    else "lower inference_max_new_tokens or use fewer inference_prompts"))
        text = read["files"][name]
        if not own:
            text = samples_text(run_facts.run_json(text, [], name, display.warning))
        return self.write_results(v["run_local_dir"], run_files.SAMPLES, text)

    def export(self, v, task_vars):
        """What the export job wrote (its line and the evaluation, bounded) with the model's names, to
        runs/<run_name>/model.json (the report's Model section), and the report."""
        own, model = bool(v["run_script"]), v["model"]
        evaluation = "eval/%s.json" % model["name"]
        names = ([] if own else ["export/exported.json"]) + ([evaluation] if v["evaluate"] else [])
        read = self.module("llmtrain.slurm.read_files", dict(src=v["run_dir"], names=names, max_bytes=65536), task_vars)
        files = read.get("files", {})
        made = {"model_dir": model["model_dir"], "name": model["name"], "checkpoint": model.get("checkpoint"),
                "job_id": model.get("job_id") or None,
                "export": run_facts.run_json(files.get("export/exported.json", "{}"), {}, "export/exported.json",
                                             display.warning),
                "evaluation": run_facts.run_json(files.get(evaluation, "{}"), {}, evaluation, display.warning)}
        done = self.write_results(v["run_local_dir"], "model.json", nice_json(made))
        done["model"] = made
        return done

    def write_results(self, local, name, text):
        """runs/<run_name>/name made text, when it differs; then the report again."""
        path = os.path.join(local, name)
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                same = handle.read() == text
        except OSError:
            same = False
        done = dict(changed=not same, path=path)
        if same or self._task.check_mode:
            return done
        make_dirs(local)
        self.write(path, text)
        done.update(self.report(local))
        return done

    def module(self, name, args, task_vars):
        """One module call on the host; its failure fails the step, naming the module."""
        got = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        if got.get("failed"):
            raise AnsibleActionFail("%s: %s" % (name, got.get("msg", "failed")))
        return got

    def fetch(self, args, task_vars):
        """fetch_files' action with args (the files that differ transferred); its failure fails the step."""
        got = self.fetch_files(args, task_vars)
        if got.get("failed"):
            raise AnsibleActionFail(got.get("msg", "fetch_files failed"))
        return got

    def train(self, v, task_vars):  # pylint: disable=too-many-locals
        run_dir, local = v["run_dir"], v["run_local_dir"]
        own = bool(v["run_script"])
        max_bytes = int(v["pretrain_fetch_max_mb"]) * MB
        check = self._task.check_mode
        if not check:
            make_dirs(os.path.join(local, "logs"))
        job_name = train_job.NAME_PREFIX + str(v["run_name"])
        read = self.module("llmtrain.slurm.read_files", dict(
            src=run_dir,
            names=["preflight.json", "env/cluster.env", "node_check/%s.json" % job_name, run_files.BAD_NODES,
                   run_files.FACTS, "network_check/%s.json" % job_name],
            list_dir="checkpoints",
            trainer_state_dir=run_dir + "/checkpoints" if own else None,
            event_dirs=[v["run_code_chdir"], run_dir] if own else []), task_vars)
        collected = self.fetch(dict(src=run_dir, dest=local, files=fetch_names(v["job"]),
                                    patterns=fetch_patterns(own, bool(v["run_wandb_project"])),
                                    max_bytes=max_bytes, limit_name="pretrain_fetch_max_mb"), task_vars)
        refused = dict(collected.get("refused", {}))
        metrics_fetched = run_files.METRICS not in collected.get("missing", [])
        event_names = read.get("event_files", [])
        events, log_text, log_read = {}, "", False
        if own and not metrics_fetched and event_names:
            got = self.fetch(dict(src=run_dir, dest=local, files={"events/" + n: n for n in event_names},
                                  max_bytes=max_bytes, limit_name="pretrain_fetch_max_mb"), task_vars)
            refused.update(got.get("refused", {}))
            paths = [os.path.join(local, "events", n) for n in event_names if "events/" + n in got.get("files", {})]
            if paths:
                events = event_metrics(paths, v["pretrain_progress_tag"],
                                       v["pretrain_progress_total_steps"], v["pretrain_script_args"],
                                       (read.get("trainer_state") or {}).get("max_steps"))
        log_path = os.path.join(local, "logs", os.path.basename(v["job"].get("stdout_path") or ""))
        if own and not metrics_fetched and not events.get("records") and v["job"].get("stdout_path") \
                and os.path.isfile(log_path):
            with open(log_path, encoding="utf-8", errors="replace") as handle:
                log_text = log_metrics(handle.read(max_bytes), v["pretrain_progress_regex"], read.get("trainer_state"))
            log_read = True
        if not check and (events.get("records") or log_read):
            self.write(os.path.join(local, run_files.METRICS), events["text"] if events.get("records") else log_text)
        outside = read.get("event_files_outside", [])
        refused.update(outside_refused(outside, run_dir))
        progress = run_facts.progress(metrics_fetched, events, bool(log_text), v["pretrain_progress_regex"],
                                      len(event_names) + len(outside), local)
        checkpoints = run_files.checkpoint_names(read.get("entries", []), own)
        settings = fact_settings(v, job_name, self._templar.template(task_vars["run_source"]) if own else None)
        facts = run_facts.kept_or_made(read.get("files", {}), v["reuse"], settings=settings,
                                       warn=display.warning, job=dict(v["job"]), job_id=v["job_id"],
                                       checkpoints=checkpoints, progress_fact=progress)
        python = str(v["slurm_python"] or "")
        ledger = self.module("llmtrain.slurm.run_ledger", dict(
            run_dir=run_dir, job_ids=[v["job_id"]] if v["job_id"] else [],
            venv_dir=os.path.dirname(os.path.dirname(python)) if python.startswith("/") else None), task_vars)
        put = self.module("llmtrain.slurm.put_files",
                          dict(dest=run_dir, files={run_files.FACTS: nice_json(facts)}, mode="0644"), task_vars)
        done = dict(changed=bool(collected.get("fetched") or put.get("changed")), checkpoints=checkpoints,
                    facts=facts, refused=refused, fetched=collected.get("fetched", []), ledger=ledger.get("ledger"))
        if refused:
            done["warnings"] = [refused[path] for path in sorted(refused)]
        # once collected and reported, a job watched to a bad end fails the step, saying why and what to do
        why = self.verdict(v, job_name, checkpoints, task_vars)
        if not check:
            self.write(os.path.join(local, run_files.FACTS),
                       nice_json(dict(facts, not_fetched=refused, ledger=ledger.get("ledger"))))
            done.update(self.report(local), changed=True)
        if why:
            done.update(failed=True, msg=why)
        return done

    def verdict(self, v, job_name, checkpoints, task_vars):
        """What the watched job's end says (v["watch"], the watching task's result), or None when it
        ended well: a requeued job waiting for nodes that are out of service, a job whose dependency
        can never be met, a job that failed."""
        jobs, log = v["watch"].get("jobs") or [], v["watch"].get("log") or {}
        # a watch that failed (its own failure is the play's) or that nothing was watched by says nothing
        if not jobs or v["watch"].get("failed"):
            return None
        job = jobs[0]
        if job.get("waits_for_nodes"):
            cluster = self.module("llmtrain.slurm.slurm_cluster_info", {}, task_vars)
            down = out_of_service_nodes(cluster.get("nodes") or [], job.get("partition"))
            return lost_nodes_message(job, job_name, down, log.get("errors") or [], checkpoints[-1] if checkpoints else "")
        # the data job the deploy stage did not wait for (pretrain_watch=false in an earlier play) failed
        if job.get("reason") == "DependencyNeverSatisfied":
            return never_starts_message(job, job_name, v["run_name"])
        if not job.get("success") and not job.get("active"):
            return job_failure_message(job, log, job_name, v["run_local_dir"], v["run_dir"], v["slurm_procs_per_node"],
                                       v["watch"].get("node_check"), v["watch"].get("network_check"))
        return None

    @staticmethod
    def report(local):
        """report.md and loss.png of runs/<run_name>/ written anew: {report, plot, report_warnings}."""
        try:
            made = write_report(local, os.path.join(local, run_files.FACTS))
        except OSError as err:
            raise AnsibleActionFail("cannot write the report in %s: %s" % (local, to_text(err))) from None
        return dict(zip(("report", "plot", "report_warnings"), made))

    @staticmethod
    def write(path, text):
        """Replace the file at path on the controller with text (0644 less the umask's private bits)."""
        def put(temp):
            with open(temp, "w", encoding="utf-8") as handle:
                handle.write(text)
        replace_with(path, put, 0o644 & ~private_bits(), prefix="." + os.path.basename(path) + ".")
