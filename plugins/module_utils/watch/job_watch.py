# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Watching jobs: what one look at them returns, for M(llmtrain.slurm.slurm_job_info), which only
reads, and for M(llmtrain.slurm.sbatch) with state=watched, which also settles a held job and
records one that finished. A few KB per look, whatever the job's size."""

from __future__ import annotations

import json
import os
import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.check_summary import network_check_summary, node_check_summary
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.job_log import log_summary
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.log_progress import DEFAULT_PATTERNS, compile_patterns, last_record
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import read_text
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.metrics import progress_of, tail_records, unreadable_message
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import atomic, event_files, run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.hang import SHOWN_NODES
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.recovery import recovery, unreadable_starts_message
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import SlurmError
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import usable_count
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.stragglers import stragglers

# the options of what a look returns besides the jobs (doc fragment llmtrain.slurm.slurm.watch)
ARGUMENT_SPEC = dict(
    metrics_file=dict(type="path"),
    log_lines=dict(type="int", default=0),
    node_check_file=dict(type="path"),
    network_check_file=dict(type="path"),
    progress_from_log=dict(type="bool", default=False),
    progress_regex=dict(type="list", elements="str", default=[]),
    event_dirs=dict(type="list", elements="path", default=[]),
    progress_tag=dict(type="str"),
    total_steps=dict(type="int"),
    checkpoint_dir=dict(type="path"),
    hang_dir=dict(type="path"),
    starts_file=dict(type="path"),
    straggler_threshold=dict(type="float", default=0.2),
    straggler_intervals=dict(type="int", default=3),
)


def patterns_of(module, p):
    """The compiled progress patterns (none unless progress_from_log); a bad one fails the task."""
    try:
        return compile_patterns(p["progress_regex"] or DEFAULT_PATTERNS) if p["progress_from_log"] else []
    except ValueError as err:
        module.fail_json(msg=str(err))


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


def describe(module, p, jobs, ended, patterns, result, client=None):
    """Adds to result what a look at the jobs returns besides them: the log once they ended, the
    progress, stragglers, the recoveries of the newest job (with client: Slurm's state of the nodes
    it lost) and the node and network checks' records summarised."""
    records = []
    result.update(jobs=without_running_nodes(jobs), finished=bool(jobs) and not any(j["active"] for j in jobs))
    if jobs:
        result.update(job_id=jobs[-1]["job_id"], state=jobs[-1]["state"])
    if p["log_lines"] > 0 and jobs and ended:
        result["log"] = None
        if jobs[-1]["stdout_path"]:
            try:
                result["log"] = log_summary(jobs[-1]["stdout_path"], tail=p["log_lines"])
            except (IOError, OSError) as err:
                module.warn("cannot read %s: %s" % (jobs[-1]["stdout_path"], err))
    if p["metrics_file"] or patterns or p["event_dirs"]:
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
        if not records and p["event_dirs"]:
            record, warnings = events_progress(p, started(jobs[-1]) if jobs else None)
            for message in warnings:
                module.warn(message)
                result.setdefault("progress_warnings", {})[message.split(":", 1)[0]] = message
            if record is not None:
                records, source = [record], record.pop("source")
                result["progress_from"] = dict(tag=record.pop("tag"), file=record.pop("file"))
        if not records and patterns and jobs and jobs[-1]["stdout_path"] and os.path.exists(jobs[-1]["stdout_path"]):
            try:
                record, warnings = last_record(jobs[-1]["stdout_path"], patterns, trainer_state_of(module, p))
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
            total = p["total_steps"]
            if total is None and source in ("events", "csv"):
                # a Hugging Face Trainer's max_steps, from its newest checkpoint (not one of an earlier, shorter run)
                state = trainer_state_of(module, p)
                total = state["max_steps"] if state and (state.get("max_steps") or 0) >= records[0]["step"] else None
            if result["progress"]["total_steps"] is None and total and result["progress"]["step"] is not None:
                result["progress"].update(total_steps=total,
                                          percent=round(100.0 * result["progress"]["step"] / total, 1))
    if p["starts_file"] and jobs:
        try:
            found = recovery(client, jobs[-1], p["starts_file"], records)
        except (IOError, OSError, SlurmError) as err:
            module.warn("cannot tell the recoveries of job %s: %s" % (jobs[-1]["job_id"], err))
            found = None
        if found is not None:
            result["recovery"] = found
            if found["unreadable_starts"]:
                message = unreadable_starts_message(p["starts_file"], found["unreadable_starts"])
                module.warn(message)
                result.setdefault("progress_warnings", {})[p["starts_file"]] = message
    if p["hang_dir"] and jobs:
        hang = newest_hang(p["hang_dir"], jobs[-1]["job_id"])
        if hang is not None:
            result["hang"] = hang
    if p["node_check_file"] and os.path.exists(p["node_check_file"]):
        result["node_check"] = read_record(module, p["node_check_file"], node_check_summary)
    if p["network_check_file"] and os.path.exists(p["network_check_file"]):
        result["network_check"] = read_record(module, p["network_check_file"], network_check_summary)
    return result


# the reader's place in the event files, kept between looks: a few KB
EVENT_STATE_MAX_BYTES = 262144


def started(job):
    """The time the job (its current start) began, in seconds since the epoch, or None."""
    try:
        return time.mktime(time.strptime(job.get("start_time") or "", "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def events_progress(p, since=None):
    """(a metrics record of the newest TensorBoard event file or Lightning metrics.csv under
    p["event_dirs"] that holds a loss, with its source, tag and file; or None, and warnings). With
    p["event_state_file"] a look reads only what the files got since the last (event_files.poll);
    without, the last MiB of each. since: the job's start; a file older is not its progress."""
    state_file = p.get("event_state_file")
    state = {}
    if state_file:
        text, _why = read_text(state_file, EVENT_STATE_MAX_BYTES)
        try:
            state = untrusted.loads(text, EVENT_STATE_MAX_BYTES) if text else {}
        except untrusted.Unreadable:
            state = {}
    progress, state, warnings = event_files.poll(p["event_dirs"], state, p["progress_tag"], since=since)
    if state_file:
        try:
            atomic.replace_file(state_file, json.dumps(state).encode(), mode=0o600)
        except (IOError, OSError):
            pass  # the next look reads the files' ends again
    if progress is None:
        seen = event_files.tags_seen(state)
        if seen:
            warnings.append("%s: the event files found there hold the scalars %s, none of which is a loss tag known "
                            "here: set pretrain_progress_tag to the tag of your loss"
                            % (", ".join(p["event_dirs"]), ", ".join(repr(t) for t in seen[:12])))
        return None, warnings
    eta = None
    if p["total_steps"] and progress.get("seconds_per_step"):
        eta = max(p["total_steps"] - progress["step"], 0) * progress["seconds_per_step"]
    record = dict((k, progress[k]) for k in event_files.PROGRESS_FIELDS + ("source", "tag", "file"))
    record["eta_s"] = eta
    return record, warnings


def trainer_state_of(module, p):
    """The Hugging Face Trainer's state saved with its newest checkpoint-N/ in checkpoint_dir
    (its first and last bytes: trainer_state.read), or None: the steps its log lines print not."""
    if not p["checkpoint_dir"]:
        return None
    state, errors = trainer_state.read_newest(p["checkpoint_dir"])
    if state is None:
        for error in errors:
            module.warn(error)
    return state


# a hang's summary names at most this many nodes (each with its first frames); the others are counted
HANG_NODES_SHOWN = SHOWN_NODES
# a frame of a hang's summary is one line of py-spy's, cut to this length
FRAME_CHARS = 300
# the fields of a hang's summary (node/hang.py's summarize) that are shown, of their types
HANG_FIELDS = dict(job_id=untrusted.JOB, restart=untrusted.COUNT, time=untrusted.TEXT, silent_s=untrusted.NUMBER,
                   timeout_s=untrusted.NUMBER, step=untrusted.COUNT, nodes=untrusted.COUNT, answered=untrusted.COUNT,
                   ranks=untrusted.COUNT, dir=untrusted.TEXT)
# a node check's or network check's record holds a line and a record per node: megabytes at thousands
CHECK_RECORD_MAX_BYTES = 64 * 1048576


def newest_hang(hang_dir, job_id):
    """The summary of the job's newest hang (hang_dir/<job>-<start>/summary.json, the hang watch's
    record): its fields of the types HANG_FIELDS gives them, suspects {node: reason} and their
    frames {node: [line]} cut to HANG_NODES_SHOWN nodes, suspect_count and start; or None."""
    try:
        names = os.listdir(hang_dir)
    except OSError:
        return None
    starts = []
    for name in names:
        job, _dash, start = name.rpartition("-")
        if job == str(job_id) and untrusted.digits(start):
            starts.append(int(start))
    for start in sorted(starts, reverse=True):
        path = os.path.join(hang_dir, "%s-%d" % (job_id, start), run_files.HANG_SUMMARY)
        text, _why = read_text(path, untrusted.HANG_SUMMARY_MAX_BYTES)
        record = untrusted.record(text, untrusted.HANG_SUMMARY_MAX_BYTES) if text is not None else None
        if isinstance(record, dict) and isinstance(record.get("suspects"), dict):
            suspects = sorted(record["suspects"].items())[:HANG_NODES_SHOWN]
            frames = record.get("frames") if isinstance(record.get("frames"), dict) else {}
            found = untrusted.fields(record, HANG_FIELDS)
            found.update(suspects=dict((node, str(why)) for node, why in suspects),
                         suspect_count=len(record["suspects"]), start=start,
                         frames=dict((node, [str(f)[:FRAME_CHARS] for f in frames[node]]) for node, _why in suspects
                                     if isinstance(frames.get(node), list)))
            return found
    return None


def read_record(module, path, summary):
    """The summary of the JSON record in path (read bounded), None (with a warning) when it cannot be read."""
    text, why = read_text(path, CHECK_RECORD_MAX_BYTES)
    try:
        record = untrusted.loads(text, CHECK_RECORD_MAX_BYTES) if text is not None else None
    except untrusted.Unreadable as err:
        why = str(err)
    if why:
        module.warn("cannot read %s: %s" % (path, why))
        return None
    return summary(record, path) if isinstance(record, dict) else None
