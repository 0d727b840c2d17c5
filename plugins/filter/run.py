# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read run artifacts back.

  text | llmtrain.slurm.env_file_values -> {NAME: value} of an env file the nccl_env role wrote
  text | llmtrain.slurm.from_run_json(default, name) -> the JSON value of a file of the run, read bounded
  log text | llmtrain.slurm.log_metrics(patterns, state) -> metrics JSONL from your script's progress lines
  local paths | llmtrain.slurm.event_metrics(tag, total_steps, script_args, max_steps) -> metrics from TensorBoard
    event files / metrics.csv
  run values | llmtrain.slurm.pipeline_fingerprint(workers, source digest) -> what the run is made from
  read_files result | llmtrain.slurm.pipeline_verdict(fingerprint, missing) -> may a rerun stop here
  read_files result | llmtrain.slurm.pipeline_record(fingerprint) -> the text of <run>/pipeline.json
  GPUs per node | llmtrain.slurm.gpu_options(type, how) -> the sbatch options that ask for them
  container settings | llmtrain.slurm.container_argv(workdir) -> {step, task, batch}: how a job runs its Python
  find result files | llmtrain.slurm.checkpoints(own_script) -> the run's checkpoint names, oldest first
  checkpoint name | llmtrain.slurm.checkpoint_step -> its step, or None
  read_files files | llmtrain.slurm.run_facts(settings, job, ...) -> the run's facts for the report
  fetched? | llmtrain.slurm.facts_progress(events, log_read, ...) -> where the report's loss records come from
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.llmtrain.slurm.plugins.module_utils import container, log_progress, pipeline_record, run_facts, trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base as jobs_base
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files, node_check, run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.script_args import total_of

display = Display()


def env_file_values(text):
    """The `export NAME=value` lines of an env file, read back as the shell would."""
    return node_check.env_file_values(text)


def from_run_json(text, default=None, name="a file of the run"):
    """The JSON value of a file of the run (untrusted: read bounded in size and depth, numbers
    finite), or default when it is not one, or not of default's type, said in a warning."""
    return run_facts.run_json(text, default, name, display.warning)


def facts(read, settings, job, job_id=None, checkpoints=(), progress=None, reuse=False):
    """read_files' files of the run directory -> the run's facts for the report (module_utils/run_facts.py:
    FIELDS), or, when reuse, those its facts.json kept."""
    return run_facts.kept_or_made(dict(read or {}), bool(reuse), settings=dict(settings), warn=display.warning,
                                  job=dict(job or {}), job_id=job_id, checkpoints=list(checkpoints or []),
                                  progress_fact=progress)


def facts_progress(metrics_fetched, events=None, log_read=False, patterns=None, event_files=0, local_dir=""):
    """Where the report's loss records come from (the run's facts' progress)."""
    return run_facts.progress(bool(metrics_fetched), dict(events or {}), bool(log_read), patterns, int(event_files),
                              str(local_dir))


def log_metrics(text, patterns=None, state=None):
    """The metrics file (JSON lines) of a job's log: one record per progress line. A pattern
    that backtracks past its CPU time is warned about, and the records of the others kept.
    state: a Hugging Face Trainer's state as read_files returns it (trainer_state.compact), the steps of its lines."""
    try:
        compiled = log_progress.compile_patterns(patterns or log_progress.DEFAULT_PATTERNS)
    except ValueError as err:
        raise AnsibleFilterError(str(err))
    parsed = trainer_state.from_result(state)
    records, warnings = log_progress.records(str(text or "").splitlines(), compiled, parsed)
    for message in warnings.values():
        display.warning(message)
    return "".join(json.dumps(dict(r, source="log"), sort_keys=True) + "\n" for r in records)


def event_metrics(paths, tag=None, total_steps=None, script_args=None, max_steps=None):
    """{text (metrics JSON lines), records (how many), source, tag, files, tags, unreadable} of the
    TensorBoard event files (else Lightning metrics.csv files) at paths, on this controller
    (event_files.metrics_of); each record's total: total_steps, else the one the script's arguments
    set, else a Hugging Face Trainer's max_steps (script_args.total_of)."""
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
        raise AnsibleFilterError("event_metrics: give a list of file paths, not %r" % (paths,))
    if script_args is not None and not isinstance(script_args, (list, tuple)):
        raise AnsibleFilterError("event_metrics: script_args (pretrain_script_args) must be a list of the script's "
                                 "arguments, not %r" % (script_args,))
    found = event_files.metrics_of(list(paths), tag or None, total_of(total_steps, script_args, max_steps))
    text = "".join(json.dumps(record, sort_keys=True) + "\n" for record in found.pop("records"))
    found.update(text=text, records=text.count("\n"))
    return found


def pipeline_fingerprint(values, workers=None, source_digest=None, facts=None):
    """sha256 of what the run is made from: its variables (the facts named in `facts` left out),
    the compute nodes' own nccl_env_* values, your code's digest and the collection's own files
    (pipeline_record.py)."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("pipeline_fingerprint: the input must be the run's variables by name")
    return pipeline_record.fingerprint(values, workers or {}, source_digest, facts=list(facts or []))


def pipeline_verdict(read, fingerprint, local_missing=None):
    """{finished, why} of a rerun, from read_files of the run directory (pipeline.json and the
    stage records), this inventory's fingerprint and the files this controller lacks."""
    finished, why = pipeline_record.verdict(read or {}, fingerprint, list(local_missing or []))
    return {"finished": finished, "why": why}


def pipeline_record_text(read, fingerprint):
    """The text of <run>/pipeline.json for this fingerprint and the stage records as read; None
    when one could not be read."""
    return pipeline_record.record_text(fingerprint, read or {})


# slurm_gpu_request: how a job asks for its GPUs
GPU_REQUESTS = ("gres", "gpus-per-node")


def gpu_options(count, gpu_type=None, how="gres"):
    """The sbatch options that ask for `count` GPUs on each node (jobs/base.py's gpu_options): {} for
    none, else {'gres': 'gpu[:TYPE]:N'} or, with how=gpus-per-node, {'gpus-per-node': '[TYPE:]N'}."""
    try:
        count = int(count or 0)
    except (TypeError, ValueError):
        raise AnsibleFilterError("gpu_options: %r is not a GPU count" % (count,))
    try:
        return jobs_base.gpu_options(count, gpu_type, how)
    except ValueError:
        raise AnsibleFilterError("gpu_options: how=%r must be one of %s (slurm_gpu_request)" % (how, ", ".join(GPU_REQUESTS)))


def container_argv(settings, workdir):
    """The run's container (run_container: slurm_container_* and slurm_workspace) -> {step: srun
    options of a job step, task: the prefix of a step's command, batch: the prefix of a command on
    the batch node}, each a list of words; all empty without a container (module_utils/container.py)."""
    if not isinstance(settings, dict) or not str(workdir or "").startswith("/"):
        raise AnsibleFilterError("container_argv: needs run_container and an absolute working directory (got %r, %r)"
                                 % (settings, workdir))
    return container.argv(settings, str(workdir))


def checkpoints(entries, own_script=False, unusable=False):
    """ansible.builtin.find's files of <run>/checkpoints -> the names of the run's checkpoints, oldest
    first (run_files.checkpoint_names: the reference trainer's step_NNNNNN[.pt] by step; your
    script's every entry with a usable name, those numbered by step last); with unusable, the names
    that are not used (run_files.unusable_checkpoint_names)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "path" in e for e in entries):
        raise AnsibleFilterError("checkpoints: needs the files of an ansible.builtin.find result (got %r)" % (entries,))
    if unusable:
        return run_files.unusable_checkpoint_names(entries)
    return run_files.checkpoint_names(entries, bool(own_script))


def checkpoint_step(name):
    """A checkpoint's name or path -> its step (step_000100.pt, step_000100/, checkpoint-100), or None."""
    return run_files.checkpoint_step(name)


class FilterModule(object):
    def filters(self):
        return {"env_file_values": env_file_values, "from_run_json": from_run_json, "log_metrics": log_metrics,
                "event_metrics": event_metrics,
                "pipeline_fingerprint": pipeline_fingerprint, "pipeline_verdict": pipeline_verdict, "pipeline_record": pipeline_record_text,
                "gpu_options": gpu_options, "container_argv": container_argv, "checkpoints": checkpoints,
                "checkpoint_step": checkpoint_step,
                "run_facts": facts, "facts_progress": facts_progress}
