#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_status
short_description: The state of every training run in a workspace, and one run in detail
description:
  - Lists the runs of O(workspace) that the connecting user owns - each directory there that holds
    what the pretrain stage leaves (C(scripts/pretrain.sbatch), C(train.done.json) or C(starts.jsonl)) -
    with each run's state, its last job, nodes, step and total, loss, tokens/s, ETA, last event and bad nodes.
  - "What it reads: one C(squeue) query for the user's jobs (any state the controller still knows), one C(sacct)
    query for the hours of every run's jobs where the cluster keeps accounting, and,
    per run, files of a bounded size: the done record, the tails of C(starts.jsonl) and C(metrics.jsonl)
    (or of the newest TensorBoard event files or the job's log, for a script of your own that writes no metrics file), C(bad_nodes.json), the
    names in C(checkpoints/). It allocates nothing and changes nothing."
  - "The states: V(queued) (pending, with Slurm's reason), V(requeued) (pending again after it started),
    V(running), V(stopping) (running, asked to stop by C(playbooks/stop.yml)), V(finished), V(failed),
    V(stopped), V(not submitted) (the stages before pretrain ran only), V(untrusted) (a run directory, or one of
    its C(logs/), C(checkpoints/), C(hangs/), that others may write to, or any run of a workspace that every
    other stage refuses because someone else can replace a directory on the way to it: its files are not read),
    V(unreadable) (its files could not be read; the row says why, and the other runs are told as usual)."
  - "What the run's files hold is untrusted: JSON is read bounded in size and depth, each field of its type
    (a job id of digits, else it names no job), and the table and detail hold no control characters."
  - "How a job ended comes from its own end line in C(starts.jsonl) (the job script writes it: finished,
    failed, requeued, stopped, hang, preempted or killed, with the exit code), or from the done record,
    so that it is known after Slurm has forgotten the job; Slurm's state where the job left no line."
  - With O(run), that run in detail (RV(detail)); with O(log_lines), also the last lines of its job's log
    (of a queued or running job, read from the file's end, at most 1 MiB) and, when it failed, the traceback
    of the rank that failed first (the log read from the line its last start began with).
version_added: 0.2.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
options:
  workspace:
    description: The shared directory whose runs are listed (C(slurm_workspace)).
    type: path
    required: true
  run:
    description: The name of one run (a directory of O(workspace)) to tell in detail.
    type: str
  log_lines:
    description: With O(run), the last lines of its job's log to return (V(0) for none).
    type: int
    default: 0
  job_prefix:
    description: The runs' job names are this prefix and the run name.
    type: str
    default: llmtrain-
  job_log:
    description: The job's log, relative to the run directory, as its C(--output) names it (V(%x) the job name, V(%j) its id).
    type: str
    default: logs/%x-%j.out
  progress_regex:
    description:
      - Patterns of progress lines (named groups C(loss), C(step), optionally C(total_steps), ...) for runs that
        write no C(metrics.jsonl); V([]) recognises the known trainers' lines (C(pretrain_progress_regex)).
    type: list
    elements: str
    default: []
  progress_tag:
    description:
      - For runs that write no C(metrics.jsonl), the tag of the loss in the TensorBoard event files or
        the column of Lightning's C(metrics.csv) found in the run directory (the end of its newest files
        is read, 64 KiB of each); unset, the first of the known loss tags (C(pretrain_progress_tag)).
        Read before the log lines.
    type: str
    version_added: 0.2.0
  sweep:
    description:
      - The name of one sweep (playbooks/sweep.yml) to show member by member (RV(sweep)).
    type: str
    version_added: 0.3.0
notes:
  - Supports check mode (it only reads).
  - "A sweep is one row (V(sweep) its state, its members counted by state in C(why), the lowest loss so far and its
    member); its members, runs of their own, are not rows of their own. O(sweep) lists them."
"""

EXAMPLES = r"""
- name: Every run of the workspace, and run tiny in detail with the last 40 lines of its log
  llmtrain.slurm.run_status:
    workspace: /shared/llmtrain
    run: tiny
    log_lines: 40
  register: status

- name: Show them
  ansible.builtin.debug:
    msg: "{{ status.table + [''] + status.detail }}"
"""

RETURN = r"""
sweep:
  description: With O(sweep), its C(name), its C(members) (each C(member), C(state), C(job_id), C(step), C(loss)) and
    the lines of their C(table).
  returned: with O(sweep)
  type: dict
runs:
  description: A row per run, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    run:
      description: The run's name.
      type: str
    state:
      description: >-
        V(queued), V(requeued), V(running), V(stopping), V(finished), V(failed), V(stopped), V(not submitted),
        V(untrusted), V(unreadable), or V(sweep) for a sweep.
      type: str
    why:
      description:
        - Slurm's reason while it waits; how the last job ended when it failed.
        - "For a job queued behind others (a run submitted with C(pretrain_watch=false)): C(waiting for the data job 108),
          or C(data job 108 failed: never starts)."
      type: str
    samples_done:
      description: The run's samples job completed (its C(generate.done.json) says so), so its samples are in the run directory.
      type: bool
      version_added: 0.2.0
    waits_for:
      description:
        - "The jobs the training job waits for (its C(--dependency)): each one's C(job_id), C(kind) (C(data job), C(venv job),
          C(samples job), C(training job) or C(job)), C(name), C(state) as Slurm's queue knows it (null once Slurm forgot it),
          and C(failed) (so the training job never starts); the detail adds the end of a failed one's log."
      type: list
      elements: dict
      version_added: 0.2.0
    job_id:
      description: The run's last job.
      type: str
    nodes:
      description: The job's nodes (Slurm's host list), those of its last start once it ended.
      type: str
    step:
      description: The last step recorded (the last metrics record's, or your script's last progress line's).
      type: int
    total_steps:
      description: The run's total steps, where its records say.
      type: int
    loss:
      description: The last loss recorded.
      type: float
    tokens_per_s:
      description: The last throughput recorded.
      type: float
    eta_s:
      description: Seconds to the end, as the last record estimates it, while the job runs.
      type: float
    checkpoint:
      description: The newest checkpoint's name in C(checkpoints/) (C(step_NNNNNN.pt), C(step_NNNNNN/), C(checkpoint-N/)).
      type: str
    checkpoint_step:
      description: Its step.
      type: int
    last_event:
      description: What the run did last, in a few words.
      type: str
    bad_nodes:
      description: The nodes its checks recorded bad (C(bad_nodes.json)).
      type: list
      elements: str
    stdout_path:
      description: The last job's log.
      type: str
    usage:
      description:
        - "What the run's training job used: C(gpu_hours), C(node_hours), C(cpu_hours) (null where unknown),
          C(starts), C(wall_s) (from its first start, where the run's lines say) and C(source): V(sacct) (Slurm's accounting: each start's
          allocated TRES x its elapsed time, one C(sacct) call for every run's jobs), else V(usage.json) (the run's
          start and end lines, and the running start to now). Null before a start."
      type: dict
    others:
      description:
        - "With accounting, what the run's data and samples jobs used: C(kind), C(job_id), C(starts),
          C(gpu_hours), C(node_hours), C(cpu_hours) of each (sacct)."
      type: list
      elements: dict
table:
  description: The lines of a table of RV(runs), for a person.
  returned: always
  type: list
  elements: str
run:
  description: The row of O(run), or null when the workspace holds no such run of this user.
  returned: when O(run) is given
  type: dict
detail:
  description: The lines that tell O(run) in detail (with O(log_lines), the log's tail and the failing rank's traceback).
  returned: when O(run) is given
  type: list
  elements: str
job:
  description:
    - The last job of O(run) as M(llmtrain.slurm.slurm_job_info) returns a job; where Slurm has forgotten it, what
      the run directory tells of it (its state from its end line or done record, its log).
  returned: when O(run) is given and it has a job
  type: dict
"""

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_status
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.job_log import log_summary, tail_lines
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.log_progress import DEFAULT_PATTERNS, compile_patterns
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import state as sweep_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.sweep import RECORD as SWEEP_RECORD


def status(slurm):
    """Every run of the workspace (one queue query), and the detail of one."""
    module, p, client = slurm.module, slurm.params, slurm.client
    if not os.path.isdir(p["workspace"]):
        module.fail_json(msg="workspace %s is not a directory: set slurm_workspace to the run's shared directory" % p["workspace"])
    patterns = compile_patterns(p["progress_regex"] or DEFAULT_PATTERNS)  # a bad pattern: ValueError, said
    jobs = dict((j["job_id"], j) for j in client.queue())
    queue = [j for j in jobs.values() if j["name"].startswith(p["job_prefix"])]
    uid = os.getuid()
    distrust = run_status.workspace_problem(p["workspace"], uid)
    # a sweep is one row: its members (runs of their own) are counted there, not listed. The runs and
    # the sweeps from one listing of the workspace
    run_names, sweep_names = run_status.workspace_dirs(p["workspace"], uid)
    sweeps = dict((name, sweep_state.read_record(os.path.join(p["workspace"], name, SWEEP_RECORD)))
                  for name in sweep_names) if not distrust else {}
    in_sweeps = set(member for arrays in sweeps.values() for entry in arrays for member in entry["tasks"].values())
    names = [name for name in run_names if name not in in_sweeps]
    rows = []
    for name in names:
        try:
            rows.append(run_status.run_row(p["workspace"], name, [j for j in queue if j["name"] == p["job_prefix"] + name],
                                           p["job_prefix"], p["job_log"], patterns, uid, distrust,
                                           p["progress_tag"], jobs))
        except Exception as err:  # pylint: disable=broad-exception-caught  # one run's files never end the table
            rows.append(dict(run_status.empty_row(p["workspace"], name), state="unreadable",
                             why="its files could not be read (%s: %s)" % (type(err).__name__, err)))
    run_status.add_ledgers(rows, client.sacct_usage)  # one sacct call for every run's jobs, none without accounting
    result = dict(changed=False)
    if p["sweep"] is not None:
        result["sweep"] = dict(name=p["sweep"], members=[], table=["No sweep %s of this user in %s: the table lists those there."
                                                                   % (p["sweep"], p["workspace"])])
    for name, arrays in sorted(sweeps.items()):
        row, members = run_status.sweep_row(p["workspace"], name, arrays, list(jobs.values()), uid, distrust)
        rows.append(row)
        if name == p["sweep"]:
            result["sweep"] = dict(name=name, members=members, table=run_status.sweep_table(members))
    rows.sort(key=lambda row: row["run"])
    result.update(runs=rows, table=run_status.table(rows))
    if p["run"] is not None:
        row = next((r for r in rows if r["run"] == p["run"]), None)
        result.update(run=row, detail=["No run %s of this user in %s: the table lists those there." % (p["run"], p["workspace"])])
        if row is not None:
            log = None
            if p["log_lines"] > 0 and row["stdout_path"] and os.path.isfile(row["stdout_path"]):
                try:
                    # an active job's log is read from its end only (a week's log is large); an ended
                    # one's from its last start, for the traceback of the rank that failed first
                    log = (dict(path=row["stdout_path"], tail=tail_lines(row["stdout_path"], p["log_lines"]))
                           if row["state"] in run_status.ACTIVE_RUN_STATES else log_summary(row["stdout_path"], tail=p["log_lines"]))
                except (IOError, OSError) as err:
                    module.warn("cannot read %s: %s" % (row["stdout_path"], err))
            row["evaluation"] = run_status.newest_evaluation(row["run_dir"])
            result["detail"] = run_status.detail(row, log, failed_logs(module, client, row, p["log_lines"]))
            if row["job_id"]:
                slurm.result = result  # Slurm's error now fails with the table
                result["job"] = run_status.job_of(client.show_job(row["job_id"]), row)
    return result


def failed_logs(module, client, row, log_lines):
    """The last log_lines lines of the log of each job the run's training job waits for that failed
    (its data job, say): [{kind, path, tail}] - one scontrol (or sacct) question a failed job."""
    logs = []
    for wait in row.get("waits_for") or []:
        if not wait["failed"] or log_lines <= 0:
            continue
        path = client.show_job(wait["job_id"]).get("stdout_path")
        if not path or not os.path.isfile(path):
            continue
        try:
            logs.append(dict(kind=wait["kind"], path=path, tail=tail_lines(path, log_lines)))
        except (IOError, OSError) as err:
            module.warn("cannot read %s: %s" % (path, err))
    return logs


def main():
    SlurmModule(
        dict(
            workspace=dict(type="path", required=True),
            run=dict(type="str"),
            log_lines=dict(type="int", default=0),
            job_prefix=dict(type="str", default="llmtrain-"),
            job_log=dict(type="str", default="logs/%x-%j.out"),
            progress_regex=dict(type="list", elements="str", default=[]),
            progress_tag=dict(type="str"),
            sweep=dict(type="str"),
        ),
        errors=(ValueError,),
        supports_check_mode=True,
    ).run(status)


if __name__ == "__main__":
    main()
