#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sbatch
short_description: Submit a Slurm batch job once, wait for it or watch it, or cancel it
description:
  - Submits a batch script with C(sbatch --parsable), unless the same job already exists.
  - "A job's identity is its name plus a fingerprint (16 hex digits of a SHA-256) of the
    name, the script content, O(options), O(env) and O(chdir). The fingerprint is recorded
    on the job as its comment, C(llmtrain:FINGERPRINT), so the job is found again by
    C(squeue) (and C(sacct) where accounting keeps comments)."
  - "Whether the job already ran is decided in this order: (1) O(done_file) records this
    identity: the task returns at once, asking Slurm nothing; (2) the same identity pending or
    running: C(changed=false) and the same RV(job_id) (the task re-attaches to it); (3) the same
    identity completed successfully and still known to Slurm (C(scontrol), or C(sacct) where
    accounting keeps comments), and with O(done_file) the job its record names: C(changed=false),
    nothing submitted, and O(done_file), when set, is written; (4) otherwise the job is submitted."
  - With O(wait), the task returns when the job has left the active states, checking it
    once per O(poll_interval); it fails when the job did not complete successfully,
    showing the last lines of its output.
  - O(state=watched) submits nothing; it watches the job an earlier task submitted with the same
    options (O(job_id)) for up to O(wait_timeout) seconds and returns what a look at it finds, as
    M(llmtrain.slurm.slurm_job_info) does (RV(jobs), RV(llmtrain.slurm.slurm_job_info#module:progress), the node and network checks,
    the log once it ended), for C(until) loops that print a progress line per retry. It settles the
    job when its node check holds it (O(bad_nodes_file)) and writes O(done_file) once the job
    completed; it does not fail because the job failed (C(jobs[0].success) says so).
  - O(state=absent) cancels the active jobs of this name (of the connecting user).
  - The job runs with the umask of the connecting user less group and other write
    (E(SLURM_UMASK)), so that under a login shell's umask 002 the files and directories it makes
    are not writable by the user's group; a private umask such as 077 is kept.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
  - llmtrain.slurm.slurm.job_states
  - llmtrain.slurm.slurm.unreachable
  - llmtrain.slurm.slurm.wait
  - llmtrain.slurm.slurm.watch
options:
  name:
    description:
      - Job name (C(--job-name)). Passed literally, whatever characters it holds.
      - Required, except with O(stage), whose job has its own.
    type: str
  stage:
    description:
      - A stage of the run whose job to submit, one of V(prepare), V(venv), V(train), V(generate),
        V(export), V(batch), V(serve), instead of O(name) and a script. The stage's class
        (C(plugins/module_utils/jobs/)) makes the job's name, O(options), script, O(done_file) and the
        other options that derive from the run's variables (C(slurm_*), C(run_*) and the stage role's),
        which the action plugin reads from the task's variables; the task may not set those again.
      - Done by the action plugin on the controller; the module itself refuses it.
    type: str
  facts:
    description:
      - With O(stage), what the play found before the job that its script names, such as
        C(checkpoint), the checkpoint to export; each stage takes its own and refuses others.
    type: dict
  script:
    description:
      - Path of the batch script on the target. Its content is part of the job's identity.
      - Mutually exclusive with O(content).
    type: path
  content:
    description:
      - Text of the batch script, given to C(sbatch) on its standard input.
      - Mutually exclusive with O(script). One of them is required with O(state=present).
    type: str
  chdir:
    description: Working directory of the job (C(--chdir)); relative output paths are below it.
    type: path
  options:
    description:
      - C(sbatch) long options, as O(options) key C(cpus-per-task) (or C(cpus_per_task))
        and value C(2) for C(--cpus-per-task=2); a value of V(true) gives the bare flag, V(false)
        leaves the option out.
      - Unknown or malformed keys are rejected, and so are the options the module sets
        itself (C(job-name), C(comment), C(chdir), C(parsable), C(wait), C(wrap)).
      - Values are passed as one argument each, never through a shell.
    type: dict
    default: {}
  env:
    description:
      - Environment variables for the job. They are given to C(sbatch) in its own process
        environment, never on its command line, so values holding commas, quotes, newlines
        or shell command substitutions reach the job unchanged and execute nothing.
      - With the C(export) option unset this adds C(--export=ALL); with C(export=NONE) it
        becomes C(--export=NAME1,NAME2) (names only; Slurm reads the values from the
        environment); with a list of names, these names are added to it.
      - Not for secrets. Slurm saves the environment it exports with the job (in its state
        files, and in its accounting database where C(AccountingStoreFlags=job_env) is set),
        readable by Slurm administrators; with C(--export=ALL), the default here, that is the
        whole login environment besides these values. The values also show in the task's
        arguments in verbose output, as they are not masked (masking would also hide every
        short value such as C(1) wherever it appears in the result, job ids included). Put
        secrets in a mode-0600 file that the job script sources instead, as the roles do
        with C(slurm_secret_env).
    type: dict
    default: {}
  state:
    description:
      - V(present) submits the job unless it exists (see above).
      - V(watched) watches the job O(job_id) (see above).
      - V(absent) cancels every active job of this name.
    type: str
    choices: [present, watched, absent]
    default: present
  job_id:
    description:
      - With O(state=watched), the job to watch, as an earlier task of this module with the same
        O(name), O(script) or O(content), O(options), O(env) and O(chdir) returned it (RV(job_id)).
        Its O(done_file) is written for that job only when the job carries this task's fingerprint.
    type: str
    version_added: 0.1.0
  exclude:
    description:
      - "Nodes the job must not run on (C(--exclude)), such as those a run's node check found
        bad. Not part of the job's identity: the same job placed elsewhere is the same job,
        so a job that already ran is not run again because this list grew."
    type: list
    elements: str
    default: []
    version_added: 0.1.0
  bad_nodes_file:
    description:
      - "The run's record of bad nodes (JSON C({node: {reason, job_id, time}})); the job is
        submitted without them, as with O(exclude)."
      - "With O(wait) or O(state=watched), settle the job when its node check step holds it after
        finding bad nodes (it adds them to this file, then asks Slurm to requeue the job held:
        C(scontrol requeuehold), Reason C(job_requeued_in_held_state)): exclude them
        (C(ExcNodeList)) and release it, started two seconds after its requeue rather than after
        Slurm's requeue delay (about two minutes) where the site lets users move a job's
        StartTime; RV(excluded) says so. When its partition has too few other usable nodes the
        job is cancelled instead and the module fails naming each bad node and its reason. The hang
        watch of the training job holds it the same way, for the node of a hung rank."
      - "A job Slurm requeued otherwise (it lost a node; it requeued itself after a stop notice)
        waits out the same delay (Reason C(BeginTime)): it is started two seconds after its
        requeue too, and RV(excluded) says so."
      - That release reads every node's state (C(scontrol show node)) once. Nothing is changed in
        check mode.
    type: path
    version_added: 0.1.0
  done_file:
    description:
      - File on the target that records the job this task submitted last and, once it completed
        successfully, that it did, as JSON with keys C(fingerprint), C(name), C(job_id),
        C(state), C(exit_code), C(end_time) and C(stdout_path).
      - When it records this task's fingerprint, the task returns RV(done=true) with the
        recorded RV(job_id), RV(state) and RV(exit_code) and asks Slurm nothing (with O(attach),
        one C(squeue) first), however long ago the job ran. A record of another fingerprint means the job has not run; so does
        one that cannot be read, with a warning.
      - Written, atomically and with mode C(0644), when the task submits the job (where its
        directory exists) and whenever it sees that job completed successfully (found completed
        in Slurm, or at the end of O(wait)). Never written in check mode. Writing it alone does
        not count as a change.
      - With it set, a completed job found in Slurm counts as done only when it is the job the
        record names, so removing the file runs the job again.
    type: path
    version_added: 0.1.0
  keep_script:
    description:
      - "Path on the target where the module keeps the text of the job's script, for people to read
        and to submit again by hand: the text it submits, or the script of the job it re-attaches to
        or finds done (the same text, as the script is part of the job's identity), with the job's
        name, O(chdir), O(options) and C(--export) written after its first line as the C(#SBATCH) lines
        that ask for the same, so that C(sbatch FILE) submits the same job (a value with a line break or
        a backslash, which a directive cannot carry, is named in a comment instead)."
      - Written only when the file does not already hold that text with mode C(0755), atomically (a
        temporary file in the same directory, renamed over it; a link there is replaced, not
        followed), with mode C(0755) whatever the umask. Its directory must exist.
      - Writing it counts as a change. Nothing is written in check mode.
    type: path
    version_added: 0.1.0
  event_state_file:
    description:
      - With O(state=watched) and O(event_dirs), where the watch keeps its place in the event files
        between looks (a few KB of JSON, replaced atomically, mode C(0600)), so that each look reads only
        what they got since the last one. Without it, each look reads the last MiB of each file.
      - Written in check mode too (it is the watch's own bookkeeping, not a change).
    type: path
    version_added: 0.2.0
  script_args:
    description:
      - The arguments of the script the watched job trains with (C(pretrain_script_args)). Where O(total_steps) is
        unset and the records do not say, the total steps are the value of the last of the trainers' flags among them
        that set it - C(--max_steps), C(--max-steps), C(--trainer.max_steps), C(--max_iters), C(--train-iters),
        C(--training.steps), C(--num_train_steps), as C(--flag N) or C(--flag=N), a plain positive integer (any
        other value sets none); else a Hugging Face Trainer's C(max_steps) (O(checkpoint_dir)).
      - With O(progress_from_log) or O(event_dirs), where RV(llmtrain.slurm.slurm_job_info#module:progress) has a step
        and no total, RV(llmtrain.slurm.slurm_job_info#module:progress_warnings) holds, by C(total_steps), the line
        that says C(pretrain_progress_total_steps) sets it.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  attach:
    description:
      - With O(state=present), re-attach to an active (pending or running) job of this O(name) of the
        connecting user whatever its fingerprint (one a rerun with other settings would otherwise
        submit beside it), before anything else is decided, O(done_file) included. RV(attached) is
        then true and RV(job_id) that job's; nothing is submitted, and O(keep_script) is written only
        when that job runs this task's script (else it keeps the script that job runs). Of several
        such jobs, the newest.
      - The one way a stage's job is never doubled by a rerun - its name is the run's, its settings may
        change between runs.
    type: bool
    default: false
    version_added: 0.2.0
  watch:
    description:
      - With O(state=present), watch the job the task submitted or found (re-attached to, or completed) as
        O(state=watched) does, for up to O(wait_timeout) seconds, and return what that watch finds beside the
        submission's RV(submitted), RV(attached) and RV(cmd) - not a job whose O(done_file) record alone
        says it completed, nor one check mode did not submit. RV(watched) says whether it did.
      - "With C(until) (its condition on RV(watched), RV(jobs)), one task submits or re-attaches and then
        watches: a retry of the task (action plugin) watches the job its first attempt returned and never
        submits again, even when that job has failed; whether the task changed anything and the
        submission's return values carry over. The callback P(llmtrain.slurm.job_progress#callback)
        prints a progress line per retry."
      - Mutually exclusive with O(wait).
    type: bool
    default: false
    version_added: 0.2.0
  after_ok:
    description:
      - "Jobs (their ids) that must complete successfully before this one may start: it is submitted at once,
        behind them (C(--dependency=afterok:ID:ID)), so that a pipeline waits in the queue once. Slurm holds
        it pending (Reason C(Dependency)) until they complete; when one of them fails, for good (Reason
        C(DependencyNeverSatisfied)). A job Slurm no longer knows (C(squeue), asked once) is left out with a
        warning: Slurm from 23.02 on refuses a dependency on it."
      - "Not part of the job's identity, nor of O(keep_script): the same job behind other jobs is the same
        job. A job re-attached to (O(attach), or the same identity active) that Slurm holds for good
        because a job it waited for failed is put behind these instead (C(scontrol update
        Dependency=)), or behind none when the list is empty: a rerun that submitted the failed job again
        (or found it done) frees it. RV(dependency_updated) says so."
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  after_records:
    description:
      - "O(done_file) records of other jobs (the data job's, say): while a record does not say its job completed
        (a job submitted and not waited for, perhaps by an earlier play), this job waits for that job as for
        those of O(after_ok). A missing or unreadable record, or one naming no Slurm job, adds none."
    type: list
    elements: path
    default: []
    version_added: 0.2.0
  wait:
    description: Wait until the job has left the active states.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait with O(wait) before failing (see O(cancel_on_timeout)).
      - With O(state=watched), seconds to watch before returning, whether the job ended or not.
    type: float
    default: 3600
  cancel_on_timeout:
    description: Cancel the job when O(wait_timeout) passes.
    type: bool
    default: true
  log_tail_lines:
    description: Lines of the job's output to return as RV(log_tail) when it fails.
    type: int
    default: 30
notes:
  - Supports check mode; it reports what would be submitted or cancelled and changes nothing.
  - The job's output is read from the login node, so the output directory must be shared
    with the compute nodes (as Slurm's working directory usually is).
"""

EXAMPLES = r"""
- name: Submit the training job once, from a script on the login node
  llmtrain.slurm.sbatch:
    name: pretrain-tiny
    script: /shared/runs/tiny/scripts/train.sbatch
    chdir: /shared/runs/tiny
    options:
      partition: gpu
      nodes: 3
      ntasks-per-node: 1
      gres: gpu:4
      time: "04:00:00"
      output: logs/%x-%j.out
    env:
      NCCL_SOCKET_IFNAME: ib0
  register: train_job

- name: Run a short job and wait for it (fails with the log tail if it fails)
  llmtrain.slurm.sbatch:
    name: smoke
    content: |
      #!/bin/bash
      srun hostname
    options:
      nodes: 2
    wait: true
    wait_timeout: 120

- name: Submit a rendered script once, keeping its text in the run directory to read and rerun by hand
  llmtrain.slurm.sbatch:
    name: pretrain-tiny
    content: "{{ lookup('ansible.builtin.template', 'train.sbatch.j2') }}"
    chdir: /shared/runs/tiny
    keep_script: /shared/runs/tiny/scripts/train.sbatch

- name: Prepare the dataset once; later runs return at once from the record, Slurm asked nothing
  llmtrain.slurm.sbatch:
    name: prepare-data
    script: /shared/runs/tiny/scripts/prepare.sbatch
    wait: true
    done_file: /shared/runs/tiny/data/.prepared.json
  register: prepare

- name: Prepare it again next time
  ansible.builtin.file:
    path: /shared/runs/tiny/data/.prepared.json
    state: absent
  when: prepare_again | default(false) | bool

- name: Submit the training job, or re-attach to the run's active one, then watch it, a progress line per retry
  llmtrain.slurm.sbatch:
    name: pretrain-tiny
    content: "{{ lookup('ansible.builtin.template', 'train.sbatch.j2') }}"
    chdir: /shared/runs/tiny
    attach: true
    watch: true
    done_file: /shared/runs/tiny/train.done.json
    metrics_file: /shared/runs/tiny/metrics.jsonl
    wait_timeout: 10
  register: train
  # a retry watches the job the first attempt returned; it never submits again
  until: train is failed or not train.watched or not train.jobs[0].active
  retries: 8640
  delay: 0

- name: Cancel it
  llmtrain.slurm.sbatch:
    name: pretrain-tiny
    state: absent
"""

RETURN = r"""
watched:
  description: With O(watch), the task watched the job (RV(jobs) and the rest of a watch's return values are there).
  returned: always
  type: bool
  sample: true
from_record:
  description: The task returned from O(done_file)'s record, asking Slurm nothing about the job.
  returned: with state=present
  type: bool
  sample: false
attached:
  description:
    - The task re-attached to an active job instead of submitting one - of this fingerprint, or with O(attach)
      any of this name (its fingerprint may differ).
  returned: with state=present
  type: bool
  sample: false
job_id:
  description: The job's id; null in check mode when it would be submitted.
  returned: with state=present
  type: str
  sample: "42"
state:
  description: The job's Slurm state (see the notes), as last seen.
  returned: with state=present
  type: str
  sample: RUNNING
exit_code:
  description: The job's exit code, once it is known.
  returned: with state=present
  type: int
  sample: 0
signal:
  description: The signal that ended the job (0 when none).
  returned: with state=present
  type: int
  sample: 0
elapsed:
  description: Seconds the job has run.
  returned: with state=present
  type: int
  sample: 95
nodelist:
  description: Slurm host list of the job's nodes.
  returned: with state=present
  type: str
  sample: slurm-worker-[0-2]
reason:
  description: Slurm's reason for the job's state (why it pends, or why it failed).
  returned: with state=present
  type: str
  sample: Resources
stdout_path:
  description: The job's standard output file.
  returned: with state=present
  type: str
  sample: /shared/runs/tiny/logs/pretrain-tiny-42.out
stderr_path:
  description: The job's standard error file.
  returned: with state=present
  type: str
  sample: /shared/runs/tiny/logs/pretrain-tiny-42.out
fingerprint:
  description: The job's fingerprint, recorded on it as comment C(llmtrain:FINGERPRINT).
  returned: with state=present
  type: str
  sample: 3f1c9a0e5b7d2468
after_ok:
  description: The jobs the job was submitted behind (O(after_ok) and O(after_records), less those Slurm forgot); empty when none was submitted.
  returned: with state=present
  type: list
  elements: str
  sample: ["108"]
  version_added: 0.2.0
dependency_updated:
  description: With O(after_ok), the job re-attached to was held for good by a dependency that failed, and is now behind O(after_ok).
  returned: with state=present
  type: bool
  sample: false
  version_added: 0.2.0
cmd:
  description: The C(sbatch) argument vector, when the job is (or would be) submitted.
  returned: when submitted
  type: list
  elements: str
submitted:
  description: Whether this task submitted the job (or would, in check mode).
  returned: with state=present
  type: bool
script_kept:
  description: O(keep_script), which holds the job's script (in check mode, would hold it).
  returned: with keep_script and state=present
  type: str
  sample: /shared/runs/tiny/scripts/train.sbatch
  version_added: 0.1.0
done:
  description:
    - Whether the job has completed successfully, by O(done_file)'s record or as Slurm reports it.
    - When true from the record alone, fields the record does not keep (RV(signal), RV(elapsed),
      RV(nodelist), RV(reason), RV(stderr_path)) are null.
  returned: with state=present
  type: bool
  version_added: 0.1.0
log_tail:
  description: The last O(log_tail_lines) lines of the job's output (and of its separate error file).
  returned: when the job failed
  type: list
  elements: str
excluded:
  description:
    - With O(bad_nodes_file), what was done for the job when its node check (or hang watch) held it, one entry per
      release; and one for each requeue whose delay was lifted (its C(excluded) empty).
  returned: with wait, state=watched or watch
  type: list
  elements: dict
  sample:
    - job_id: "42"
      restarts: 1
      excluded: [slurm-worker-2]
      bad: {slurm-worker-2: "no network interface ib0 on slurm-worker-2 (it has eth0, lo): ..."}
      message: "job 42: node check excluded slurm-worker-2 (no network interface ib0 ...); requeued without it"
jobs:
  description:
    - With O(state=watched) or O(watch), the job as M(llmtrain.slurm.slurm_job_info) returns it (one item), and beside
      it that module's RV(llmtrain.slurm.slurm_job_info#module:finished),
      RV(llmtrain.slurm.slurm_job_info#module:checks), RV(llmtrain.slurm.slurm_job_info#module:progress),
      RV(llmtrain.slurm.slurm_job_info#module:stragglers), RV(llmtrain.slurm.slurm_job_info#module:unreadable_records),
      RV(llmtrain.slurm.slurm_job_info#module:progress_warnings), RV(llmtrain.slurm.slurm_job_info#module:node_check),
      RV(llmtrain.slurm.slurm_job_info#module:network_check), RV(llmtrain.slurm.slurm_job_info#module:hang),
      RV(llmtrain.slurm.slurm_job_info#module:recovery) and RV(llmtrain.slurm.slurm_job_info#module:log), as
      its options ask for them.
  returned: with state=watched or watch
  type: list
  elements: dict
cancelled:
  description: Ids of the jobs cancelled (or that would be, in check mode).
  returned: with state=absent, and when a timed-out job was cancelled
  type: list
  elements: str
"""

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record, trusted_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import job_watch
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import script_args
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import holds, replace_file
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.exclusion import Settler, read_bad_nodes
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.job_log import output_tail
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import JOB_ID
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import failure_message
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import ControllerUnreachable
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import ACTIVE_STATES, unknown_job
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.waiter import Waiter

# a script people read and run again by hand, as the template module would write it
KEPT_SCRIPT_MODE = 0o755

JOB_FIELDS = ("job_id", "state", "exit_code", "signal", "elapsed", "nodelist", "reason",
              "stdout_path", "stderr_path")


def job_result(job):
    return {k: job.get(k) for k in JOB_FIELDS}


def absent(module, client, p):
    """state=absent: the active jobs of this name (of the connecting user) cancelled."""
    ids = [j["job_id"] for j in client.jobs_of_user() if j["name"] == p["name"] and j["state"] in ACTIVE_STATES]
    if ids and not module.check_mode:
        client.cancel(ids)
    return dict(changed=bool(ids), cancelled=ids)


def job_number(job):
    """The number that orders a user's jobs by submission (an array task's by its array job)."""
    return int(job["job_id"].split("_")[0])


def newest_active(jobs, name):
    """The newest active job of this name among the user's jobs (squeue's), or None."""
    active = [j for j in jobs if j["name"] == name and j["state"] in ACTIVE_STATES]
    return max(active, key=job_number) if active else None


def existing_job(client, name, fp, submitted=None, jobs=None):
    """The job this task would submit, if Slurm still has it active, or completed. submitted:
    with done_file, the id its record holds of the job submitted last; a completed job counts
    only when it is that one, so that removing done_file runs the job again. jobs: the user's
    jobs, when already listed."""
    mine = [j for j in (client.jobs_of_user() if jobs is None else jobs)
            if j["name"] == name and sbatch_argv.fingerprint_of_comment(j["comment"]) == fp]
    mine.sort(key=job_number, reverse=True)
    for job in mine:
        if job["state"] in ACTIVE_STATES:
            return job
    if submitted is False:
        return None
    for job in mine:
        if job["state"] == "COMPLETED" and submitted in (None, job["job_id"]):
            return job
    if "," not in name and "\n" not in name:
        rows = client.sacct("--user=" + client.user(), "--name=" + name, "--starttime=now-30days") or []
        done = [j for j in rows if j["fingerprint"] == fp and j["state"] == "COMPLETED"
                and submitted in (None, j["job_id"])]
        if done:
            return max(done, key=lambda j: int(j["job_id"]))
    return None


def main():
    slurm = SlurmModule(
        dict(
            name=dict(type="str"),
            stage=dict(type="str"),
            facts=dict(type="dict"),
            script=dict(type="path"),
            content=dict(type="str"),
            chdir=dict(type="path"),
            options=dict(type="dict", default={}),
            env=dict(type="dict", default={}),
            state=dict(type="str", default="present", choices=list(STATES)),
            attach=dict(type="bool", default=False),
            watch=dict(type="bool", default=False),
            job_id=dict(type="str"),
            done_file=dict(type="path"),
            exclude=dict(type="list", elements="str", default=[]),
            bad_nodes_file=dict(type="path"),
            keep_script=dict(type="path"),
            wait=dict(type="bool", default=False),
            cancel_on_timeout=dict(type="bool", default=True),
            log_tail_lines=dict(type="int", default=30),
            event_state_file=dict(type="path"),
            script_args=dict(type="list", elements="str", default=[]),
            after_ok=dict(type="list", elements="str", default=[]),
            after_records=dict(type="list", elements="path", default=[]),
            **job_watch.ARGUMENT_SPEC
        ),
        wait=3600,
        mutually_exclusive=[("script", "content"), ("wait", "watch")],
        required_one_of=[("name", "stage")],
        required_if=[("state", "present", ("script", "content"), True), ("state", "watched", ("script", "content"), True),
                     ("state", "watched", ("job_id",))],
        supports_check_mode=True,
    )
    if slurm.module.params["stage"] is not None:
        slurm.module.fail_json(msg="stage=%s is made into a job by the action plugin llmtrain.slurm.sbatch on the controller: "
                                   "run the module through it (the task's action llmtrain.slurm.sbatch)" % slurm.module.params["stage"])
    # each state's body returns the module's result (or fails); Slurm's errors end it in SlurmModule
    slurm.dispatch(dict((state, lambda s, body=body: body(s.module, s.client, s.params)) for state, body in STATES.items()))


def identity(module, p):
    """(content, option argv, export argv, env, fingerprint) of the job the task describes."""
    # an option set to null or false is not given (nor part of the fingerprint): a task may list
    # every option it could set, and one left unset does not make another job of the same one
    options = dict((k.replace("_", "-") if isinstance(k, str) else k, v) for k, v in p["options"].items()
                   if v is not None and v is not False)
    export = options.pop("export", None)
    env = dict((k, "" if v is None else str(v)) for k, v in p["env"].items())
    try:
        option_argv = sbatch_argv.option_argv(options)
        export_argv = sbatch_argv.export_argv(export, env) if env or export is not None else []
    except ValueError as err:
        module.fail_json(msg="invalid options: %s" % err)

    if p["script"] is not None:
        try:
            with open(p["script"], "rb") as handle:
                content = handle.read().decode("utf-8", "surrogateescape")
        except (IOError, OSError) as err:
            module.fail_json(msg="script file %s cannot be read: %s" % (p["script"], err.strerror or err))
    else:
        content = p["content"]
    fields = dict(options, export=export) if export is not None else options
    return content, option_argv, export_argv, env, sbatch_argv.fingerprint(p["name"], content, fields, env, p["chdir"])


def watched(module, client, p):
    """state=watched: the job p["job_id"] watched for up to wait_timeout seconds (until it ends or
    waits for nodes), settled when its node check held it, recorded in done_file once it completed."""
    return watch_job(module, client, p, p["job_id"], identity(module, p)[4], dict(changed=False, submitted=False))


def watch_job(module, client, p, job_id, fp, base):
    """What a watch of job_id for up to wait_timeout seconds finds, on top of base (what the task
    already returns: the submission's result, with present and watch)."""
    patterns = job_watch.patterns_of(module, p)
    waiter = Waiter(p["poll_interval"], p["unreachable_timeout"])
    settler = Settler(client, p["bad_nodes_file"], module.check_mode)
    result = dict(base, fingerprint=fp, watched=True)
    try:
        jobs, ended = waiter.wait(lambda: settler(job_watch.look_up(client, [job_id], None)),
                                  lambda jobs: settler.failure is not None or job_watch.settled(jobs), p["wait_timeout"])
    except ControllerUnreachable as err:
        module.fail_json(msg=str(err), controller_unreachable=True, **dict(result, checks=waiter.checks,
                                                                           excluded=settler.events))
    result.update(changed=bool(base["changed"] or settler.events or settler.cancelled), checks=waiter.checks,
                  excluded=settler.events)
    # the total of your own script's steps, where the inventory gives none, from its arguments
    job_watch.describe(module, dict(p, total_steps=script_args.total_of(p["total_steps"], p["script_args"])), jobs, ended,
                       patterns, result, client)
    script_args.say_unknown_total(p, result)
    job = jobs[-1]
    result.update((key, job[key]) for key in JOB_FIELDS if key in job)
    # the record names this task's job: one that runs another script (re-attached to by name) is not it
    result["done"] = job["state"] == "COMPLETED" and job.get("fingerprint") == fp
    if settler.failure:
        module.fail_json(msg=settler.failure, cancelled=settler.cancelled, bad_nodes=read_bad_nodes(p["bad_nodes_file"]),
                         **result)
    if result["done"] and p["done_file"] and not module.check_mode:
        write_record(module, p["done_file"], dict(job, name=p["name"]), fp, result)
    return result


def present(module, client, p):
    """state=present: the job submitted, or found (re-attached to, done), then with watch, watched as
    state=watched watches it - not one whose record alone says it is done, nor one check mode did not submit."""
    result = submit(module, client, p)
    if p["watch"] and result.get("job_id") and not result["from_record"]:
        result = watch_job(module, client, p, result["job_id"], result["fingerprint"], result)
    return result


def submit(module, client, p):
    """The job submitted, unless done_file records it, or Slurm has it active or completed."""
    content, option_argv, export_argv, env, fp = identity(module, p)
    result = dict(changed=False, fingerprint=fp, submitted=False, cmd=None, done=False, attached=False,
                  from_record=False, watched=False, dependency_updated=False, after_ok=[])
    after_ok = [str(job_id).strip() for job_id in p["after_ok"] if str(job_id).strip()]
    if any(not JOB_ID.match(job_id) for job_id in after_ok):
        module.fail_json(msg="after_ok=%r: each item must be a Slurm job id such as 42" % (p["after_ok"],))
    for path in p["after_records"]:
        job_id = done_record.pending_job(path)
        if job_id and job_id not in after_ok:
            after_ok.append(job_id)

    kept = sbatch_argv.kept_script(content, p["name"], p["chdir"], option_argv + export_argv)
    # an active job of this name, whatever it runs, is the stage's job (attach): never doubled. A
    # controller that does not answer (restarting) is waited for up to unreachable_timeout, as a watch does.
    patient = Waiter(p["poll_interval"], p["unreachable_timeout"])
    jobs = patient.wait(client.jobs_of_user, lambda _jobs: True, 0)[0] if p["attach"] else None
    attached = newest_active(jobs, p["name"]) if p["attach"] else None
    if attached is not None:
        # the kept script is that job's: the same text when it runs this task's, else left as it is
        if p["keep_script"] and sbatch_argv.fingerprint_of_comment(attached["comment"]) == fp:
            keep_script(module, p["keep_script"], kept, result)
        job = patient.wait(lambda: client.show_job(attached["job_id"]), lambda _job: True, 0)[0]
        job = free_of_failed_dependency(module, client, job, after_ok, result, jobs)
        result.update(job_result(job), attached=True)
        return result

    submitted = None
    if p["done_file"]:
        record, unreadable = done_record.read(p["done_file"], fp)
        if unreadable:
            module.warn(unreadable)
        # a record of this job that is not (yet) COMPLETED names the job submitted last
        submitted = record["job_id"] if record and record.get("state") != "COMPLETED" else False
        if record and record.get("state") == "COMPLETED":
            result.update(job_result(unknown_job(record.get("job_id"))), reason=None, done=True, from_record=True,
                          state=record.get("state"), exit_code=record.get("exit_code"),
                          stdout_path=record.get("stdout_path"))
            if p["keep_script"]:
                keep_script(module, p["keep_script"], kept, result)
            return result

    if p["chdir"] and not os.path.isdir(p["chdir"]):
        if not module.check_mode:
            module.fail_json(msg="chdir %s is not a directory" % p["chdir"])
        module.warn("chdir %s does not exist yet (check mode: a task before this one would create it)" % p["chdir"])
    exclude = [node.strip() for item in p["exclude"] for node in str(item).split(",") if node.strip()]
    if any(not sbatch_argv.is_node_name(node) for node in exclude):
        module.fail_json(msg="exclude=%r: each item must be a node name or a Slurm hostlist such as gpu-[01-04]"
                         % (p["exclude"],))
    recorded = sorted(set(read_bad_nodes(p["bad_nodes_file"])) - set(exclude)) if p["bad_nodes_file"] else []
    if any(not sbatch_argv.is_node_name(node) for node in recorded):
        module.fail_json(msg="bad_nodes_file %s names %r, which is no node name: correct or remove that file"
                         % (p["bad_nodes_file"], [n for n in recorded if not sbatch_argv.is_node_name(n)]))
    exclude += recorded
    if after_ok and jobs is None:  # one squeue for the dependencies and the look for this job below
        jobs = client.jobs_of_user()
    after_ok = still_known(module, after_ok, jobs)
    result["after_ok"] = after_ok
    argv = sbatch_argv.submit_argv(client.bin("sbatch"), p["name"], sbatch_argv.identity_comment(fp), p["chdir"],
                                   option_argv + (["--exclude=" + ",".join(exclude)] if exclude else [])
                                   + (["--dependency=afterok:" + ":".join(after_ok)] if after_ok else []),
                                   export_argv, p["script"])

    # written before the job is submitted: a job sbatch rejects can be submitted again by hand
    if p["keep_script"]:
        keep_script(module, p["keep_script"], kept, result)
    found = existing_job(client, p["name"], fp, submitted, jobs)
    if found is not None:
        job = client.show_job(found["job_id"]) if found.get("source") != "sacct" else found
        result["attached"] = found["state"] in ACTIVE_STATES
        if result["attached"]:
            job = free_of_failed_dependency(module, client, job, after_ok, result, jobs)
    elif module.check_mode:
        result.update(job_result(unknown_job("")), job_id=None, state=None, reason=None,
                      changed=True, submitted=True, cmd=argv)
        return result
    else:
        # the job makes its files with the user's umask less group and other write, whatever the
        # login shell's (002 is common): nothing it makes in the run directory is then refused
        umask = trusted_dirs.strict_umask()
        rc, out, err = module.run_command(argv, data=content if p["script"] is None else None, binary_data=True,
                                          environ_update=dict(env, SLURM_UMASK="%04o" % umask))
        if rc != 0:
            module.fail_json(msg="sbatch rejected the job: %s" % (err or out).strip(), rc=rc,
                             stdout=out, stderr=err, cmd=argv, fingerprint=fp)
        try:
            job_id = sbatch_argv.parse_parsable(out)
        except ValueError as error:
            module.fail_json(msg=str(error), cmd=argv, fingerprint=fp)
        result.update(changed=True, submitted=True, cmd=argv)
        job = client.show_job(job_id)
        # the job submitted last, so that it alone counts as done once it completes
        if p["done_file"] and os.path.isdir(os.path.dirname(os.path.abspath(p["done_file"]))):
            write_record(module, p["done_file"], dict(job, name=p["name"]), fp, result)

    if p["wait"] and job["active"]:
        waiter = Waiter(p["poll_interval"], p["unreachable_timeout"])
        settler = Settler(client, p["bad_nodes_file"], module.check_mode)
        job, ended = waiter.wait(lambda: settler([client.show_job(job["job_id"])])[0],
                                 lambda j: settler.failure is not None or not j["active"], p["wait_timeout"])
        result["excluded"] = settler.events
        if settler.failure:
            result.update(job_result(job), cancelled=settler.cancelled)
            module.fail_json(msg=settler.failure, **result)
        if not ended:
            msg = "job %s still %s after %gs (wait_timeout)" % (job["job_id"], job["state"], p["wait_timeout"])
            if p["cancel_on_timeout"]:
                client.cancel([job["job_id"]])
                job = client.show_job(job["job_id"])
                result["cancelled"] = [job["job_id"]]
                msg += "; cancelled it"
            result.update(job_result(job))
            module.fail_json(msg=msg, log_tail=output_tail(job, p["log_tail_lines"]), **result)
    result.update(job_result(job), done=job["state"] == "COMPLETED")
    if p["wait"] and job["state"] == "UNKNOWN":
        module.warn("job %s finished and the controller has forgotten it; its outcome is unknown" % job["job_id"])
    elif p["wait"] and not job["active"] and not job["success"]:
        module.fail_json(msg=failure_message(job), log_tail=output_tail(job, p["log_tail_lines"]), **result)
    if result["done"] and p["done_file"] and not module.check_mode:
        write_record(module, p["done_file"], dict(job, name=p["name"]), fp, result)
    return result


def still_known(module, after_ok, jobs):
    """The jobs of after_ok Slurm still knows (jobs: the user's, as squeue lists them): a job it has
    forgotten (long ended) is no dependency Slurm takes from 23.02 on ("Job dependency problem"), so
    it is left out, with a warning."""
    if not after_ok:
        return []
    known = set(j["job_id"] for j in jobs)
    forgotten = [job_id for job_id in after_ok if job_id not in known]
    if forgotten:
        module.warn("after_ok: Slurm no longer knows job(s) %s (ended long ago): this job does not wait for them"
                    % ", ".join(forgotten))
    return [job_id for job_id in after_ok if job_id in known]


def free_of_failed_dependency(module, client, job, after_ok, result, jobs):
    """The job re-attached to, put behind after_ok (or behind nothing) when Slurm holds it for good
    because a job it waited for failed (DependencyNeverSatisfied); else the job as it is. jobs: the
    user's, as squeue lists them (None only where after_ok is empty)."""
    if job.get("state") != "PENDING" or job.get("reason") != "DependencyNeverSatisfied":
        return job
    after_ok = still_known(module, after_ok, jobs)
    result.update(changed=True, dependency_updated=True, after_ok=after_ok)
    if module.check_mode:
        return job
    client.run([client.bin("scontrol"), "update", "JobId=" + str(job["job_id"]),
                "Dependency=" + ("afterok:" + ":".join(after_ok) if after_ok else "")])
    return client.show_job(job["job_id"])


def keep_script(module, path, content, result):
    """Writes the job's script to path, unless it already holds it; a write is a change."""
    data = content.encode("utf-8", "surrogateescape")
    result["script_kept"] = path
    if holds(path, data, KEPT_SCRIPT_MODE):
        return
    result["changed"] = True
    if module.check_mode:
        return
    try:
        replace_file(path, data, KEPT_SCRIPT_MODE, prefix=".%s." % os.path.basename(path))
    except (IOError, OSError) as err:
        module.fail_json(msg="cannot write keep_script %s: %s" % (path, err.strerror or err), **result)


def write_record(module, path, job, fp, result):
    try:
        done_record.write(path, done_record.of_job(job, fp))
    except (IOError, OSError) as err:
        module.fail_json(msg="cannot write done_file %s: %s" % (path, err), **result)


STATES = {"present": present, "watched": watched, "absent": absent}


if __name__ == "__main__":
    main()
