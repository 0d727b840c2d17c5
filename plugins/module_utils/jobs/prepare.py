# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The data preparation job: run_dataset's text as tokens in <run>/data (trainer.prepare, one
process on one node, the tokenizer deploy_tokenizer), once: the trainer skips unchanged input, and
the same input (all in the script) submits nothing."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, js, q, words
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.venv import record_file
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files


def flatten(value):
    """run_dataset, one path or a list of them (nested lists too), as a list of paths."""
    if isinstance(value, (list, tuple)):
        return [item for element in value for item in flatten(element)]
    return [] if value is None else [value]


class Prepare(Job):

    stage = "prepare"
    variables = ("run_dataset", "deploy_tokenizer", "deploy_vocab_size", "deploy_dataset_max_bytes", "deploy_prepare_mem",
                 "deploy_prepare_time_limit", "deploy_venv_create")

    @property
    def done_file(self):
        return self.run.path(run_files.PREPARE_DONE)

    @property
    def inputs(self):
        return flatten(self.run["run_dataset"])

    def options(self):
        run = self.run
        return self.slurm_options({"nodes": 1, "ntasks": 1, "cpus-per-task": 1, "mem": run["deploy_prepare_mem"],
                                   "time": run["deploy_prepare_time_limit"]})

    def submit(self):
        # behind the venv job while its record does not say it completed (not waited for: pretrain_watch=false)
        venv = boolean(self.run.get("deploy_venv_create", False), strict=False)
        after = [record_file(self.run["slurm_python"])] if venv else []
        # kept off the nodes the run's node checks found bad; a job held by its check is released without them
        return dict(after_records=after, exclude=self.run.exclude, bad_nodes_file=self.run.bad_nodes_file)

    def lines(self):
        run = self.run
        tokenizer = run["deploy_tokenizer"]
        max_bytes = run.int("deploy_dataset_max_bytes")
        command = "%s -m trainer.prepare --out %s \\\n    --input %s" % (
            words(run.batch_python), q(run.path("data")), words(self.inputs))
        if max_bytes > 0:
            command += " \\\n    --max-bytes %d" % max_bytes
        if tokenizer != "bytes":
            command += " \\\n    --tokenizer %s" % q(tokenizer)
        if tokenizer == "bpe":
            command += " \\\n    --vocab-size %d" % run.int("deploy_vocab_size")
        lines = ["# Text -> tokens (%s) for run %s, once (the trainer skips unchanged input)." % (js(tokenizer), js(run.name))]
        lines += run.env_setup
        lines += [
            "# CPU threads of its one process: the job's one CPU, unless set already",
            self.threads_line(1),
            "# first step: check the node this job got; a bad one is excluded and the job requeued (run role)",
            self.node_check_line(0),
            "cd %s/scripts" % q(run.dir),
            command + " || exit $?",
            "# the job records its own end: a run that did not wait for it (pretrain_watch=false) knows the data is",
            "# prepared, also once Slurm has forgotten the job",
            self.job_end_line(self.done_file),
            "",
        ]
        return lines
