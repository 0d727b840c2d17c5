# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state of every run in a workspace, for the status playbook: from the run directories and
one Slurm query (the user's jobs), never an allocation.

A run is a directory of the workspace that the user owns and that holds what the pretrain stage
leaves (scripts/pretrain.sbatch, train.done.json or starts.jsonl). Its last job is the newest of
the jobs Slurm lists under its job name, the one its done record names and the one its last start
line names. What each run costs is bounded whatever its length: the tails of starts.jsonl and
metrics.jsonl (or of the job's log), records of a few KB, the names in checkpoints/.

States: queued (pending, with Slurm's reason), requeued (pending again after it started),
running, stopping (running, asked to stop), finished, failed, stopped (playbooks/stop.yml),
not submitted (the stages before pretrain ran only); untrusted for a run whose files others
could have written or replaced (a directory others may write to, or one under a workspace that
every other stage refuses: trusted_dirs), whose files are not read; unreadable for a run whose
files could not be read (the row says why, and the other runs are told as usual).

Whatever the files hold is untrusted (node/untrusted.py): JSON is read bounded, fields are of
their types (a job id of digits, or it names no job), and the table and detail are printable.
"""

from __future__ import annotations

import os
import re
import stat
import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record, ledger, trusted_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.exclusion import load_bad_nodes
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.job_watch import newest_hang
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.log_progress import last_record
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.metrics import progress_of, tail_records
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files, run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.exit_codes import TABLE
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import owned_dirs, owned_dirs_of, read_text
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.recovery import end_how, run_starts
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import ACTIVE_STATES, DEPENDENCY_REASONS, parse_dependency
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import state as sweep_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.sweep import RECORD as SWEEP_RECORD

RUN_MARKERS = ("scripts/pretrain.sbatch", run_files.DONE, run_files.STARTS)
DONE_FILE = run_files.DONE
SAMPLES_DONE_FILE = run_files.GENERATE_DONE
STARTS_FILE = run_files.STARTS
STOP_FILE = run_files.STOP
METRICS_FILE = run_files.METRICS
BAD_NODES_FILE = run_files.BAD_NODES
# the tail of starts.jsonl read: each start adds its line, the trainer's event and its end line
STARTS_READ = 32
# the done record's fields the status reads, of their types
# the run's directories whose files the status reads besides its own
READ_DIRS = ("logs", "checkpoints", run_files.HANGS)
BAD_NODES_NAMED = 3
PENDING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "RESV_DEL_HOLD")
# the run's states while its last job is queued or running
ACTIVE_RUN_STATES = ("queued", "requeued", "running", "stopping")
# how a start ended (the job script's end line) that is the run's state once its last job ended
ENDED = ("finished", "stopped")
# a number the table gives more than one name (3) is told by the first
BY_CODE = {entry.code: entry for entry in reversed(TABLE)}
# the longest text of a cell; the detail has the whole of it
CELL_CHARS = 48
COLUMNS = ("run", "state", "job", "nodes", "step", "loss", "tokens/s", "ETA", "GPU-h", "last event", "bad nodes")


def run_names(workspace, uid):
    """The runs of workspace that uid owns (directories, not links), sorted by name."""
    return owned_dirs(workspace, uid, RUN_MARKERS)


def workspace_dirs(workspace, uid):
    """(runs, sweeps): the directories of workspace that uid owns and that hold a run's marker
    (RUN_MARKERS, as run_names), and those that hold a sweep's record (sweep.json, as sweep/state.py's
    sweeps), from one listing of the workspace: a workspace of a sweep of 1,000 members is listed once."""
    runs, sweeps = owned_dirs_of(workspace, uid, [RUN_MARKERS, (SWEEP_RECORD,)])
    return runs, sweeps


def workspace_problem(workspace, uid):
    """Why no run of the workspace is to be believed, or None: a directory on the way to it that
    someone else can replace (trusted_dirs.walk_above, the check every stage makes)."""
    problems, _real, _missing = trusted_dirs.walk_above(os.path.abspath(workspace), uid, "slurm_workspace")
    return problems[0] if problems else None


def distrust(run_dir, uid):
    """Why the run directory's files are not to be believed, or None: it, or a directory of it the
    status reads (where there is one), is not the user's alone (trusted_dirs.own_problem)."""
    for path in [run_dir] + [os.path.join(run_dir, name) for name in READ_DIRS]:
        info = trusted_dirs.lstat(path)
        if info is None and path == run_dir:
            return "%s is gone" % path
        problem = info and trusted_dirs.own_problem(path, info, uid, "slurm_workspace")
        if problem:
            return problem
    return None


def starts_and_ends(path):
    """(start lines, end lines) of the tail of starts.jsonl (recovery.run_starts: the job script's)."""
    if not os.path.isfile(path) or os.path.islink(path):
        return [], []
    starts, _events, ends, _unreadable = run_starts(path, count=STARTS_READ)
    return starts, ends


EVAL_DIR = "eval"
EVAL_MAX_BYTES = 65536
EVAL_NAME = re.compile(r"^(?:step_|checkpoint-)([0-9]+)\.json$")


def newest_evaluation(run_dir):
    """The export job's newest evaluation (<run>/eval/step_<N>.json, or checkpoint-<N>.json of your
    script's checkpoint): a dict with a number for loss and tokens, or None. One directory listing
    and one bounded read of a regular file (a link is not followed)."""
    directory = os.path.join(run_dir, EVAL_DIR)
    try:
        names = [(int(m.group(1)), m.group(0)) for m in map(EVAL_NAME.match, os.listdir(directory)) if m]
    except OSError:
        return None
    for _step, name in sorted(names, reverse=True)[:1]:
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            value = untrusted.read(path, EVAL_MAX_BYTES)
        except (OSError, untrusted.Unreadable):
            return None
        if isinstance(value, dict) and all(isinstance(value.get(k), (int, float)) and not isinstance(value.get(k), bool)
                                           for k in ("loss", "tokens")):
            return value
    return None


def newest_checkpoint(checkpoint_dir):
    """(name, step) of the newest checkpoint in checkpoint_dir, or (None, None)."""
    try:
        names = os.listdir(checkpoint_dir)
    except OSError:
        return None, None
    steps = [(run_files.checkpoint_step(name), name) for name in names if run_files.checkpoint_step(name) is not None]
    if not steps:
        return None, None
    step, name = max(steps)
    return name, step


def bad_nodes(path):
    """The nodes the run's checks recorded bad (bad_nodes.json's keys, read as every stage reads
    it: exclusion.load_bad_nodes), sorted."""
    return sorted(load_bad_nodes(path)[0])


def job_log_path(run_dir, job_log, job_name, job_id):
    """The job's log, as the job's output option names it (logs/%x-%j.out); job_id: untrusted.JOB_ID."""
    return os.path.join(run_dir, job_log.replace("%x", job_name).replace("%j", job_id))


def last_job_id(queued, done, starts):
    """The newest job of the run: Slurm's, the done record's, the last start line's. Each a job id
    (untrusted.JOB_ID) or left out: it makes a path and goes to scontrol and sacct."""
    ids = [j["job_id"] for j in queued] + ([done["job_id"]] if "job_id" in done else [])
    ids += [s["job_id"] for s in starts[-1:]]
    ids = [i for i in ids if untrusted.JOB_ID.match(i)]
    return max(ids, key=lambda i: int(i.split("_")[0])) if ids else None


def exit_text(code):
    """'exit 81 (STOPPED)' for one of the run's exit codes, 'exit 3' otherwise."""
    entry = BY_CODE.get(code) if isinstance(code, int) else None
    return "exit %s%s" % (code, " (%s)" % entry.name if entry else "")


def state_of(job_id, slurm_job, done, end, stop_requested, started):
    """(state, why) of a run whose last job is job_id. slurm_job: Slurm's row of it (or None when
    Slurm forgot it); done: the run's done record; end: the job's last end line (or None);
    stop_requested: STOP names this job; started: the job has a start line."""
    state = slurm_job["state"] if slurm_job else None
    if state in ACTIVE_STATES:
        if state in PENDING_STATES:
            reason = slurm_job.get("reason") or "waiting"
            return ("requeued" if started or state != "PENDING" else "queued"), reason
        return ("stopping" if stop_requested else "running"), None
    if str(done.get("job_id")) == str(job_id) and done.get("state") == "COMPLETED":
        return "finished", None
    if end is not None:
        how = end.get("how")
        if how in ENDED:
            return how, None
        how = end_how(end)
        if stop_requested:
            # asked to stop, it ended another way (killed by the cancel after pretrain_signal_lead)
            return "stopped", "%s after the stop request, %s" % (how, exit_text(end.get("exit_code")))
        return "failed", exit_text(end.get("exit_code")) if how == "failed" else "%s, %s" % (how, exit_text(end.get("exit_code")))
    if stop_requested:
        return "stopped", "cancelled while queued" if not started else "cancelled after the stop request"
    if state == "COMPLETED":
        return "finished", None
    if state:
        return "failed", "Slurm: %s" % state
    return "failed", "no end line, and Slurm forgot the job (cancelled, or its batch node lost)"


# what the status table reads at most of each event file of a run: the end, where its last loss is
STATUS_EVENT_BYTES = 65536


def progress(run_dir, job_log, patterns, tag=None, event_dirs=None):
    """The run's progress (metrics.progress_of) from the tail of its metrics file, else from the
    end of its newest TensorBoard event files or Lightning metrics.csv (the loss of tag, or of a
    known loss tag) under event_dirs (default: the run directory), else from its job's log lines
    (your script's, with the patterns), else None."""
    metrics = os.path.join(run_dir, METRICS_FILE)
    if os.path.isfile(metrics) and not os.path.islink(metrics):
        records, _unreadable = tail_records(metrics)
        if records:
            return progress_of(records)
    found, _state, _warnings = event_files.poll(event_dirs or [run_dir], {}, tag, max_bytes=STATUS_EVENT_BYTES)
    if found is not None:
        return progress_of([dict((k, found[k]) for k in event_files.PROGRESS_FIELDS)])
    if job_log and patterns and os.path.isfile(job_log):
        state, _errors = trainer_state.read_newest(os.path.join(run_dir, "checkpoints"))
        record, _warnings = last_record(job_log, patterns, state)
        if record:
            return progress_of([record])
    return None


def last_event(state, end, prog, hang, started):
    """A few words on what the run did last."""
    if hang:
        return "hang in start %s: %s" % (hang.get("start"), ", ".join(sorted(hang.get("suspects") or {})) or "no node named")
    if end is not None and state not in ACTIVE_RUN_STATES:
        return "start %s ended %s at %s" % (end.get("start"), end_how(end), end.get("time"))
    if prog and prog.get("event"):
        step = prog.get("event_step")
        return "%s%s" % (prog["event"], "" if step is None else " at step %s" % step)
    if started:
        return "start %s on %s at %s" % (started.get("start"), started.get("nodes"), started.get("time"))
    return None


def empty_row(workspace, name):
    """A run's row before anything is known of it."""
    return dict(run=name, run_dir=os.path.join(workspace, name), state=None, why=None, job_id=None, slurm_state=None,
                nodes=None, num_nodes=None, step=None, total_steps=None, loss=None, tokens_per_s=None, eta_s=None,
                last_event=None, bad_nodes=[], checkpoint=None, checkpoint_step=None, stdout_path=None,
                exit_code=None, how=None, usage=None, others=[], waits_for=[], samples_done=False)


# what the run's other jobs are, by their names (the deploy and inference stages name them so)
JOB_KINDS = (("llmtrain-prepare-%s", "data job"), ("llmtrain-venv", "venv job"), ("llmtrain-generate-%s", "samples job"))


def job_kind(name, run, job_prefix):
    """'the data job' and the like, for a job of the run's by its name; 'job' for any other."""
    if name == job_prefix + run:
        return "training job"
    for pattern, kind in JOB_KINDS:
        if name == (pattern % run if "%s" in pattern else pattern):
            return kind
    return "job"


def waits_for(slurm_job, jobs, run, job_prefix):
    """The jobs a queued job waits for (its dependency, squeue's %E): [{job_id, kind, name, state,
    failed}], each as the user's queue (jobs, by id) knows it; failed: Slurm says it will never start
    (DependencyNeverSatisfied) because of it. Whatever Slurm's reason: 26.05 was seen to say Resources
    of a job whose dependency was still unfulfilled."""
    if not slurm_job:
        return []
    waits = []
    for item in parse_dependency(slurm_job.get("dependency")):
        if not item["job_id"]:
            continue
        other = (jobs or {}).get(item["job_id"]) or {}
        waits.append(dict(job_id=item["job_id"], name=other.get("name"), state=other.get("state"),
                          kind=job_kind(other.get("name") or "", run, job_prefix),
                          failed=item["status"] == "failed" or (other.get("state") not in (None, "COMPLETED")
                                                                and other.get("state") not in ACTIVE_STATES)))
    return waits


def waiting_text(waits, never):
    """The table's why of a job that waits for others: 'waiting for the data job 108', or 'data job 108
    failed: never starts' (the detail says what to do)."""
    failed = [w for w in waits if w["failed"]]
    if never or failed:
        named = " and ".join("%s %s" % (w["kind"], w["job_id"]) for w in failed) or "a job it waits for"
        return "%s failed: never starts" % named
    return "waiting for " + " and ".join("the %s %s" % (w["kind"], w["job_id"]) for w in waits) if waits else "waiting"


def run_row(workspace, name, queued, job_prefix, job_log, patterns, uid=None, workspace_distrust=None, tag=None,
            jobs=None):
    """The status of run `name`: the state, its last job, progress and what the table shows.
    queued: Slurm's rows of the user's jobs named job_prefix + name; workspace_distrust: why no run
    of the workspace is believed (workspace_problem), or None; jobs: every job of the user's queue by
    id (those the training job waits for are named)."""
    row = empty_row(workspace, name)
    run_dir = row["run_dir"]
    why = workspace_distrust or distrust(run_dir, os.getuid() if uid is None else uid)
    if why:
        row.update(state="untrusted", why="its files are not read: %s" % why)
        return row
    done = done_record.job_of(os.path.join(run_dir, DONE_FILE))
    starts, ends = starts_and_ends(os.path.join(run_dir, STARTS_FILE))
    job_id = last_job_id(queued, done, starts)
    row["bad_nodes"] = bad_nodes(os.path.join(run_dir, BAD_NODES_FILE))
    row["checkpoint"], row["checkpoint_step"] = newest_checkpoint(os.path.join(run_dir, "checkpoints"))
    if job_id is None:
        row.update(state="not submitted", why="no training job yet: run playbooks/pretrain.yml")
        return row
    slurm_job = next((j for j in queued if j["job_id"] == job_id), None)
    end = next((e for e in reversed(ends) if str(e["job_id"]) == job_id), None)
    start = next((s for s in reversed(starts) if str(s["job_id"]) == job_id), None)
    stop = read_text(os.path.join(run_dir, STOP_FILE), 64)[0]
    stop_requested = bool(stop) and stop.strip().split("\n")[0] == job_id
    state, why = state_of(job_id, slurm_job, done, end, stop_requested, start is not None)
    job_name = job_prefix + name
    row.update(state=state, why=why, job_id=job_id, slurm_state=slurm_job["state"] if slurm_job else None,
               stdout_path=job_log_path(run_dir, job_log, job_name, job_id),
               exit_code=end.get("exit_code") if end else None, how=end.get("how") if end else None)
    samples = done_record.job_of(os.path.join(run_dir, SAMPLES_DONE_FILE))
    row["samples_done"] = samples.get("state") == "COMPLETED"
    row["waits_for"] = waits_for(slurm_job, jobs, name, job_prefix) if state in ("queued", "requeued") else []
    if slurm_job and (row["waits_for"] or slurm_job.get("reason") in DEPENDENCY_REASONS) and state in ("queued", "requeued"):
        row["why"] = waiting_text(row["waits_for"], slurm_job["reason"] == "DependencyNeverSatisfied")
    if slurm_job and slurm_job.get("nodelist"):
        row.update(nodes=slurm_job["nodelist"], num_nodes=slurm_job.get("num_nodes"))
    elif start:
        row["nodes"] = start["nodes"]
    prog = progress(run_dir, row["stdout_path"], patterns, tag)
    if prog:
        row.update({key: prog.get(key) for key in ("step", "total_steps", "loss", "tokens_per_s", "eta_s")})
    if state not in ("running", "stopping"):
        row["eta_s"] = None
    hang = newest_hang(os.path.join(run_dir, run_files.HANGS), job_id)
    row["last_event"] = last_event(state, end, prog, hang, start)
    # the hours of the starts that ended (usage.json: one small file whatever the run's length), and
    # of the start that runs now, from its start line
    running = start if state in ("running", "stopping") and not (end and start and end.get("start") == start.get(
        "start")) else None
    row["usage"] = run_files.usage_totals(run_files.read_usage(run_dir), running, time.time())
    return row


SWEEP_STATES = ("done", "running", "pending", "stopped", "failed", "new", "untrusted")
SWEEP_COLUMNS = ("member", "state", "job", "step", "loss")
# what a member's row reads of its metrics file: its last MEMBER_RECORDS records, from the last
# MEMBER_TAIL_BYTES where they fit (a loss record, and the checkpoint and done events after it); the
# last 16, as a run's row reads them, where none of those has a loss
MEMBER_RECORDS = 4
MEMBER_TAIL_BYTES = 8192


def member_progress(run_dir):
    """{step, loss} of a sweep's member from the tail of its metrics file (a regular file, a link not
    followed), as a run's row has them (metrics.progress_of); {} where it has none."""
    path = os.path.join(run_dir, run_files.METRICS)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return {}
        records = tail_records(path, MEMBER_RECORDS, MEMBER_TAIL_BYTES)[0]
        if not any(untrusted.field(record.get("loss"), untrusted.REAL) is not None for record in records):
            records = tail_records(path)[0] or records
    except OSError:
        return {}
    return progress_of(records) or {}


def sweep_row(workspace, name, arrays, jobs, uid=None, workspace_distrust=None):
    """A sweep's row (its members counted by state, the lowest loss so far and its member) and a row
    per member ({member, state, job_id, step, loss}), from the sweep's record, the members' done
    records and metrics tails, and the user's queue (jobs). What each member costs is bounded
    whatever its length: the lstat of its directories, its done record (and its STOP where it is
    neither done nor queued), the last few records of its metrics file (member_progress)."""
    row = empty_row(workspace, name)
    names = sorted(set(member for entry in arrays for member in entry["tasks"].values()))
    active = sweep_state.active_tasks(jobs, arrays)
    last = sweep_state.last_tasks(arrays)
    members = []
    for member in names:
        run_dir = os.path.join(workspace, member)
        if workspace_distrust or distrust(run_dir, os.getuid() if uid is None else uid):
            members.append(dict(member=member, state="untrusted", job_id=None, step=None, loss=None))
            continue
        state, job_id = sweep_state.member_state(member, os.path.join(run_dir, DONE_FILE), active, last.get(member))
        prog = member_progress(run_dir)
        members.append(dict(member=member, state=state, job_id=job_id, step=prog.get("step"), loss=prog.get("loss")))
    counts = [(state, sum(1 for m in members if m["state"] == state)) for state in SWEEP_STATES]
    scored = [m for m in members if isinstance(m["loss"], (int, float)) and m["loss"] == m["loss"]]
    lead = min(scored, key=lambda m: m["loss"]) if scored else None
    row.update(state="sweep", why="%d members: %s" % (len(members), ", ".join("%d %s" % (n, s) for s, n in counts if n)),
               job_id=arrays[-1]["job_id"] if arrays else None, step=lead["step"] if lead else None,
               loss=lead["loss"] if lead else None, last_event="lowest loss: %s" % lead["member"] if lead else None,
               members=len(members))
    return row, members


def sweep_table(members):
    """The lines of a sweep's member table."""
    body = [[untrusted.printable(str(text)) for text in (m["member"], m["state"], m["job_id"] or "-",
                                                         "-" if m["step"] is None else m["step"],
                                                         "-" if not isinstance(m["loss"], (int, float)) else "%.4g" % m["loss"])]
            for m in members]
    widths = [max([len(column)] + [len(line[i]) for line in body]) for i, column in enumerate(SWEEP_COLUMNS)]
    lines = ["  ".join(text.ljust(width) for text, width in zip(SWEEP_COLUMNS, widths)).rstrip(),
             "  ".join("-" * width for width in widths)]
    return lines + ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in body]


def add_ledgers(rows, sacct_usage):
    """Each run's hours from Slurm's accounting where it keeps one (ledger.py): the job ids of every
    run with a training job in one call of sacct_usage (Slurm.sacct_usage: each start's allocation, or
    None without accounting), whatever the runs' lengths. row["usage"] becomes sacct's figures of the
    training job (source "sacct") where sacct knows each of its jobs, else stays usage.json's (source
    "usage.json"); row["others"]: sacct's of its data and samples jobs."""
    runs = []
    for row in rows:
        if row["job_id"] and row["state"] not in ("untrusted", "unreadable"):
            kinds, complete = ledger.job_ids(row["run_dir"], train=[row["job_id"]])
            runs.append((row, kinds, complete))
    asked = list(dict.fromkeys(job_id for _row, kinds, _complete in runs for job_id in kinds))
    found = sacct_usage(asked) if len(asked) <= ledger.JOB_IDS_MAX else None
    by_job = {}  # each run gets its own rows: the work is sacct's rows once, however many runs
    for found_row in found or []:
        for key in dict.fromkeys((found_row["job_id"], found_row["array_id"])):
            by_job.setdefault(key, []).append(found_row)
    for row, kinds, complete in runs:
        mine = None if found is None else list({id(r): r for j in kinds for r in by_job.get(j, [])}.values())
        used = ledger.ledger(mine, kinds, row["usage"], complete)
        if used["source"] == "sacct" and (used["train"]["count"] or row["usage"]):  # a job yet to start: "-"
            train = used["train"]
            row["usage"] = dict(row["usage"] or {}, node_hours=train["node_hours"], gpu_hours=train["gpu_hours"],
                                cpu_hours=train["cpu_hours"], starts=train["count"])
        if row["usage"]:
            row["usage"]["source"] = used["source"]
        row["others"] = used["others"]
    return rows


def _number(value, digits):
    return "-" if value is None else ("%.*f" % (digits, value) if isinstance(value, float) else str(value))


def _duration(seconds):
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return "%dd%02dh" % (seconds // 86400, seconds % 86400 // 3600) if seconds >= 86400 else "%d:%02d:%02d" % (
        seconds // 3600, seconds % 3600 // 60, seconds % 60)


def _hours(usage):
    """The GPU-hours cell: '-' when no start has ended or runs; without GPUs, the node-hours."""
    if not usage:
        return "-"
    return "%.1f" % usage["gpu_hours"] if usage["gpu_hours"] else "0 (%.1f node-h)" % usage["node_hours"]


def cells(row):
    """The table's cells of a row, as text."""
    state = row["state"] + (" (%s)" % row["why"] if row["why"] and row["state"] in ("queued", "requeued", "sweep") else
                            " (exit %s)" % row["exit_code"] if row["state"] == "failed" and row["exit_code"] is not None else "")
    step = "-" if row["step"] is None else "%s%s" % (row["step"], "/%s" % row["total_steps"] if row["total_steps"] else "")
    nodes = row["nodes"] or "-"
    if row["num_nodes"] and row["num_nodes"] > 1:
        nodes = "%d: %s" % (row["num_nodes"], nodes)
    bad = row["bad_nodes"]
    bad_text = ", ".join(bad[:BAD_NODES_NAMED]) + (" and %d more" % (len(bad) - BAD_NODES_NAMED) if len(bad) > BAD_NODES_NAMED else "")
    loss = row["loss"]
    texts = [row["run"], state, row["job_id"] or "-", nodes, step,
             "-" if not isinstance(loss, (int, float)) else "%.4g" % loss, _number(row["tokens_per_s"], 0),
             _duration(row["eta_s"]), _hours(row["usage"]), row["last_event"] or (row["why"] or "-"), bad_text or "-"]
    texts = [untrusted.printable(text) for text in texts]
    return [text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 3] + "..." for text in texts]


def table(rows):
    """The lines of the status table (a header, a rule, a line per run)."""
    body = [cells(row) for row in rows]
    widths = [max([len(column)] + [len(line[i]) for line in body]) for i, column in enumerate(COLUMNS)]
    lines = ["  ".join(text.ljust(width) for text, width in zip(COLUMNS, widths)).rstrip(),
             "  ".join("-" * width for width in widths)]
    lines += ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in body]
    return lines


def detail(row, log, failed_logs=()):
    """The lines that tell one run in detail: its row, where it stands, its log's tail and, where it
    failed, the traceback of the rank that failed first (log: job_log.log_summary's, or None); the
    tails of the logs of the jobs it waited for that failed (failed_logs: [{kind, path, tail}]).
    Each printable."""
    return [untrusted.printable(line) for line in _detail(row, log, failed_logs)]


def _detail(row, log, failed_logs):
    lines = ["Run %s: %s%s" % (row["run"], row["state"], " (%s)" % row["why"] if row["why"] else "")]
    if row["job_id"]:
        slurm_state = ", Slurm: %s" % row["slurm_state"] if row["slurm_state"] else ""
        lines.append("  job %s%s, nodes %s" % (row["job_id"], slurm_state, row["nodes"] or "-"))
    if row["step"] is not None:
        total = "/%s" % row["total_steps"] if row["total_steps"] else ""
        eta = ", ETA %s" % _duration(row["eta_s"]) if row["eta_s"] is not None else ""
        throughput = _number(row["tokens_per_s"], 0)
        lines.append("  step %s%s, loss %s, %s tokens/s%s" % (row["step"], total, _number(row["loss"], 4), throughput, eta))
    checkpoint = os.path.join(row["run_dir"], "checkpoints", row["checkpoint"]) if row["checkpoint"] else "none"
    lines.append("  newest checkpoint: %s" % checkpoint)
    for wait in row.get("waits_for") or []:
        lines.append("  waits for the %s %s (%s)%s" % (
            wait["kind"], wait["job_id"], wait["state"] or "no longer known to Slurm",
            ": it failed, so this job never starts. Fix what its log says, then run playbooks/pretrain.yml again: "
            "it submits the %s again and puts this job behind it" % wait["kind"] if wait["failed"] else ""))
    if row["last_event"]:
        lines.append("  last event: %s" % row["last_event"])
    if row["usage"]:
        used = row["usage"]
        source = ("sacct: allocated TRES x elapsed" if used.get("source") == "sacct" else
                  "usage.json and the running start, from the run's start and end lines")
        cpus = ", %.2f CPU-hours" % used["cpu_hours"] if used.get("cpu_hours") is not None else ""
        lines.append("  used: %.2f GPU-hours, %.2f node-hours%s over %d start(s) (%s)"
                     % (used["gpu_hours"], used["node_hours"], cpus, used["starts"], source))
    for other in row.get("others") or []:
        lines.append("  %s job %s: %.2f GPU-hours, %.2f node-hours, %.2f CPU-hours (sacct)"
                     % (other["kind"], other["job_id"], other["gpu_hours"], other["node_hours"], other["cpu_hours"]))
    evaluation = row.get("evaluation")
    if evaluation:
        perplexity = evaluation.get("perplexity")
        lines.append("  model: %s; held-out loss %s (perplexity %s) over %s tokens of %s" % (
            evaluation.get("model", "-"), _number(float(evaluation["loss"]), 4),
            _number(float(perplexity), 2) if isinstance(perplexity, (int, float)) and not isinstance(perplexity, bool) else "-",
            evaluation["tokens"], evaluation.get("text", "the held-out text")))
    if row["bad_nodes"]:
        lines.append("  bad nodes (bad_nodes.json, later jobs keep off them): %s" % ", ".join(row["bad_nodes"]))
    if row["state"] == "stopped":
        lines.append("  playbooks/pretrain.yml resumes it from its newest checkpoint")
    for other in failed_logs:
        lines += ["Last %d lines of the %s's log, %s:" % (len(other["tail"]), other["kind"], other["path"])]
        lines += ["  " + line for line in other["tail"]]
    if log is None:
        return lines
    if row["state"] == "failed" and log.get("traceback"):
        where = " (rank %s%s)" % (log["failed_rank"], " on %s" % log["node"] if log.get("node") else "") \
            if log.get("failed_rank") is not None else ""
        lines += ["The first traceback%s:" % where] + ["  " + line for line in log["traceback"]]
    if log.get("tail"):
        lines += ["Last %d lines of %s:" % (len(log["tail"]), log["path"])] + ["  " + line for line in log["tail"]]
    return lines


def job_of(job, row):
    """The run's last job as Slurm tells it (scontrol, sacct), completed from the run directory
    where Slurm has forgotten it: its state from its end line or done record, its log."""
    job = dict(job)
    if not job.get("known", True) or job.get("state") == "UNKNOWN":
        job.update(state="COMPLETED" if row["state"] == "finished" else "FAILED" if row["state"] in ("failed", "stopped")
                   else job.get("state"), nodelist=job.get("nodelist") or row["nodes"])
        if row["exit_code"] is not None:
            job["exit_code"] = row["exit_code"]
    if not job.get("stdout_path") and row["stdout_path"] and os.path.isfile(row["stdout_path"]):
        job["stdout_path"] = row["stdout_path"]
    return job
