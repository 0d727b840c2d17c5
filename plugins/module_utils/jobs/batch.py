# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The batch inference job: every prompt of inference_prompts_file (copied to
<run>/batch/<batch>/prompts.jsonl), generated from the run's model by trainer.batch over
inference_nodes nodes x slurm_procs_per_node ranks (prompt i on rank i mod the ranks), then merged
in the prompts' order into generations.jsonl and summary.json there. A requeued or restarted job
generates only the prompts that have no record yet."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, js, q, words
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files


class Batch(Job):

    stage = "batch"
    variables = ("inference_nodes", "inference_batch_time_limit", "inference_batch_wait_timeout", "inference_max_new_tokens",
                 "inference_temperature", "inference_top_k", "inference_seed", "slurm_mem_per_cpu")
    # prompts and prompts_sha256: the prompts file's count of prompts and digest (llmtrain.slurm.prompts_file);
    # model_dir: the Hugging Face model directory on the cluster (the export stage's);
    # batch_dir: the batch's directory, <run>/batch/<key>, named by the prompts, the model and the
    # sampling defaults, which holds prompts.jsonl when the job is submitted
    facts = ("prompts", "prompts_sha256", "model_dir", "batch_dir")

    @property
    def model_dir(self):
        return str(self.fact["model_dir"])

    @property
    def batch_dir(self):
        return str(self.fact["batch_dir"])

    @property
    def done_file(self):
        return self.batch_dir + "/" + run_files.BATCH_DONE

    def options(self):
        # one task per rank; each node's CPUs (slurm_cpus_per_task) and memory shared by its ranks, as in
        # training; every start appends to the job's one log
        run = self.run
        return self.slurm_options({"nodes": run.int("inference_nodes"), "ntasks-per-node": run.int("slurm_procs_per_node"),
                                   "cpus-per-task": run.threads, "mem-per-cpu": run.get("slurm_mem_per_cpu"),
                                   "time": run["inference_batch_time_limit"], "open-mode": "append"},
                                  run.int("slurm_gpus_per_node"))

    def submit(self):
        # keep_script: the batch's script beside its records, to read or to submit by hand
        return dict(env={"PYTHONUNBUFFERED": "1"}, keep_script=self.batch_dir + "/batch.sbatch",
                    wait_timeout=self.run.int("inference_batch_wait_timeout"), exclude=self.run.exclude,
                    bad_nodes_file=self.run.bad_nodes_file)

    def lines(self):
        run = self.run
        nodes, procs = run.int("inference_nodes"), run.int("slurm_procs_per_node")
        prompts = self.batch_dir + "/prompts.jsonl"
        steps = run.container(run.scripts)
        lines = ["# Batch inference of run %s: %d prompts (sha256 %s)"
                 % (js(run.name), int(self.fact["prompts"]), str(self.fact["prompts_sha256"])[:16]),
                 "# from %s, over %d node(s) x %d rank(s)." % (js(self.model_dir), nodes, procs),
                 "# Every start generates only the prompts that have no record in the part files yet (trainer.batch)."]
        lines += run.env_setup
        lines += [
            "# CPU threads of each rank: its node's CPUs (slurm_cpus_per_task) over the node's ranks, unless set already",
            self.threads_line(run.threads),
            "# first step: check the nodes this job got; bad ones are excluded and the job requeued (run role)",
            self.node_check_line(run.int("slurm_gpus_per_node"), "--require-torch"),
            self.secrets_line(),
            self.cd_scripts_line(),
            "# one task per rank (SLURM_PROCID of SLURM_NTASKS): prompt i on rank i mod the ranks",
            "srun --kill-on-bad-exit=1 --ntasks=%d --ntasks-per-node=%d%s \\"
            % (nodes * procs, procs, "".join(" " + q(word) for word in steps["step"] + steps["task"])),
            "    %s -m trainer.batch --model %s \\" % (q(run["slurm_python"]), q(self.model_dir)),
            "    --prompts %s --out %s \\" % (q(prompts), q(self.batch_dir)),
            "    --max-new-tokens %d --temperature %s \\" % (run.int("inference_max_new_tokens"), float(run["inference_temperature"])),
            "    --top-k %d --seed %d || exit $?" % (run.int("inference_top_k"), run.int("inference_seed")),
            "# every rank ended: the records in the prompts' order, and the summary",
            "%s -m trainer.batch --merge --prompts %s --out %s || exit $?" % (words(run.batch_python), q(prompts), q(self.batch_dir)),
            "",
            "# the job records its own end: a play that stopped waiting for it knows it made the batch",
            self.job_end_line(self.done_file),
        ]
        return lines
