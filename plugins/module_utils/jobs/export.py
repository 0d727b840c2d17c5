# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The export job: the newest checkpoint as a Hugging Face model (<run>/export/step_<N>/, by
trainer.export on the job's first node), then its held-out loss over every rank
(<run>/eval/<name>.json, trainer.evaluate). A checkpoint your script wrote as a Hugging Face
directory is used as it is and only evaluated."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, exit_code, js, q, words
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files


class Export(Job):

    stage = "export"
    variables = ("inference_nodes", "inference_mem", "inference_time_limit", "inference_evaluate", "inference_eval_file",
                 "inference_eval_max_tokens")
    # checkpoint: the name of the checkpoint in <run>/checkpoints to export (the newest usable one)
    facts = ("checkpoint",)

    @property
    def checkpoint(self):
        return str(self.fact["checkpoint"])

    @property
    def model_name(self):
        """The model's name: your script's checkpoint's own, or step_<N> of ours."""
        if self.run.script:
            return self.checkpoint
        return "step_%06d" % run_files.checkpoint_step(self.checkpoint)

    @property
    def model_dir(self):
        """The model directory: the export, or your script's checkpoint as it is."""
        if self.run.script:
            return self.run.path("checkpoints", self.checkpoint)
        return self.run.path("export", self.model_name)

    @property
    def evaluate(self):
        """inference_evaluate; your script's run has no validation split of ours: it is evaluated on
        inference_eval_file only."""
        return bool(self.run["inference_evaluate"]) and (not self.run.script or bool(self.run.get("inference_eval_file")))

    @property
    def eval_text(self):
        eval_file = self.run.get("inference_eval_file")
        return self.run.path("eval", str(eval_file).rstrip("/").rsplit("/", 1)[-1]) if eval_file else None

    @property
    def done_file(self):
        return self.run.path(run_files.EXPORT_DONE)

    def options(self):
        run = self.run
        procs = run.int("slurm_procs_per_node")
        return self.slurm_options({"nodes": run.int("inference_nodes"), "ntasks-per-node": procs, "cpus-per-task": run.threads,
                                   "mem": run["inference_mem"], "time": run["inference_time_limit"]},
                                  min(run.int("slurm_gpus_per_node"), procs))

    def submit(self):
        # the same checkpoint, text and settings (all in the script): nothing is submitted again
        return dict(env={"PYTHONUNBUFFERED": "1"}, exclude=self.run.exclude, bad_nodes_file=self.run.bad_nodes_file)

    def lines(self):
        run = self.run
        what = ("used as it is (your script wrote it as a Hugging Face directory)" if run.script
                else "exported as a Hugging Face model to " + js(self.model_dir))
        then = ", then evaluated over every rank of the job" if self.evaluate else ""
        lines = ["# Run %s's checkpoint %s: %s%s." % (js(run.name), js(self.checkpoint), what, then)]
        lines += run.env_setup
        lines.append(self.threads_line(run.threads))
        lines.append("# first step: check the nodes this job got; a bad one is excluded and the job requeued (run role)")
        lines.append(self.node_check_line(min(run.int("slurm_gpus_per_node"), run.int("slurm_procs_per_node")),
                                          "--require-torch"))
        lines.append(self.secrets_line())
        lines.append(self.cd_scripts_line())
        lines.append("mkdir -p %s %s || exit $?" % (q(run.path("export")), q(run.path("eval"))))
        python = words(run.batch_python)
        if not run.script:
            partial, line = run.path("export", ".exported.json"), run.path("export", "exported.json")
            lines += [
                "# one process on this node: the checkpoint (a sharded one is read whole) into export/step_N/, "
                "unless it is there",
                "%s -m trainer.export --checkpoint %s \\" % (python, q(run.path("checkpoints", self.checkpoint))),
                "    --out %s > %s \\" % (q(run.path("export")), q(partial)),
                "  && mv %s %s \\" % (q(partial), q(line)),
                "  || exit $?",
            ]
        if self.evaluate:
            result = run.path("eval", self.model_name + ".json")
            text_args = ["--text", self.eval_text] if self.eval_text else ["--data", run.data_dir]
            steps = run.container(run.scripts)
            srun_python = steps["step"] + steps["task"] + [run["slurm_python"]]
            lines += [
                "# every rank of the job: its share of the held-out text's windows; the last rank to finish adds them up",
                "# into %s (an earlier job's is removed first: this job's is the one read)"
                % js("eval/" + self.model_name + ".json"),
                "rm -f %s" % q(result),
                "srun --kill-on-bad-exit=1 %s || exit $?" % words(
                    srun_python + ["-m", "trainer.evaluate", "--model", self.model_dir] + text_args
                    + ["--out", run.path("eval"), "--max-tokens", run.int("inference_eval_max_tokens")]),
                "if [ ! -f %s ]; then" % q(result),
                '    echo "llmtrain: the evaluation\'s ranks left no result (their lines above say why):" %s >&2'
                % q(result),
                "    exit %d" % exit_code("FAILED"),
                "fi",
            ]
        lines += ["", "# the job records its own end", self.job_end_line(self.done_file)]
        return lines
