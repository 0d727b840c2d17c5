#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_job_info
short_description: Report Slurm jobs and a training run's latest metrics
description:
  - Reports jobs by id or by name, the connecting user's jobs, from C(scontrol show job)
    (C(sacct) for jobs the controller has forgotten, where accounting is enabled).
  - With O(metrics_file), also returns the last record of a JSONL metrics file as
    RV(progress), read backwards from the end of the file (its last 16 lines, at most 4 MiB); a
    line there that is no complete JSON object, or is longer than 1 MiB, is counted in
    RV(unreadable_records) and said in a warning.
  - Returns what every poll needs, a few KB whatever the job's size - the node and network
    checks summarised, the expanded host list of a job only once it has ended.
  - Meant to be polled with C(until)/C(retries); the callback C(llmtrain.slurm.job_progress)
    then prints one line of progress per retry.
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
  job_id:
    description: One job id or several.
    type: list
    elements: str
  name:
    description: Job name; every job of this name the controller still knows.
    type: str
  wait_timeout:
    description:
      - Keep checking the jobs, once per O(poll_interval), for up to this many seconds, and return as
        soon as none is active any more. With C(until) and C(delay=0) a watching task then
        notices a job's end within about a second, yet returns (for a progress line) only
        every O(wait_timeout).
      - V(0) checks once.
    type: float
    default: 0
    version_added: 0.1.0
notes:
  - Supports check mode. It only reads, never changes a job; M(llmtrain.slurm.sbatch) with O(llmtrain.slurm.sbatch#module:state=watched)
    watches a job and also settles it when its node check holds it.
"""

EXAMPLES = r"""
- name: Watch the training job until it ends, one progress line per retry
  llmtrain.slurm.slurm_job_info:
    job_id: "{{ train_job.job_id }}"
    metrics_file: /shared/runs/tiny/logs/metrics.jsonl
  register: watch
  until: watch.finished
  retries: 720
  delay: 10

- name: The same, noticing the end within a second while printing a line every 10 s
  llmtrain.slurm.slurm_job_info:
    job_id: "{{ train_job.job_id }}"
    wait_timeout: 10
  register: watch
  until: watch.finished
  retries: 720
  delay: 0

- name: Ride out a controller restart of up to 10 minutes; read the log when the job ends
  llmtrain.slurm.slurm_job_info:
    job_id: "{{ train_job.job_id }}"
    wait_timeout: 10
    unreachable_timeout: 600
    log_lines: 30
  register: watch
  until: watch.finished or watch.jobs[0].waits_for_nodes
  retries: 720
  delay: 0

- name: All jobs called pretrain-tiny
  llmtrain.slurm.slurm_job_info:
    name: pretrain-tiny
"""

RETURN = r"""
jobs:
  description:
    - The jobs, in the order asked for (by name, oldest first).
    - Jobs the controller forgot have RV(jobs[].known=false) and state V(UNKNOWN).
  returned: always
  type: list
  elements: dict
  contains:
    job_id: {description: Job id., type: str, sample: "42"}
    name: {description: Job name., type: str}
    state: {description: Slurm state., type: str, sample: RUNNING}
    active: {description: Whether the state is an active one., type: bool}
    success: {description: Whether the job completed successfully (null while unknown)., type: bool}
    reason: {description: Slurm's reason for the state., type: str, sample: Resources}
    exit_code: {description: Exit code., type: int}
    signal: {description: Signal that ended the job., type: int}
    partition: {description: Partition., type: str}
    nodelist: {description: Slurm host list of its nodes., type: str, sample: "slurm-worker-[0-2]"}
    nodes:
      description:
        - The host list expanded, once the job has ended; empty while it is active (RV(jobs[].nodelist)
          names its nodes then).
      type: list
      elements: str
    submit_time: {description: "Submit time (ISO 8601, the controller's time zone).", type: str}
    start_time: {description: "Start time, once known.", type: str}
    end_time: {description: End time (expected end while running)., type: str}
    elapsed: {description: Seconds run., type: int}
    time_limit: {description: Time limit as Slurm prints it., type: str}
    restarts: {description: Times the job was requeued., type: int}
    num_nodes: {description: Nodes the job has or asks for., type: int}
    waits_for_nodes:
      description:
        - Whether the job is pending for nodes that are down or drained (reason C(ReqNodeNotAvail),
          C(NodeDown), ...), or was requeued (after losing a node, say) and its partition has fewer
          usable nodes than it needs; it starts only once nodes return. The wait ends early for it.
      type: bool
    stdout_path: {description: Standard output file., type: str}
    stderr_path: {description: Standard error file., type: str}
    workdir: {description: Working directory., type: str}
    fingerprint: {description: "Fingerprint recorded by M(llmtrain.slurm.sbatch), if any.", type: str}
    known: {description: Whether Slurm still knows the job., type: bool}
node_check:
  description:
    - The node check's last record (O(node_check_file)) summarised - C(job_id), C(restart), C(time),
      C(file) (the record's path, which holds every node's record and line), C(checked) (nodes),
      C(bad_count), C(bad) (node -> reason, the first 32 by name) and C(table) (aligned lines).
    - C(table) has every node's line for up to 32 nodes; above, its heading, the lines of the nodes
      in C(bad), and a last line that counts the others and names C(file).
    - Null when the file cannot be read (a warning says why).
  returned: when node_check_file exists
  type: dict
  sample:
    job_id: "42"
    restart: 0
    time: "2026-11-30T10:00:00Z"
    file: /shared/runs/tiny/node_check/llmtrain-tiny.json
    checked: 2048
    bad_count: 1
    bad: {gpu-node-0007: "no network interface ib1 on gpu-node-0007 (it has eth0, ib0, lo): ..."}
    table: ["NODE           GPUS(ASKED/STEP/SMI/TORCH/SLURM)  PYTHON/TORCH         CPUS(BOUND/ASKED)  INTERFACES   WORKSPACE  GPU HEALTH  VERDICT",
            "gpu-node-0007  8/8/8/8/8                         3.11.7/2.13.0+cu128  64/64              missing ib1  ok         ok          BAD",
            "(2047 other node(s) passed; every node's line is in /shared/runs/tiny/node_check/llmtrain-tiny.json)"]
network_check:
  description:
    - The network check's last record (O(network_check_file)) summarised - C(job_id), C(restart),
      C(time), C(file) (the record's path, which holds every node's figures and line), C(backend),
      C(ranks), C(verdict) (C(ok), C(slow_nodes) or C(slow_fabric)), C(busbw) (all-reduce bus
      bandwidth, GB/s), C(latency_us), C(limit) (the slowest link, GB/s, null where links report
      no speed), C(fraction), C(min_fraction), C(seconds), C(checked) (nodes), C(slow_count),
      C(slow) (node -> reason, the first 32 by name), C(slow_fabric) (at most 2000 characters)
      and C(table), as RV(node_check)'s.
  returned: when network_check_file exists
  type: dict
hang:
  description:
    - The newest hang the last job's hang watch recorded (O(hang_dir)) - C(job_id), C(restart),
      C(start) (the job's start, from 1), C(time), C(step) (the last metrics record's, or null),
      C(silent_s), C(timeout_s), C(nodes), C(answered) (nodes whose stacks came back), C(ranks),
      C(suspects) (node -> why the hang is there, the first 8 by name), C(suspect_count),
      C(frames) (node -> the first frames of that rank's main thread) and C(dir) (every rank's
      stacks, C(<node>.txt)).
  returned: when hang_dir holds a hang of the job
  type: dict
recovery:
  description:
    - The last job's recoveries (O(starts_file)) - C(job_id), C(start) (its start now, from 1, or the next one
      while it waits requeued), C(nodes) (this start's, null while it waits), C(previous) (C(start) and C(nodes)
      of the start before, or null), C(requeued) (whether it waits requeued now), C(lost) (node -> Slurm's state and
      reason, the previous start's nodes that cannot run a job now, asked only while it waits requeued, the first
      16 by name) and C(lost_count), C(left) (the previous start's nodes that this start lacks, the first 16) and
      C(left_count), C(resumed) (the reference trainer's event of this start - C(event) C(start) or C(resume),
      C(step), C(checkpoint), C(restart_in_job), C(failed_ranks) (C(rank), C(node), C(step), C(error)) and
      C(discarded_records) and C(steps_lost), the steps recorded past its checkpoint, which train again - or null)
      and C(unreadable_starts).
  returned: when starts_file records a start of the last job
  type: dict
checks:
  description: How many times the jobs were looked up (one per O(poll_interval) at most with O(wait_timeout)).
  returned: always
  type: int
  sample: 10
finished:
  description: Whether every job reported has left the active states (false when no job was found).
  returned: always
  type: bool
job_id:
  description: Id of the last job in RV(jobs), for progress lines and simple templates.
  returned: when a job was found
  type: str
state:
  description: State of the last job in RV(jobs).
  returned: when a job was found
  type: str
log:
  description:
    - What the last job's output file says, for a person (only with O(log_lines), once no job
      is active or one waits for nodes). C(tail) has its last O(log_lines) lines, C(errors) its
      first 8 error lines, C(traceback) the Python traceback of the rank that failed first (the
      first one that is not a lost-peer consequence such as C(Connection closed by peer)), with
      C(failed_rank) its rank from torch's C([rankN]:) prefix (null without one). C(lost_peer) is
      true when every traceback is such a consequence (the process that failed first left none,
      being killed, out of memory or on a lost node), and C(traceback) is the first rank's that noticed
      (NCCL's watchdog and remote-process errors count as lost peers). C(node) is the failed rank's node
      where the launcher's failure summary or srun names it (null otherwise), C(tracebacks) counts the
      tracebacks of each kind (C(cause), C(lost_peer)).
    - "A job that was requeued writes its starts into one file; the log is read from the last
      C(llmtrain: job J start N on ...) line the job script prints (C(start), null without one), once,
      in bounded memory, whatever its size."
    - Null when the file cannot be read.
  returned: when log_lines is given and no job is active
  type: dict
  sample:
    path: /shared/runs/tiny/logs/llmtrain-tiny-42.out
    tail: ["srun: error: slurm-worker-1: task 1: Exited with exit code 1"]
    errors: ["[rank3]: RuntimeError: CUDA error: out of memory"]
    failed_rank: "3"
    node: slurm-worker-0
    start: "llmtrain: job 42 start 1 on slurm-worker-[0-1], master slurm-worker-0:29500"
    tracebacks: {cause: 1, lost_peer: 1}
    lost_peer: false
    traceback: ["Traceback (most recent call last):", "  File \"train.py\", line 9, in <module>",
                "RuntimeError: CUDA error: out of memory"]
stragglers:
  description:
    - The nodes slower than the others (O(straggler_threshold), O(straggler_intervals)), slowest
      first - C(node), C(ratio) (its work per step over the median node's, the least of those
      records'), C(work_ms) and C(median_ms) of the last record, C(since_step) and C(step).
  returned: when metrics_file is given
  type: list
  elements: dict
  sample: [{node: slurm-worker-1, ratio: 2.1, work_ms: 412.0, median_ms: 196.0, since_step: 30, step: 40}]
progress:
  description:
    - The metrics of the last loss record of O(metrics_file) (the keys listed there, null when
      absent), C(percent) when step and total_steps are known, and C(event)/C(event_step) of the
      file's last record (such as C(checkpoint), C(preempted) or C(done); null for a loss record).
    - Where the metrics file holds no record, from the newest TensorBoard event file or Lightning
      C(metrics.csv) under O(event_dirs) that holds a loss, else from the job's output with
      O(progress_from_log); C(source) says which (C(metrics), C(events), C(csv) or C(log)).
    - C(total_steps) is O(total_steps) where the records do not say; C(eta_s) of event files comes
      from the times of the last two loss records.
  returned: when metrics_file is given, event_dirs are or progress_from_log is true
  type: dict
  sample:
    {step: 120, total_steps: 1000, loss: 3.21, val_loss: null, lr: 0.0003, tokens_per_s: 5230.0,
     elapsed_s: 61.2, eta_s: 449.0, percent: 12.0, event: null, event_step: null}
progress_from:
  description:
    - With RV(progress) of C(source) C(events) or C(csv), the loss's tag and the file it was read from.
  returned: when progress comes from an event file or metrics.csv
  type: dict
  sample: {tag: train_loss, file: /shared/ws/tiny/src/lightning_logs/version_4242/events.out.tfevents.1765000000.node1.77.0}
unreadable_records:
  description:
    - How many of the last lines of O(metrics_file) hold no complete JSON object or are longer
      than 1 MiB (a half-written last line aside); progress and stragglers come from the others.
  returned: when metrics_file is given
  type: int
  sample: 0
progress_warnings:
  description:
    - For each O(progress_regex) pattern that took more than 0.1 s of CPU time on a line of the
      log (it backtracks) and was skipped on the lines after it, the message that says so, by
      pattern; and, by its path, the message that says how many lines of O(metrics_file) could
      not be read (RV(unreadable_records)) and what to write instead. The callback
      P(llmtrain.slurm.job_progress#callback) prints each once.
    - With M(llmtrain.slurm.sbatch), also, by C(total_steps), the line that says C(pretrain_progress_total_steps) sets
      the total where your script's progress has a step and none (O(llmtrain.slurm.sbatch#module:script_args)).
  returned: >-
    when progress was read from the log and a pattern ran past its time, or lines of metrics_file could not be read;
    with sbatch, when your script's progress has a step and no total
  type: dict
  sample:
    "(?P<loss>(\\d+)+)x": "pretrain_progress_regex '(?P<loss>(\\d+)+)x' took more than 0.1 s of CPU on one log line
      (line 3 from the end): it backtracks; progress from the log skips it. Rewrite it without nested or adjacent
      repeats such as (a+)+ or \\s*:?\\s*"
"""

from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import job_watch
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import ControllerUnreachable
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.waiter import Waiter


def look(slurm):
    """The jobs, looked at until they settle or wait_timeout passes."""
    p = slurm.params
    patterns = job_watch.patterns_of(slurm.module, p)
    waiter = Waiter(interval=p["poll_interval"], unreachable_timeout=p["unreachable_timeout"])
    try:
        jobs, ended = waiter.wait(lambda: job_watch.look_up(slurm.client, p["job_id"], p["name"]), job_watch.settled,
                                  p["wait_timeout"])
    except ControllerUnreachable as err:
        slurm.fail(str(err), controller_unreachable=True, checks=waiter.checks)
    return job_watch.describe(slurm.module, p, jobs, ended, patterns, dict(changed=False, checks=waiter.checks),
                              slurm.client)


def main():
    SlurmModule(
        dict(
            job_id=dict(type="list", elements="str"),
            name=dict(type="str"),
            **job_watch.ARGUMENT_SPEC
        ),
        wait=0,
        required_one_of=[("job_id", "name")],
        mutually_exclusive=[("job_id", "name")],
        supports_check_mode=True,
    ).run(look)


if __name__ == "__main__":
    main()
