# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read run artifacts back.

  text | llmtrain.slurm.env_file_values -> {NAME: value} of an env file the nccl_env role wrote
  text | llmtrain.slurm.from_run_json(default, name) -> the JSON value of a file of the run, read bounded
  run values | llmtrain.slurm.pipeline_fingerprint(workers, source digest) -> what the run is made from
  read_files result | llmtrain.slurm.pipeline_verdict(fingerprint, missing) -> may a rerun stop here
  read_files result | llmtrain.slurm.pipeline_record(fingerprint) -> the text of <run>/pipeline.json
  GPUs per node | llmtrain.slurm.gpu_options(type, how) -> the sbatch options that ask for them
  container settings | llmtrain.slurm.container_argv(workdir) -> {step, task, batch}: how a job runs its Python
  find result files | llmtrain.slurm.checkpoints(own_script) -> the run's checkpoint names, oldest first
  checkpoint name | llmtrain.slurm.checkpoint_step -> its step, or None
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container, pipeline_record, run_facts
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base as jobs_base
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import node_check, run_files

display = Display()


def env_file_values(text):
    """The `export NAME=value` lines of an env file, read back as the shell would."""
    return node_check.env_file_values(text)


def from_run_json(text, default=None, name="a file of the run"):
    """The JSON value of a file of the run (untrusted: read bounded in size and depth, numbers
    finite), or default when it is not one, or not of default's type, said in a warning."""
    return run_facts.run_json(text, default, name, display.warning)


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
    the batch node}, each a list of words; all empty without a container (module_utils/rundir/container.py)."""
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
        return {"env_file_values": env_file_values, "from_run_json": from_run_json,
                "pipeline_fingerprint": pipeline_fingerprint, "pipeline_verdict": pipeline_verdict, "pipeline_record": pipeline_record_text,
                "gpu_options": gpu_options, "container_argv": container_argv, "checkpoints": checkpoints,
                "checkpoint_step": checkpoint_step}
