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
options:
  job_id:
    description: One job id or several.
    type: list
    elements: str
  name:
    description: Job name; every job of this name the controller still knows.
    type: str
  metrics_file:
    description:
      - JSONL file the trainer appends to, one object per line with keys C(step),
        C(total_steps), C(loss), C(val_loss), C(lr), C(tokens_per_s), C(elapsed_s), C(eta_s).
      - A missing file gives RV(progress=null), not an error.
      - A half-written last line (no line break yet) is left for the next poll.
    type: path
  wait_seconds:
    description:
      - Keep checking the jobs, once per second, for up to this many seconds, and return as
        soon as none is active any more. With C(until) and C(delay=0) a watching task then
        notices a job's end within about a second, yet returns (for a progress line) only
        every O(wait_seconds).
      - V(0) checks once.
    type: float
    default: 0
    version_added: 0.1.0
  bad_nodes_file:
    description:
      - "The run's record of bad nodes (JSON C({node: {reason, job_id, time}})), which the
        node check step of a job adds to before it asks Slurm to requeue the job held
        (C(scontrol requeuehold), Reason C(job_requeued_in_held_state))."
      - A job of RV(jobs) held that way has these nodes excluded (C(ExcNodeList)) and is
        released, and started two seconds after its requeue rather than after Slurm's requeue
        delay (about two minutes) where the site lets users move a job's StartTime; RV(excluded)
        says so. When its partition has too few other usable
        nodes the job is cancelled instead and the module fails naming each bad node and its reason.
      - That release reads every node's state (C(scontrol show node)) once; a requeued job that
        waits reads its partition's nodes counted per state (C(sinfo)) once a check.
      - Nothing is changed in check mode.
    type: path
    version_added: 0.1.0
  node_check_file:
    description:
      - The JSON record the node check step writes (C(node_check.json) in the run directory),
        returned summarised as RV(node_check) when it exists.
    type: path
    version_added: 0.1.0
  network_check_file:
    description:
      - The JSON record the network check step of a training job writes (in C(network_check/)
        in the run directory), returned summarised as RV(network_check) when it exists.
    type: path
    version_added: 0.1.0
  progress_from_log:
    description:
      - For a script that writes no O(metrics_file) (or before it writes one), read RV(progress)
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
        CPU time on a line, then is skipped on the lines after it, and RV(progress_warnings) says so.
    type: list
    elements: str
    default: []
    version_added: 0.1.0
  straggler_threshold:
    description:
      - A node whose work per step (the C(node_times) or C(nodes) of the loss records in O(metrics_file)) is more than
        (1 + this) times the median node's in each of the last O(straggler_intervals) records is
        returned in RV(stragglers).
    type: float
    default: 0.2
    version_added: 0.1.0
  straggler_intervals:
    description:
      - How many records in a row a node must be that slow; V(0) looks for no stragglers.
    type: int
    default: 3
    version_added: 0.1.0
  log_lines:
    description:
      - When no job of RV(jobs) is active any more, or one waits for nodes that are out of
        service, read the last job's output file and return RV(log) with this many of its last lines.
      - V(0) reads nothing.
    type: int
    default: 0
    version_added: 0.1.0
notes:
  - Supports check mode (it changes nothing).
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
    wait_seconds: 10
  register: watch
  until: watch.finished
  retries: 720
  delay: 0

- name: Ride out a controller restart of up to 10 minutes; read the log when the job ends
  llmtrain.slurm.slurm_job_info:
    job_id: "{{ train_job.job_id }}"
    wait_seconds: 10
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
excluded:
  description: What was done for jobs their node check held, one entry per release.
  returned: always
  type: list
  elements: dict
  sample:
    - job_id: "42"
      restarts: 1
      excluded: [slurm-worker-2]
      bad: {slurm-worker-2: "no network interface ib0 on slurm-worker-2 (it has eth0, lo): ..."}
      message: "job 42: node check excluded slurm-worker-2 (no network interface ib0 ...); requeued without it"
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
    table: ["NODE           GPUS(ASKED/STEP/SMI/TORCH/SLURM)  PYTHON/TORCH         INTERFACES   WORKSPACE  VERDICT",
            "gpu-node-0007  8/8/8/8/8                         3.11.7/2.13.0+cu128  missing ib1  ok         BAD",
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
checks:
  description: How many times the jobs were looked up (one per second at most with O(wait_seconds)).
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
    - From the job's output instead with O(progress_from_log) when the metrics file holds no
      record; C(source) says which (C(metrics) or C(log)).
  returned: when metrics_file is given or progress_from_log is true
  type: dict
  sample:
    {step: 120, total_steps: 1000, loss: 3.21, val_loss: null, lr: 0.0003, tokens_per_s: 5230.0,
     elapsed_s: 61.2, eta_s: 449.0, percent: 12.0, event: null, event_step: null}
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
  returned: when progress was read from the log and a pattern ran past its time, or lines of metrics_file could not be read
  type: dict
  sample:
    "(?P<loss>(\\d+)+)x": "pretrain_progress_regex '(?P<loss>(\\d+)+)x' took more than 0.1 s of CPU on one log line
      (line 3 from the end): it backtracks; progress from the log skips it. Rewrite it without nested or adjacent
      repeats such as (a+)+ or \\s*:?\\s*"
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.check_summary import network_check_summary, node_check_summary
from ansible_collections.llmtrain.slurm.plugins.module_utils.exclusion import Settler, read_bad_nodes
from ansible_collections.llmtrain.slurm.plugins.module_utils.job_log import log_summary
from ansible_collections.llmtrain.slurm.plugins.module_utils.log_progress import DEFAULT_PATTERNS, compile_patterns, last_record
from ansible_collections.llmtrain.slurm.plugins.module_utils.metrics import progress_of, tail_records, unreadable_message
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm_client import ControllerUnreachable, Slurm, SlurmError
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm_parse import usable_count
from ansible_collections.llmtrain.slurm.plugins.module_utils.stragglers import stragglers
from ansible_collections.llmtrain.slurm.plugins.module_utils.waiter import Waiter


def look_up(client, job_ids, name):
    """The jobs asked for, by id or by name (oldest first)."""
    if name is not None:
        job_ids = [j["job_id"] for j in client.jobs_of_user() if j["name"] == name]
        job_ids.sort(key=lambda i: int(i.split("_")[0]))
    jobs = [client.show_job(i) for i in job_ids]
    # A requeued job (after a lost node, say) that the partition cannot hold any more
    # waits for nodes even while its reason is still Slurm's requeue delay (BeginTime).
    # Asked once a second while it waits: its partition's nodes counted per state, a few
    # lines, not every node of the cluster.
    usable = {}
    for job in jobs:
        if job["state"] == "PENDING" and job["restarts"] and not job["waits_for_nodes"] and job["num_nodes"]:
            if job["partition"] not in usable:
                usable[job["partition"]] = usable_count(client.state_counts(job["partition"]))
            job["waits_for_nodes"] = usable[job["partition"]] < job["num_nodes"]
    return jobs


def without_running_nodes(jobs):
    """The jobs with their expanded host list only once they ended (the collect step and the
    failure message read it): a running job's is RV(jobs[].nodelist), thousands of names
    less in every poll."""
    for job in jobs:
        if job["active"]:
            job["nodes"] = []
    return jobs


def settled(jobs):
    """Nothing more to wait for: every job ended, or one cannot start until nodes return."""
    return not any(j["active"] for j in jobs) or any(j["waits_for_nodes"] for j in jobs)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            job_id=dict(type="list", elements="str"),
            name=dict(type="str"),
            metrics_file=dict(type="path"),
            wait_seconds=dict(type="float", default=0),
            unreachable_timeout=dict(type="float", default=0),
            log_lines=dict(type="int", default=0),
            bad_nodes_file=dict(type="path"),
            node_check_file=dict(type="path"),
            network_check_file=dict(type="path"),
            progress_from_log=dict(type="bool", default=False),
            progress_regex=dict(type="list", elements="str", default=[]),
            straggler_threshold=dict(type="float", default=0.2),
            straggler_intervals=dict(type="int", default=3),
        ),
        required_one_of=[("job_id", "name")],
        mutually_exclusive=[("job_id", "name")],
        supports_check_mode=True,
    )
    p = module.params
    if p["wait_seconds"] < 0:
        module.fail_json(msg="wait_seconds=%s must be 0 (check once) or more" % p["wait_seconds"])
    try:
        patterns = compile_patterns(p["progress_regex"] or DEFAULT_PATTERNS) if p["progress_from_log"] else []
    except ValueError as err:
        module.fail_json(msg=str(err))
    client = Slurm(module)
    waiter = Waiter(interval=1.0, unreachable_timeout=p["unreachable_timeout"])
    settler = Settler(client, p["bad_nodes_file"], module.check_mode)
    try:
        jobs, ended = waiter.wait(lambda: settler(look_up(client, p["job_id"], p["name"])),
                                  lambda jobs: settler.failure is not None or settled(jobs), p["wait_seconds"])
    except ControllerUnreachable as err:
        module.fail_json(msg=str(err), controller_unreachable=True, checks=waiter.checks, excluded=settler.events)
    except SlurmError as err:
        module.fail_json(msg=str(err), excluded=settler.events)
    result = dict(changed=bool(settler.events or settler.cancelled), jobs=without_running_nodes(jobs),
                  finished=bool(jobs) and not any(j["active"] for j in jobs), checks=waiter.checks,
                  excluded=settler.events)
    if jobs:
        result.update(job_id=jobs[-1]["job_id"], state=jobs[-1]["state"])
    if p["log_lines"] > 0 and jobs and ended:
        result["log"] = None
        if jobs[-1]["stdout_path"]:
            try:
                result["log"] = log_summary(jobs[-1]["stdout_path"], tail=p["log_lines"])
            except (IOError, OSError) as err:
                module.warn("cannot read %s: %s" % (jobs[-1]["stdout_path"], err))
    if p["metrics_file"] or patterns:
        records, source, unreadable = [], "metrics", 0
        if p["metrics_file"] and os.path.exists(p["metrics_file"]):
            try:
                records, unreadable = tail_records(p["metrics_file"])
            except (IOError, OSError) as err:
                module.warn("cannot read %s: %s" % (p["metrics_file"], err))
        if unreadable:
            message = unreadable_message(p["metrics_file"], unreadable)
            module.warn(message)
            # Ansible shows a retried task's warnings only at its end: the callback prints this
            # while the watch goes on (once per file)
            result["progress_warnings"] = {p["metrics_file"]: message}
        if not records and patterns and jobs and jobs[-1]["stdout_path"] and os.path.exists(jobs[-1]["stdout_path"]):
            try:
                record, warnings = last_record(jobs[-1]["stdout_path"], patterns)
            except (IOError, OSError) as err:
                module.warn("cannot read %s: %s" % (jobs[-1]["stdout_path"], err))
                record, warnings = None, {}
            if warnings:
                result.setdefault("progress_warnings", {}).update(warnings)
            records, source = ([record], "log") if record else ([], "log")
        result["progress"] = progress_of(records)
        if p["metrics_file"]:
            result["unreadable_records"] = unreadable
            result["stragglers"] = stragglers(records if source == "metrics" else [], p["straggler_threshold"],
                                              p["straggler_intervals"])
        if result["progress"] is not None:
            result["progress"]["source"] = source
    if p["node_check_file"] and os.path.exists(p["node_check_file"]):
        result["node_check"] = read_record(module, p["node_check_file"], node_check_summary)
    if p["network_check_file"] and os.path.exists(p["network_check_file"]):
        result["network_check"] = read_record(module, p["network_check_file"], network_check_summary)
    if settler.failure:
        module.fail_json(msg=settler.failure, cancelled=settler.cancelled,
                         bad_nodes=read_bad_nodes(p["bad_nodes_file"]), **result)
    module.exit_json(**result)


def read_record(module, path, summary):
    """The summary of the JSON record in path, None (with a warning) when it cannot be read."""
    try:
        with open(path) as handle:
            record = json.load(handle)
    except (IOError, OSError, ValueError) as err:
        module.warn("cannot read %s: %s" % (path, err))
        return None
    return summary(record, path) if isinstance(record, dict) else None


if __name__ == "__main__":
    main()
