# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # What every module that talks to Slurm shares: where it runs and what it needs.
    DOCUMENTATION = r"""
options: {}
requirements:
  - The Slurm client commands (C(scontrol), C(squeue); C(sbatch) and C(scancel) to submit
    and cancel) on the target's PATH, configured to reach the controller (C(slurm.conf) or
    E(SLURM_CONF)).
notes:
  - Runs on the login node; compute nodes need no Ansible access.
  - Works without Slurm accounting. Job details come from C(scontrol show job) and
    C(squeue); C(sacct) is asked only when the controller has forgotten a job and
    accounting is enabled. A finished job known to neither is reported with state
    V(UNKNOWN), not as an error.
  - Every Slurm command is run as an argument vector, never through a shell.
"""

    # Job states, for RETURN blocks and descriptions.
    JOB_STATES = r"""
options: {}
notes:
  - "Active job states (the job still holds or waits for resources): V(PENDING),
    V(CONFIGURING), V(RUNNING), V(COMPLETING), V(SUSPENDED), V(STOPPED), V(SIGNALING),
    V(STAGE_OUT), V(REQUEUED), V(REQUEUE_HOLD), V(REQUEUE_FED), V(RESIZING),
    V(RESV_DEL_HOLD)."
  - "Finished job states: V(COMPLETED) (the only success), V(FAILED), V(CANCELLED),
    V(TIMEOUT), V(NODE_FAIL), V(OUT_OF_MEMORY), V(BOOT_FAIL), V(DEADLINE), V(PREEMPTED),
    V(SPECIAL_EXIT), V(REVOKED), and V(UNKNOWN) for a job the controller has forgotten."
"""

    # Tolerance of a controller that does not answer, for modules that wait on jobs.
    UNREACHABLE = r"""
options:
  unreachable_timeout:
    description:
      - Seconds to keep retrying, once per check, while the Slurm controller does not answer
        (stopped, restarting, overloaded) before failing. The jobs keep running meanwhile; the
        failure message says so and that running the task again re-attaches.
      - V(0) fails at the first unanswered query.
    type: float
    default: 0
    version_added: 0.1.0
"""

    # How a module that waits on jobs checks them.
    WAIT = r"""
options:
  poll_interval:
    description:
      - Seconds between two checks of the jobs while waiting (at least 1; one Slurm query each).
        A job's end is noticed within about this time.
    type: float
    default: 1
    version_added: 0.1.0
"""

    # What a look at a job returns besides its state: progress, the checks' records, its log.
    WATCH = r"""
options:
  metrics_file:
    description:
      - JSONL file the trainer appends to, one object per line with keys C(step),
        C(total_steps), C(loss), C(val_loss), C(lr), C(tokens_per_s), C(elapsed_s), C(eta_s).
      - A missing file gives RV(llmtrain.slurm.slurm_job_info#module:progress=null), not an error.
      - A half-written last line (no line break yet) is left for the next poll.
    type: path
  log_lines:
    description:
      - When no job of RV(jobs) is active any more, or one waits for nodes that are out of
        service, read the last job's output file and return RV(llmtrain.slurm.slurm_job_info#module:log) with this many of its last lines.
      - V(0) reads nothing.
    type: int
    default: 0
    version_added: 0.1.0
  node_check_file:
    description:
      - The JSON record the node check step writes (C(node_check.json) in the run directory),
        returned summarised as RV(llmtrain.slurm.slurm_job_info#module:node_check) when it exists.
    type: path
    version_added: 0.1.0
  network_check_file:
    description:
      - The JSON record the network check step of a training job writes (in C(network_check/)
        in the run directory), returned summarised as RV(llmtrain.slurm.slurm_job_info#module:network_check) when it exists.
    type: path
    version_added: 0.1.0
  progress_from_log:
    description:
      - For a script that writes no O(metrics_file) (or before it writes one), read RV(llmtrain.slurm.slurm_job_info#module:progress)
        from the last job's output instead - the last line among its last 200 that one of the
        O(progress_regex) patterns matches.
    type: bool
    default: false
    version_added: 0.1.0
  progress_regex:
    description:
      - Regular expressions of a progress line, tried in order, with named groups C(loss)
        (required), C(step), C(total_steps), C(val_loss), C(lr), C(tokens_per_s).
      - "Empty - the built-in ones, which recognise C(iter N: loss X), C(step N[/M] ... loss X
        [... lr Y]) and the Hugging Face Trainer's C({'loss': X, ...}) lines."
      - A pattern that backtracks (nested or adjacent repeats such as (a+)+ or C(\s*:?\s*)) gets 0.1 s of
        CPU time on a line, then is skipped on the lines after it, and RV(llmtrain.slurm.slurm_job_info#module:progress_warnings) says so.
    type: list
    elements: str
    default: []
    version_added: 0.1.0
  checkpoint_dir:
    description:
      - Where a Hugging Face Trainer saves its C(checkpoint-N/) directories. Its log lines print no
        step, and in a Slurm job's log no progress bar stands right before them; with
        O(progress_from_log), the newest C(checkpoint-N/trainer_state.json) there (its first 4 KiB and
        last 64 KiB) gives them their steps and the total, from its C(log_history), C(logging_steps) and
        C(max_steps).
    type: path
    version_added: 0.1.0
  event_dirs:
    description:
      - Directories whose TensorBoard event files (C(events.out.tfevents.*)) and Lightning C(metrics.csv)
        files (in a C(version_*) directory) give RV(llmtrain.slurm.slurm_job_info#module:progress) when
        O(metrics_file) holds no records, before the log lines of O(progress_from_log). They are looked for
        4 levels down, among at most 20,000 entries; the newest 4 files owned by this user are read, at
        most 1 MiB of each per look.
      - The loss is the scalar of O(progress_tag), or else of the first tag found of C(train_loss),
        C(train_loss_step), C(train/loss), C(loss_metrics/global_avg_loss), C(lm loss), C(loss/train),
        C(training_loss), C(loss); the validation loss, learning rate and tokens/s
        come from tags of their own (docs/own-script.md lists them).
    type: list
    elements: path
    default: []
    version_added: 0.2.0
  progress_tag:
    description:
      - The tag of the loss's scalar in the event files or the column of C(metrics.csv) in
        O(event_dirs) (C(pretrain_progress_tag)); unset, the first of the known loss tags found.
    type: str
    version_added: 0.2.0
  total_steps:
    description:
      - The steps the script trains, where its records do not say (event files never do)
        (C(pretrain_progress_total_steps)); RV(llmtrain.slurm.slurm_job_info#module:progress) then has a
        percentage and, from the records' times, an ETA.
    type: int
    version_added: 0.2.0
  hang_dir:
    description:
      - Where the training job's hang watch records each hang, in C(<job>-<start>/summary.json); the
        newest of the watched job is returned as RV(llmtrain.slurm.slurm_job_info#module:hang).
    type: path
    version_added: 0.1.0
  starts_file:
    description:
      - The run's record of its jobs' starts, one JSON object per line (C(job_id), C(start), C(nodes), C(time)), as
        the pretrain role's job script writes it at each start. With it the watched job's recoveries are returned in
        RV(llmtrain.slurm.slurm_job_info#module:recovery) - the nodes its last start had that Slurm now has out of
        service, the nodes a start lacks that the start before had, and where the reference trainer resumed (its line
        there, or its event in O(metrics_file)). Its last 16 lines are read.
    type: path
    version_added: 0.1.0
  straggler_threshold:
    description:
      - A node whose work per step (the C(node_times) or C(nodes) of the loss records in O(metrics_file)) is more than
        (1 + this) times the median node's in each of the last O(straggler_intervals) records is
        returned in RV(llmtrain.slurm.slurm_job_info#module:stragglers).
    type: float
    default: 0.2
    version_added: 0.1.0
  straggler_intervals:
    description:
      - How many records in a row a node must be that slow; V(0) looks for no stragglers.
    type: int
    default: 3
    version_added: 0.1.0
"""
