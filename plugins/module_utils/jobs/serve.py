# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving job of playbooks/serve.yml: a model of the run behind an OpenAI-compatible API, in a
one-node job (llmtrain_node.serve_job: vllm serve where slurm_python has vLLM, else transformers
serve behind the job's gate), which ends as soon as its server ends. One per run: a rerun attaches
to the running one whatever changed since."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, exit_code, js, q, words

# the variable of slurm_secret_env the server's API key is in (the role's _inference_serve_key_name)
KEY_NAME = "LLMTRAIN_SERVE_API_KEY"


class Serve(Job):

    stage = "serve"
    variables = ("inference_serve_gpus", "inference_serve_mem", "inference_serve_time_limit", "inference_serve_port",
                 "inference_serve_args")
    # model_dir: the Hugging Face model directory to serve (inference_serve_model's, or the newest
    # checkpoint's export, or your script's checkpoint as it is)
    facts = ("model_dir",)

    @property
    def model_dir(self):
        return str(self.fact["model_dir"])

    @property
    def model_name(self):
        """The model's name in the API (a link of that name in <run>/serve/ leads to its directory)."""
        return self.run.name

    @property
    def gpus(self):
        """inference_serve_gpus; unset: one where the nodes have GPUs, none on CPU nodes."""
        gpus = self.run.get("inference_serve_gpus")
        return int(gpus) if gpus is not None else min(self.run.int("slurm_gpus_per_node"), 1)

    def options(self):
        run = self.run
        return self.slurm_options({"nodes": 1, "ntasks": 1, "cpus-per-task": run.int("slurm_cpus_per_task"),
                                   "mem": run["inference_serve_mem"], "time": run["inference_serve_time_limit"]}, self.gpus)

    def submit(self):
        # kept off the nodes the run's node checks found bad; a job held by its check is released without them
        return dict(env={"PYTHONUNBUFFERED": "1"}, exclude=self.run.exclude, bad_nodes_file=self.run.bad_nodes_file,
                    keep_script=self.run.path("scripts", "serve.sbatch"))

    def lines(self):
        run = self.run
        lines = [
            "# Serves a model of run %s (an OpenAI-compatible API): llmtrain_node.serve_job runs" % js(run.name),
            "# vllm serve where slurm_python has vLLM, else transformers serve on the node's 127.0.0.1 behind the job's gate,",
            "# and ends the job as soon as its server ends.",
        ]
        lines += run.env_setup
        lines.append("# CPU threads of the server: the job's CPUs (slurm_cpus_per_task), unless set already")
        lines.append(self.threads_line(run.int("slurm_cpus_per_task")))
        lines.append("# first step: check the node this job got; a bad one is excluded and the job requeued (run role)")
        lines.append(self.node_check_line(self.gpus, "--require-torch"))
        # with tracing on (set -x in slurm_env_setup) the shell would print the exported secrets (the API
        # key) into the log; from here on no line of the script names the key: the job's Python reads it
        # from its environment
        lines.append(self.secrets_line())
        # the run's scripts directory quoted whole (cd_scripts_line quotes the run directory only), as the
        # job scripts of runs served before had it
        lines.append("cd %s || exit %d" % (q(run.scripts), exit_code("SETTING")))
        serve_dir = run.path("serve")
        lines.append("exec " + words(run.batch_python + [
            "-m", "llmtrain_node.serve_job", "--serve-dir", serve_dir, "--model-dir", self.model_dir,
            "--model", self.model_name, "--endpoint-file", serve_dir + "/endpoint.json",
            "--port", run.int("inference_serve_port"), "--gpus", self.gpus, "--key-env", KEY_NAME, "--"]
            + list(run.get("inference_serve_args", []))))
        return lines
