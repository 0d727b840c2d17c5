# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad nodes out, the job goes on: what the watcher does for a job its node check (or its hang
watch) held, and for a job Slurm requeued.

A job whose node check finds bad nodes asks Slurm to requeue it held
(`scontrol requeuehold`), after adding them to the run's bad-nodes file. Slurm lets only a
pending job's excluded nodes change, so the watcher finishes the move: it excludes the bad
nodes (ExcNodeList), releases the job and lifts Slurm's requeue delay, or cancels the job
when its partition has too few other usable nodes, naming each bad node and its reason. A job
requeued otherwise (a lost node, its own requeue after a stop notice) waits out the same delay:
the watcher lifts it too.
"""

from __future__ import annotations

import datetime
import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.bad_nodes import BAD_NODES_MAX_BYTES
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import read_text
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import usable_nodes

# scontrol's Reason for a job that `scontrol requeuehold` put back in the queue
HELD_AFTER_CHECK = "job_requeued_in_held_state"

# The requeue revoked the job's launch credentials on its nodes, and slurmd refuses a launch
# whose credential is not newer, to the second, than that revocation ("Job credential
# revoked": the job ends FAILED, exit code 1, having run nothing). Slurm keeps a requeued job
# waiting about two minutes for that reason; starting it this many seconds after the requeue
# finished (the SubmitTime Slurm gives the requeued job) is enough.
RELAUNCH_AFTER_S = 2
SCONTROL_TIME = "%Y-%m-%dT%H:%M:%S"

# (BAD_NODES_MAX_BYTES: a record of 2,048 bad nodes is about 300 KB; a larger file is no such record)


def held_after_check(job):
    return job.get("state") == "PENDING" and (job.get("reason") or "").startswith(HELD_AFTER_CHECK)


def load_bad_nodes(path):
    """(the run's bad-nodes record {node: {reason, job_id, time}}, None); ({}, None) when it is
    missing; ({}, a warning that names the file and the fix) when it cannot be used, as it then
    keeps no node off. A link is not followed, and the file is read up to BAD_NODES_MAX_BYTES."""
    text, why = read_text(path, BAD_NODES_MAX_BYTES)
    if text is not None:
        try:
            record = untrusted.loads(text, BAD_NODES_MAX_BYTES)
        except untrusted.Unreadable as err:
            why = "not valid JSON: %s" % err
        else:
            if isinstance(record, dict):
                return record, None
            why = "not a JSON object of nodes"
    if why is None:
        return {}, None
    return {}, ("The run's bad-nodes file %s cannot be used (%s), so it keeps no node off this run. Fix it "
                "(a JSON object {node: {reason, job_id, time}}) or delete it: the run's node checks write it "
                "again when they find a bad node." % (path, why))


def read_bad_nodes(path):
    """{node: reason} from the run's bad-nodes file ({node: {reason, job_id, time}}); {} when
    it is missing or cannot be used (see load_bad_nodes)."""
    return dict((str(node), (entry.get("reason") if isinstance(entry, dict) else str(entry)) or "bad")
                for node, entry in load_bad_nodes(path)[0].items())


def plan(job, bad, nodes):
    """(nodes to exclude, usable nodes left) for a held job; bad: {node: reason}."""
    exclude = sorted(set(job.get("excluded_nodes") or []) | set(bad))
    left = [n["name"] for n in usable_nodes(nodes, job.get("partition")) if n["name"] not in exclude]
    return exclude, left


def too_few_message(job, bad, left, bad_nodes_path):
    lines = ["Job %s (%s) needs %s node(s), and partition %s has %d usable node(s) besides the bad ones%s. "
             "The job is cancelled; nothing of this run is left queued. Bad nodes:"
             % (job["job_id"], job.get("name"), job.get("num_nodes"), job.get("partition"), len(left),
                " (%s)" % ", ".join(left) if left else "")]
    lines += ["  %s: %s" % (node, reason) for node, reason in sorted(bad.items())]
    lines.append("Fix: repair those nodes (or ask the cluster's administrators), then remove them from %s and "
                 "run the playbook again; or lower slurm_nodes, or pick another slurm_partition."
                 % bad_nodes_path)
    return "\n".join(lines)


def relaunch_time(job, now):
    """When the held job may start again: RELAUNCH_AFTER_S past its requeue, as scontrol
    writes times (the local time zone, like `now`), and how long until then; a relative
    time when scontrol's SubmitTime cannot be read."""
    try:
        earliest = datetime.datetime.strptime(job.get("submit_time") or "", SCONTROL_TIME) \
            + datetime.timedelta(seconds=RELAUNCH_AFTER_S)
    except ValueError:
        return "now+%d" % (RELAUNCH_AFTER_S + 1), 0.0
    return earliest.strftime(SCONTROL_TIME), (earliest - now).total_seconds()


def settle(client, job, bad_nodes_path, sleep=time.sleep, now=datetime.datetime.now):
    """For a job held after its node check: exclude and release it -> (event, None), or
    cancel it -> (None, message)."""
    bad = read_bad_nodes(bad_nodes_path)
    exclude, left = plan(job, bad, client.nodes())
    if job.get("num_nodes") and len(left) < job["num_nodes"]:
        client.cancel([job["job_id"]])
        return None, too_few_message(job, bad, left, bad_nodes_path)
    scontrol = client.bin("scontrol")
    client.run([scontrol, "update", "JobId=%s" % job["job_id"], "ExcNodeList=%s" % ",".join(exclude)])
    # Slurm would hold the requeued job about two minutes; a few seconds keep its relaunch
    # safe (RELAUNCH_AFTER_S). Waiting them out here, before the release, lets the release
    # start the job at once; the StartTime keeps it safe where this clock runs ahead of the
    # controller's. Where a site forbids users to move their StartTime, the job starts later.
    start, wait = relaunch_time(job, now())
    if wait > 0:
        sleep(min(wait, RELAUNCH_AFTER_S + 1))
    client.run([scontrol, "update", "JobId=%s" % job["job_id"], "StartTime=%s" % start], ok_rcs=(0, 1))
    client.run([scontrol, "release", job["job_id"]])
    newly = dict((n, bad[n]) for n in exclude if n in bad and n not in (job.get("excluded_nodes") or []))
    return dict(job_id=job["job_id"], restarts=job.get("restarts"), excluded=exclude, bad=newly,
                message="job %s: %s excluded %s; requeued without %s" % (
                    job["job_id"], "hang watch" if newly and all(r.startswith("hang: ") for r in newly.values())
                    else "node check", "; ".join("%s (%s)" % (n, r) for n, r in sorted(newly.items())) or "no new node",
                    "it" if len(newly) == 1 else "them")), None


def requeue_delayed(job, now):
    """A job Slurm requeued (a lost node, the job's own requeue after a stop notice or a hang) that
    waits out Slurm's requeue delay (reason BeginTime, its StartTime later than RELAUNCH_AFTER_S
    past the requeue), not for nodes."""
    if job.get("state") != "PENDING" or not (job.get("reason") or "").startswith("BeginTime") \
            or not job.get("restarts") or job.get("waits_for_nodes"):
        return False
    try:
        begins = datetime.datetime.strptime(job.get("start_time") or "", SCONTROL_TIME)
    except ValueError:
        return False
    start, _wait = relaunch_time(job, now())
    return not start.startswith("now") and begins > datetime.datetime.strptime(start, SCONTROL_TIME)


def lift_delay(client, job, now):
    """Starts a requeued job RELAUNCH_AFTER_S past its requeue instead of Slurm's two minutes."""
    start, _wait = relaunch_time(job, now())
    client.run([client.bin("scontrol"), "update", "JobId=%s" % job["job_id"], "StartTime=%s" % start], ok_rcs=(0, 1))
    return dict(job_id=job["job_id"], restarts=job.get("restarts"), excluded=[], bad={},
                message="job %s: requeued (start %d begins); Slurm's requeue delay lifted, it starts at %s" % (
                    job["job_id"], (job.get("restarts") or 0) + 1, start))


class Settler:
    """Settles the held jobs among those a watcher sees; keeps what it did."""

    def __init__(self, client, bad_nodes_path, check_mode=False, now=datetime.datetime.now):
        self.client, self.path, self.check_mode, self.now = client, bad_nodes_path, check_mode, now
        self.events, self.failure, self.cancelled = [], None, []

    def __call__(self, jobs):
        if not self.path or self.check_mode:
            return jobs
        out = []
        for job in jobs:
            if held_after_check(job):
                event, message = settle(self.client, job, self.path)
                if message:
                    self.failure = self.failure or message
                    self.cancelled.append(job["job_id"])
                else:
                    self.events.append(event)
                job = self.client.show_job(job["job_id"])
            elif requeue_delayed(job, self.now):
                self.events.append(lift_delay(self.client, job, self.now))
                job = self.client.show_job(job["job_id"])
            out.append(job)
        return out
