# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The training job: the seed's torch.distributed job (one task per node, torch.distributed.run on
each), in the run's NCCL/UCX env and container, behind the node and network checks, with a hang
watch beside it and requeues that survive preemption. Everything it decides is in Python on its
batch node (llmtrain_node.job, node/job.py), given the settings this class writes into the script
as JSON (job_config); the script itself only sets the environment and hands over."""

from __future__ import annotations

import json

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, exit_code, js, q, words
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.prepare import Prepare
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.venv import record_file
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files

# every training job of a run is called this and the run's name (the status and stop playbooks
# list the run's jobs by it: the pretrain role's _pretrain_job_prefix)
NAME_PREFIX = "llmtrain-"
# requeues of a job that run_requeue_max does not count (a SIGTERM that Slurm did not send to end
# the job, docs/reliability.md row 3); past these they count
UNCOUNTED_REQUEUES_MAX = 3
# the most lines of the job's log the watch shows when it fails
LOG_LINES = 30


class Train(Job):

    stage = "train"
    variables = ("slurm_nodes", "slurm_mem_per_cpu", "slurm_time_limit", "slurm_master_port", "run_source",
                 "run_wandb_project", "run_wandb_mode", "run_wandb_entity", "run_requeue_max", "run_notify",
                 "pretrain_model", "pretrain_steps", "pretrain_batch_size", "pretrain_learning_rate",
                 "pretrain_checkpoint_interval", "pretrain_parallel", "pretrain_extra_args", "pretrain_script_args",
                 "pretrain_signal_lead", "pretrain_rendezvous_timeout", "pretrain_restarts_in_job",
                 "pretrain_network_check", "pretrain_network_min_fraction", "pretrain_network_policy",
                 "pretrain_hang_timeout", "pretrain_hang_policy", "pretrain_progress_regex", "pretrain_progress_tag",
                 "pretrain_progress_total_steps", "pretrain_straggler_threshold", "pretrain_straggler_intervals")

    @property
    def name(self):
        return NAME_PREFIX + self.run.name

    @property
    def done_file(self):
        # the record that a rerun trains nothing, written once the job completed
        return self.run.path(run_files.DONE)

    @property
    def container(self):
        """The run's container for the training step, which runs in your script's directory or ours."""
        run = self.run
        return run.container(run.code_chdir if run.script else run.scripts)

    @property
    def job_python(self):
        """The job's own Python on the batch node: slurm_python, or with a container (which holds
        slurm_python) the node's own python3."""
        return "python3" if self.container["batch"] else str(self.run["slurm_python"])

    @property
    def job_python_fix(self):
        """What to do when the job's own Python does not run."""
        if self.container["batch"]:
            return ("the job runs its own logic on the node itself, outside the run container (slurm_container_runtime): "
                    "install python3 (3.7 or later) there, or let slurm_env_setup put one on the PATH")
        return "install Python there, or point slurm_python (and slurm_env_setup, e.g. module load) at one that runs"

    @property
    def hang_timeout(self):
        """pretrain_hang_timeout as the hang watch takes it: auto, or seconds (0: no hang watch)."""
        return str(self.run["pretrain_hang_timeout"])

    @property
    def restarts_in_job(self):
        return self.run.int("pretrain_restarts_in_job")

    @property
    def training_argv(self):
        """What each node's torch.distributed.run runs: the reference trainer with the run's settings,
        or your script with its arguments."""
        run = self.run
        if run.script:
            return [run.code_script] + list(run["pretrain_script_args"])
        argv = ["-m", "trainer.train", "--data", run.data_dir, "--out", run.dir,
                "--steps", str(run["pretrain_steps"]), "--batch-size", str(run["pretrain_batch_size"]),
                "--learning-rate", str(run["pretrain_learning_rate"]),
                "--checkpoint-interval", str(run["pretrain_checkpoint_interval"]),
                "--rendezvous-timeout", str(run["pretrain_rendezvous_timeout"])]
        for key, value in run["pretrain_model"].items():
            argv += ["--" + key.replace("_", "-"), str(value)]
        if run.get("run_wandb_project"):
            argv += ["--wandb-project", run["run_wandb_project"], "--wandb-mode", run["run_wandb_mode"]]
            if run.get("run_wandb_entity"):
                argv += ["--wandb-entity", run["run_wandb_entity"]]
        if run["pretrain_parallel"] != "ddp":
            argv += ["--parallel", run["pretrain_parallel"]]
        return argv + list(run["pretrain_extra_args"])

    def checks(self):
        """The steps before training: the node check, and the network check unless turned off."""
        run = self.run
        gpus, procs = run.int("slurm_gpus_per_node"), run.int("slurm_procs_per_node")
        checks = [run.node_check(gpus, "--require-torch", "--procs", procs)]
        if boolean(run["pretrain_network_check"], strict=False):
            checks.append(["bash", run.path("scripts", "network_check.sh"), "--gpus", gpus, "--procs", procs,
                           "--policy", run["pretrain_network_policy"],
                           "--min-fraction", float(run["pretrain_network_min_fraction"]),
                           "--timeout", min(run.int("pretrain_rendezvous_timeout"), 60)])
        return [[str(word) for word in check] for check in checks]

    def hang(self):
        """The hang watch beside the training step (pretrain_hang_timeout, pretrain_hang_policy), or None."""
        run = self.run
        if self.hang_timeout != "auto" and float(self.hang_timeout) <= 0:
            return None
        args = ["--timeout", self.hang_timeout, "--policy", run["pretrain_hang_policy"], "--out-dir", run.path(run_files.HANGS),
                "--marker", run.path(run_files.HANG), "--bad-nodes-file", run.bad_nodes_file,
                "--restarts-in-job", self.restarts_in_job, "--python", run["slurm_python"]]
        for pattern in run["pretrain_progress_regex"]:
            args += ["--record-pattern", pattern]
        if run.script:
            args += ["--event-dir", run.code_chdir, "--event-dir", run.dir]
            if run.get("pretrain_progress_tag"):
                args += ["--progress-tag", run["pretrain_progress_tag"]]
        return {"python": [str(word) for word in run.batch_python], "args": [str(word) for word in args],
                "prefix": self.container["step"] + self.container["task"]}

    def job_config(self):
        """The settings llmtrain_node.job reads (node/job.py): the checks it runs before training, the
        requeue allowances, the done record, the hang watch's command."""
        run = self.run
        return {
            "run_dir": run.dir,
            "run_name": run.name,
            # run_notify: the job posts its events to the webhooks in env/notify.json (never here: they hold tokens)
            "notify": len(run.get("run_notify", [])) > 0,
            "gpus_per_node": run.int("slurm_gpus_per_node"),
            "signal_lead": run.int("pretrain_signal_lead"),
            "requeue_max": run.int("run_requeue_max"),
            "uncounted_max": UNCOUNTED_REQUEUES_MAX,
            "done_file": self.done_file,
            "checks": self.checks(),
            "script_chdir": run.code_chdir if run.script else None,
            "wandb_run": run.name if run.get("run_wandb_project") else None,
            "hang": self.hang(),
        }

    def options(self):
        # every start appends to one log per job id (a requeued job keeps its id); it requeues itself
        # on a stop with a checkpoint, and is told to make one this long before its time limit
        run = self.run
        return self.slurm_options({"nodes": run.int("slurm_nodes"), "ntasks-per-node": 1,
                                   "cpus-per-task": run.int("slurm_cpus_per_task"), "mem-per-cpu": run["slurm_mem_per_cpu"],
                                   "time": run["slurm_time_limit"], "open-mode": "append",
                                   "signal": "USR2@%d" % run.int("pretrain_signal_lead")}, run.int("slurm_gpus_per_node"))

    def submit(self):
        run = self.run
        args = dict(
            # queued at once behind the data and venv jobs while their records do not say they completed
            # (the deploy stage did not wait for them: pretrain_watch=false; one queue wait for a new run); a
            # job re-attached to that waits for good on one that failed is put behind those submitted again
            after_records=[Prepare(run).done_file, record_file(run["slurm_python"])],
            # the text the job runs, kept for people to read and rerun by hand (0755, written only when it
            # differs); a job of this run that is already active keeps the script it runs
            keep_script=run.path("scripts", "pretrain.sbatch"),
            # kept off the nodes the run's node checks found bad, and those the user names; the watch
            # releases a job its node check held without its bad nodes (or cancels it, naming them)
            exclude=run.exclude,
            bad_nodes_file=run.bad_nodes_file,
            metrics_file=run.path(run_files.METRICS),
            # your script's progress from its log while it writes no metrics file
            progress_from_log=bool(run.script),
            progress_regex=list(run["pretrain_progress_regex"]),
            # before the log lines: the TensorBoard event files (and Lightning metrics.csv) your script
            # writes, where it runs and in the run directory, read from where the last look stopped
            event_dirs=[run.code_chdir, run.dir] if run.script else [],
            event_state_file=run.path("logs", ".event_files_read.json"),
            # where pretrain_progress_total_steps is null, the total your script's arguments set
            script_args=list(run["pretrain_script_args"]) if run.script else [],
            # a hang the job's hang watch found: the node it names and that rank's first frames
            hang_dir=run.path(run_files.HANGS),
            # the job's starts: a lost node, the start after it, where it resumed
            starts_file=run.path(run_files.STARTS),
            log_lines=LOG_LINES,
            node_check_file=run.path("node_check", self.name + ".json"),
            # a node that holds the others back is named once (the loss records' per-node step times)
            straggler_threshold=float(run["pretrain_straggler_threshold"]),
            straggler_intervals=run.int("pretrain_straggler_intervals"),
            # the fabric as the job's network check measured it, and the node it names slow
            network_check_file=run.path("network_check", self.name + ".json"),
        )
        if run.get("pretrain_progress_tag"):
            args["progress_tag"] = str(run["pretrain_progress_tag"])
        if run.get("pretrain_progress_total_steps"):
            args["total_steps"] = run.int("pretrain_progress_total_steps")
        if run.script:
            # a Hugging Face Trainer's steps, which its log lines print not: its newest trainer_state.json
            args["checkpoint_dir"] = run.path("checkpoints")
        return args

    def lines(self):
        run = self.run
        lines = ["# Run %s: the seed's torch.distributed job, with the run's NCCL/UCX env," % js(run.name),
                 "# a master address computed once, a port from the job id, preemption-safe requeues.",
                 ""]
        lines += run.env_setup
        lines += ["export LLMTRAIN_RUN_DIR=%s" % q(run.dir),
                  "export LLMTRAIN_PYTHON=%s" % q(run["slurm_python"])]
        if run.script:
            source = run["run_source"]
            lines += [
                "# Your script's contract (docs/own-script.md): where it keeps checkpoints, where it may write",
                "# metrics (JSON lines), and the file it writes before it exits on SIGUSR2 so that the job",
                "# requeues itself. Its source, as deployed (%d file(s)): sha1 %s" % (len(source["files"]), js(source["digest"])),
                "export LLMTRAIN_CHECKPOINT_DIR=%s" % q(run.path("checkpoints")),
                "export LLMTRAIN_METRICS_FILE=%s" % q(run.path(run_files.METRICS)),
                "export LLMTRAIN_PREEMPT_MARKER=%s" % q(run.path(run_files.PREEMPTED)),
                "export LLMTRAIN_SCRIPT_CHDIR=%s" % q(run.code_chdir),
            ]
        if run.get("run_wandb_project"):
            lines += [
                "# Weights & Biases (run_wandb_project), read by wandb.init() in the training processes: every",
                "# start of the run continues one W&B run, whose id the job keeps in wandb/run_id.",
                'export WANDB_PROJECT=%s WANDB_MODE=%s WANDB_DIR="${LLMTRAIN_RUN_DIR}"'
                % (q(run["run_wandb_project"]), q(run["run_wandb_mode"])),
            ]
            if run.get("run_wandb_entity"):
                lines.append("export WANDB_ENTITY=%s" % q(run["run_wandb_entity"]))
        port = run["slurm_master_port"]
        lines += [
            "export GPUS_PER_NODE=%d PYTHONUNBUFFERED=1" % run.int("slurm_procs_per_node"),
            "# CPU threads of each training process: the node's CPUs (slurm_cpus_per_task) over its processes,",
            "# unless slurm_env_setup, the environment or the env files (sourced on each node) set them.",
            self.threads_line(run.threads),
            # auto: 16000-23999, below Linux's ephemeral ports (32768 and up, the kernel's default
            # ip_local_port_range), which any outgoing connection on the node may hold; the network
            # check's port is 8000 above it (network_check.sh), so no two jobs' ports meet
            "export MASTER_PORT=%s" % ("$((16000 + SLURM_JOB_ID % 8000))" if str(port) == "auto" else int(port)),
            "",
            "# The job, in Python on this node (llmtrain_node.job): its start and end lines, the node check and",
            "# network check steps, MASTER_ADDR, then the training step below in the seed's shape (one task per",
            "# node, sourcing its node's env file, in the run's container where there is one), the hang watch",
            "# beside it, and the requeue, stop and end decisions.",
            "job_python=%s" % q(self.job_python),
            """if ! "${job_python}" -c '' 2>/dev/null; then""",
            '    echo "llmtrain: ${job_python} does not run on the batch node $(hostname) after slurm_env_setup: %s" >&2'
            % self.job_python_fix,
            "    exit %d" % exit_code("NODE_CHECK_FAILED"),
            "fi",
            'PYTHONPATH="${LLMTRAIN_RUN_DIR}/scripts${PYTHONPATH:+:${PYTHONPATH}}" exec "${job_python}" -m llmtrain_node.job '
            "%s -- \\" % q(json.dumps(self.job_config(), indent=1, sort_keys=True, separators=(",", ": "))),
        ]
        lines += self.training_step_lines()
        return lines

    def training_step_lines(self):
        """The training step: one task per node, which sources its node's env file and starts
        torch.distributed.run (in one single-quoted sh -c: no single quote in it)."""
        run = self.run
        srun = "srun --kill-on-bad-exit=1"
        if run.script:
            srun += ' --chdir="${LLMTRAIN_SCRIPT_CHDIR}"'
        prefix = self.container["step"] + self.container["task"]
        if prefix:
            srun += " " + words(prefix)
        lines = [
            srun + """ sh -c 'trap "" USR2""",
            '    env_file="${LLMTRAIN_RUN_DIR}/env/${SLURMD_NODENAME:-$(hostname)}.env"',
            '    [ -f "${env_file}" ] || env_file="${LLMTRAIN_RUN_DIR}/env/cluster.env"',
            '    if [ ! -f "${env_file}" ]; then',
            '        echo "llmtrain: no NCCL/UCX env file in ${LLMTRAIN_RUN_DIR}/env: run the nccl_env stage '
            '(playbooks/nccl_env.yml)" >&2',
            "        exit %d" % exit_code("ENV_FILE_MISSING"),
            "    fi",
            '    . "${env_file}"',
            '    secrets="${LLMTRAIN_RUN_DIR}/env/secrets.env"  # sourced with tracing off: it would print them',
            '    if [ -f "${secrets}" ]; then case $- in *x*) set +x; . "${secrets}"; set -x ;; *) . "${secrets}" ;; esac; fi',
            "    # after the env files, so that a PYTHONPATH set there (nccl_env_extra) adds to the run scripts",
            '    export PYTHONPATH="${LLMTRAIN_RUN_DIR}/scripts${PYTHONPATH:+:${PYTHONPATH}}"',
        ]
        if self.restarts_in_job > 0:
            lines += [
                "    # pretrain_restarts_in_job: the c10d rendezvous, its store on task 0, so that every node restarts its",
                "    # ranks together; each round gets a store of its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE: in the",
                "    # shared one a launcher keeps its count, its ranks read stale addresses). No single quote here.",
                '    is_host=0; [ "${SLURM_PROCID}" = 0 ] && is_host=1',
                "    export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1",
            ]
        lines += [
            '    exec "${LLMTRAIN_PYTHON}" -m torch.distributed.run \\',
            "        --nnodes ${SLURM_NNODES} \\",
            "        --nproc_per_node ${GPUS_PER_NODE} \\",
        ]
        timeout = run.int("pretrain_rendezvous_timeout")
        if self.restarts_in_job > 0:
            lines += [
                "        --rdzv-backend c10d --rdzv-endpoint ${MASTER_ADDR}:${MASTER_PORT} --rdzv-id ${SLURM_JOB_ID} \\",
                "        --rdzv-conf join_timeout=%d,is_host=${is_host} \\" % timeout,
                "        --local-addr ${SLURMD_NODENAME:-$(hostname)} --max-restarts %d \\" % self.restarts_in_job,
            ]
        else:
            lines += [
                "        --node_rank ${SLURM_PROCID} \\",
                "        --master_addr ${MASTER_ADDR} \\",
                "        --master_port ${MASTER_PORT} \\",
                "        --rdzv-conf timeout=%d \\" % timeout,
            ]
        lines.append("""        "$@"' llmtrain """ + words(self.training_argv))
        return lines
