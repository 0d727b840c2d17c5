# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The samples job, on one node: the reference trainer's trainer.generate from the newest checkpoint
(<run>/samples.json), or your inference_script for a run of your own training script (its standard
output: <run>/samples.txt). Made for the run's training job (training_job), it is queued behind that
job while it is active (the pipeline queues it once the training is submitted, watched or not) and
samples the newest checkpoint once the training completed; Slurm cancels it when the training ends
otherwise (--kill-on-invalid-dep). A job id of its own in its script, a new training samples again
and a rerun of the same one does not."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, exit_code, js, q, words
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files, untrusted


class Generate(Job):

    stage = "generate"
    variables = ("inference_mem", "inference_time_limit", "inference_prompts", "inference_max_new_tokens",
                 "inference_temperature", "inference_top_k", "inference_seed", "inference_script",
                 "inference_script_args", "run_source")
    # checkpoint: the reference trainer's newest checkpoint in <run>/checkpoints by name ('' queued behind
    # the training: trainer.generate takes the newest there once it runs);
    # checkpoints: your script's entries of <run>/checkpoints, {name: mtime}, which its script lists so
    # that new ones sample again;
    # training_job: the run's training job whose checkpoints it samples (its newest, once the job
    # completed), instead of either: the pipeline knows it, inference.yml alone does not
    facts = ("checkpoint", "checkpoints", "training_job")

    @property
    def training_job(self):
        job = str(self.fact.get("training_job") or "")
        if job and not untrusted.JOB_ID.match(job):
            raise ValueError("training_job=%r is no Slurm job id" % job)
        return job

    @property
    def checkpoint(self):
        return "" if self.training_job else str(self.fact["checkpoint"])

    @property
    def checkpoints(self):
        """Your script's checkpoints as its script lists them: [(name, whole seconds of mtime)], by name."""
        if self.training_job:
            return []
        return sorted((str(name), int(float(mtime))) for name, mtime in dict(self.fact["checkpoints"] or {}).items())

    @property
    def done_file(self):
        return self.run.path(run_files.GENERATE_DONE)

    @property
    def gpus(self):
        """One GPU of the run's type where its nodes have GPUs."""
        return 1 if self.run.int("slurm_gpus_per_node") > 0 else 0

    def options(self):
        run = self.run
        own = {"nodes": 1, "ntasks": 1, "cpus-per-task": run.int("slurm_cpus_per_task"),
               "mem": run["inference_mem"], "time": run["inference_time_limit"]}
        if self.training_job:
            # behind a training that fails or is stopped it would wait for good: Slurm cancels it then
            own["kill-on-invalid-dep"] = "yes"
        return self.slurm_options(own, self.gpus)

    def submit(self):
        # after_records: queued behind the training job while its record does not say it completed
        return dict(env={"PYTHONUNBUFFERED": "1"}, after_records=[self.run.path(run_files.DONE)],
                    exclude=self.run.exclude, bad_nodes_file=self.run.bad_nodes_file)

    def lines(self):
        run = self.run
        if run.script:
            lines = ["# Samples of run %s from your script %s (source sha1 %s)."
                     % (js(run.name), js(run["inference_script"]), js(run["run_source"]["digest"]))]
            if not self.training_job:
                lines.append("# Its checkpoints when submitted (new ones sample again):")
                lines += ["#   %s %d" % (js(name), mtime) for name, mtime in self.checkpoints]
        else:
            which = "checkpoint " + js(self.checkpoint) if self.checkpoint else "the newest checkpoint"
            lines = ["# Samples from %s of run %s." % (which, js(run.name))]
        if self.training_job:
            lines.append("# The checkpoints of training job %s: queued behind it while it is active, it samples once it "
                         "completed (a new training job samples again)." % self.training_job)
        lines += run.env_setup
        threads = run.int("slurm_cpus_per_task")
        lines += ["# CPU threads of its one process: the job's CPUs (slurm_cpus_per_task), unless set already",
                  self.threads_line(threads),
                  "# first step: check the node this job got; a bad one is excluded and the job requeued (run role)",
                  self.node_check_line(self.gpus, "--require-torch"),
                  self.secrets_line()]
        lines += self.own_sampling() if run.script else self.reference_sampling()
        lines += ["",
                  "# the job records its own end: a run that did not wait for it (inference_after_training) knows it sampled",
                  self.cd_scripts_line(),
                  self.job_end_line(self.done_file)]
        return lines

    def reference_sampling(self):
        """trainer.generate on the prompts (one line of JSON in a here-document: no line of it can end
        the here-document) into samples.json."""
        run = self.run
        prompts, partial = run.path("prompts.json"), run.path("samples.json.tmp")
        return [
            "cd %s/scripts" % q(run.dir),
            "cat > %s <<'LLMTRAIN_PROMPTS'" % q(prompts),
            js(run["inference_prompts"]),
            "LLMTRAIN_PROMPTS",
            "%s -m trainer.generate --checkpoint %s \\" % (words(run.batch_python), q(run.path("checkpoints", self.checkpoint))),
            "    --prompt-file %s \\" % q(prompts),
            "    --max-new-tokens %d --temperature %s \\" % (run.int("inference_max_new_tokens"), float(run["inference_temperature"])),
            "    --top-k %d --seed %d --json \\" % (run.int("inference_top_k"), run.int("inference_seed")),
            "    > %s \\" % q(partial),
            "  && mv %s %s \\" % (q(partial), q(run.path("samples.json"))),
            "  || exit $?",
        ]

    def own_sampling(self):
        """Your inference_script in run_script_chdir, its standard output into samples.txt."""
        run = self.run
        partial = run.path("samples.txt.tmp")
        python = run.container(run.code_chdir)["batch"] + [run["slurm_python"]]
        return [
            "export LLMTRAIN_RUN_DIR=%s" % q(run.dir),
            "export LLMTRAIN_CHECKPOINT_DIR=%s" % q(run.path("checkpoints")),
            "export LLMTRAIN_SCRIPT_CHDIR=%s" % q(run.code_chdir),
            "export PYTHONUNBUFFERED=1",
            'cd "${LLMTRAIN_SCRIPT_CHDIR}" || exit %d' % exit_code("SETTING"),
            "# its standard output is the samples (runs/<run>/samples.txt); its errors go to this log",
            "%s %s %s \\" % (words(python), q(run.code_dir + "/" + str(run["inference_script"])),
                             words(run.get("inference_script_args", []))),
            "    > %s \\" % q(partial),
            "  && mv %s %s \\" % (q(partial), q(run.path(run_files.SAMPLES))),
            "  || exit $?",
        ]
