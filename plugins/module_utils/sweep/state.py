# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a sweep's members stand, from its record (sweep.json in the sweep's run directory: every
array submitted and the member each of its tasks trains), the members' done records and the user's
queue: done, running, pending, stopped (playbooks/stop.yml), failed (submitted, no longer queued, not
completed) or new. The sweep
module and the status read it so. The record is the workspace's: read bounded, and only a Slurm job
id and a member's name (a run name) taken from it."""

from __future__ import annotations

import os
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.sweep import MEMBER_NAME, RECORD
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import owned_dirs, read_text
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import ACTIVE_STATES

# the record grows by a line per member per submission: read up to this
RECORD_MAX_BYTES = 16 * 1024 * 1024
# an array task as squeue names it: 340_1, or pending tasks not yet apart 340_[2-5,7%2]
TASK = re.compile(r"^([0-9]+)_([0-9]+)$")
TASKS = re.compile(r"^([0-9]+)_\[([0-9,\-]+)(?:%[0-9]+)?\]$")


def tasks_of(job_id):
    """(array job id, [indices]) of an squeue job id of an array, else (None, [])."""
    one = TASK.match(job_id or "")
    if one:
        return one.group(1), [int(one.group(2))]
    many = TASKS.match(job_id or "")
    if not many:
        return None, []
    out = []
    for part in many.group(2).split(","):
        low, _dash, high = part.partition("-")
        if low:
            out += list(range(int(low), int(high or low) + 1))
    return many.group(1), out


def read_record(path):
    """The arrays of a sweep's record: [{job_id, tasks: {index: member}, ...}], each a Slurm job id's,
    its tasks those whose index is a number and whose member is a run name; [] where there is none."""
    text, _why = read_text(path, RECORD_MAX_BYTES)
    record = untrusted.record(text, RECORD_MAX_BYTES) if text is not None else None
    arrays = (record or {}).get("arrays")
    out = []
    for entry in arrays if isinstance(arrays, list) else []:
        if not isinstance(entry, dict) or not untrusted.digits(entry.get("job_id")) or not isinstance(entry.get("tasks"), dict):
            continue
        tasks = dict((index, name) for index, name in entry["tasks"].items()
                     if untrusted.digits(index) and isinstance(name, str) and MEMBER_NAME.fullmatch(name))
        out.append(dict(entry, tasks=tasks))
    return out


def tasks_of_member(arrays):
    """{member name: [(array job id, index)]}: the tasks that ran or run it, oldest first."""
    out = {}
    for entry in arrays:
        for index, name in sorted(entry["tasks"].items(), key=lambda item: int(item[0])):
            out.setdefault(name, []).append((entry["job_id"], str(index)))
    return out


def active_tasks(jobs, arrays):
    """{member name: ('running' or 'pending', '<array>_<index>')} of the members the queue (jobs: the
    user's, as squeue lists them) has active."""
    by_task = dict(((a["job_id"], str(index)), name) for a in arrays for index, name in a["tasks"].items())
    active = {}
    for job in jobs:
        array, indices = tasks_of(job["job_id"])
        if array is None or job["state"] not in ACTIVE_STATES:
            continue
        for index in indices:
            name = by_task.get((array, str(index)))
            if name:
                active[name] = ("running" if job["state"] != "PENDING" else "pending", "%s_%d" % (array, index))
    return active


def sweeps(workspace, uid):
    """{sweep name: its arrays} of the workspace's sweeps that uid owns (a directory with a record)."""
    return dict((name, read_record(os.path.join(workspace, name, RECORD))) for name in owned_dirs(workspace, uid, (RECORD,)))


def member_state(name, done_file, active, last_task):
    """(state, job id) of one member: its done record, else the queue, else stopped (its STOP, beside
    its done record, names its last task: playbooks/stop.yml), failed (submitted) or new (never).
    last_task: the member's last task, '<array>_<index>', or None."""
    record = done_record.job_of(done_file)
    if record.get("state") == "COMPLETED":
        return "done", record.get("job_id")
    if name in active:
        return active[name]
    if last_task is None:
        return "new", None
    stop, _why = read_text(os.path.join(os.path.dirname(done_file), run_files.STOP), 64)
    return ("stopped" if (stop or "").split("\n")[0] == last_task else "failed"), None


def last_tasks(arrays):
    """{member name: its last task, '<array>_<index>'}."""
    return dict((name, "%s_%s" % tasks[-1]) for name, tasks in tasks_of_member(arrays).items())
