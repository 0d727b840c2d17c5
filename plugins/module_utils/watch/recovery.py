# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a look at a training job tells of its recoveries: the start it is at and its nodes, the
nodes its last start had that are lost (Slurm's state and reason), and where the reference
trainer resumed (after a requeue, or after torch.distributed.run restarted its ranks inside the
job, naming the rank that failed).

Its sources: the run's starts.jsonl, one line per start of a job written by the job script
({job_id, start, nodes, left, time}: left, the nodes of the start before that this one lacks),
and the reference trainer's start and resume events (with job_id and start), which it adds
there as it writes them to metrics.jsonl (and the job script's end line of each start, which the
status playbook reads); Slurm's view of the last start's nodes, asked only
while the job waits, requeued. Each file is read from its end, a few records, whatever the
run's length.
"""

from __future__ import annotations

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.metrics import tail_records
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.run_files import END_FIELDS, HOST_LIST, START_FIELDS
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import COUNT, JOB, LIST, TEXT, fields
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import node_state_text, parse_nodes, usable

# starts.jsonl lines read from its end: the starts of the watched job are its last ones
STARTS_READ = 16
# lost nodes named in a result; the others are counted
LOST_NAMED = 16
# The fields of the trainer's events, of the types they must have (the job's start and end lines':
# run_files.py): a line whose job id or start is not of its type is not one of them.
EVENT_FIELDS = dict(event=TEXT, job_id=JOB, start=COUNT, step=COUNT, checkpoint=TEXT, restart_in_job=COUNT,
                    failed_ranks=LIST, discarded_records=COUNT, steps_lost=COUNT)
# a rank named in a restart's event (the trainer names 8 at most)
FAILED_RANK_FIELDS = dict(rank=COUNT, node=TEXT, step=COUNT, error=TEXT)
FAILED_RANKS_NAMED = 8


def end_how(end):
    """How a start ended, in words: its end line's `how`, with the signal that ended a killed one
    (the job script names SIGTERM, SIGINT, SIGHUP, SIGUSR1 it received)."""
    how = end.get("how")
    return "%s by %s" % (how, end["signal"]) if how == "killed" and end.get("signal") else how


def event_fields(record):
    """A trainer's start or resume event, its fields of their types (EVENT_FIELDS), each failed rank's too."""
    typed = fields(record, EVENT_FIELDS)
    if "failed_ranks" in typed:
        typed["failed_ranks"] = [fields(f, FAILED_RANK_FIELDS) for f in typed["failed_ranks"][:FAILED_RANKS_NAMED]
                                 if isinstance(f, dict)]
    return typed


def run_starts(path, count=STARTS_READ):
    """(the job script's start lines among the last `count` lines of path, oldest first, as
    [{job_id, start, nodes, left, time}]; the reference trainer's start and resume events there;
    the job script's end lines, {event: end, job_id, start, how, exit_code, time, signal}, which the status
    playbook reads; how many lines are none of these). Each with the fields of the types its kind
    gives them (START_FIELDS, EVENT_FIELDS, END_FIELDS) only, the job id as text."""
    if not path or not os.path.exists(path):
        return [], [], [], 0
    records, unreadable = tail_records(path, count=count)
    starts, events, ends = [], [], []
    for record in records:
        kind = record.get("event")
        typed = (event_fields(record) if kind in ("start", "resume") else
                 fields(record, END_FIELDS if kind == "end" else START_FIELDS))
        if "job_id" not in typed:
            unreadable += 1
        elif kind in ("start", "resume"):
            events.append(typed)
        elif kind == "end":
            ends.append(typed)
        elif kind is None and "start" in typed and "nodes" in typed:
            starts.append(dict(typed, left=typed.get("left", ""), time=typed.get("time")))
        else:
            unreadable += 1
    return starts, events, ends, unreadable


def unreadable_starts_message(path, unreadable):
    """What a user reads when lines of starts.jsonl's tail could not be read."""
    return ("%s: %d of its last lines are not a start record (a JSON object per line, {job_id, start, nodes, time}, "
            "which the job script adds at each start); the recoveries are told from the others. Nothing else may "
            "write to that file." % (path, unreadable))


def lost_nodes(client, nodelist):
    """{node: its state and Slurm's reason} for the nodes of nodelist that cannot run a job step
    now (scontrol show node of those nodes only); {} when Slurm does not say."""
    if not HOST_LIST.match(nodelist):  # the file is the run's, not Slurm's: no option, no odd name
        return {}
    rc, out, _err = client.run([client.bin("scontrol"), "show", "node", "-o", nodelist], ok_rcs=(0, 1))
    if rc != 0:
        return {}
    return dict((n["name"], node_state_text(n)) for n in parse_nodes(out) if not usable(n))


def resumed_event(records, job_id, start):
    """The reference trainer's newest start or resume event of this job's start among records
    (its fields of the types EVENT_FIELDS gives them), or None (a script of your own writes none)."""
    for record in reversed(records):
        if record.get("event") in ("start", "resume"):
            typed = event_fields(record)
            if typed.get("job_id") == str(job_id) and typed.get("start") == start:
                return typed
    return None


def recovery(client, job, starts_file, records):
    """What the watch says of the job's recoveries, or None before its first start is recorded.

    job: as slurm_parse gives it; records: the tail of metrics.jsonl (the trainer's events are
    looked for there too). Returns dict(job_id,
    start (this start, or the next one while it waits requeued), nodes (this start's, None while
    it waits), previous (dict(job_id, start, nodes, how) of the run's start before this one, or the
    start that ended while it waits requeued: start number `restarts`, told by its own start line
    and end line (how it ended, None without one), whatever the next start has written since Slurm
    was asked; None for the run's first), left (the nodes of previous that this start lacks, a host
    list, or ""), requeued (whether it waits requeued), lost ({node: state and reason}, asked while
    it waits requeued: the nodes of the start that ended that cannot run a job now, at most
    LOST_NAMED) and lost_count, resumed (the trainer's event of this start: event, step, checkpoint,
    restart_in_job, failed_ranks, discarded_records, steps_lost; or None) and unreadable_starts)."""
    starts, events, ends, unreadable = run_starts(starts_file)
    job_id = str(job["job_id"])
    mine = dict((s["start"], i) for i, s in enumerate(starts) if s["job_id"] == job_id)  # the last line of each start
    if not mine:
        return None
    restarts = job.get("restarts") or 0
    requeued = job.get("state") == "PENDING" and restarts > 0
    at = mine.get(restarts + 1) if not requeued else None
    current = starts[at] if at is not None else None
    before = (starts[mine[restarts]] if restarts in mine else None) if requeued else (
        starts[at - 1] if current and at > 0 else None)
    previous = None
    if before:
        end = next((e for e in reversed(ends) if e["job_id"] == before["job_id"] and e.get("start") == before["start"]),
                   None)
        previous = dict(job_id=before["job_id"], start=before["start"], nodes=before["nodes"],
                        how=end.get("how") if end else None)
    result = dict(job_id=job_id, start=restarts + 1, nodes=current["nodes"] if current else None,
                  previous=previous, left=current["left"] if current else "", requeued=requeued, lost={},
                  lost_count=0, resumed=None, unreadable_starts=unreadable)
    if requeued and before:
        lost = lost_nodes(client, before["nodes"])
        result.update(lost=dict(sorted(lost.items())[:LOST_NAMED]), lost_count=len(lost))
    if current:
        event = resumed_event(list(records) + events, job_id, current["start"])
        if event is not None:
            result["resumed"] = dict((key, event.get(key)) for key in (
                "event", "step", "checkpoint", "restart_in_job", "failed_ranks", "discarded_records", "steps_lost"))
    return result
