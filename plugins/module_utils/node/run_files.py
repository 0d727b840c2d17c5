# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run directory's shared files that the training job writes and the watch, the status
playbook and the report read: their names, their bounds, the fields of each kind of line of
starts.jsonl, and the job's writes and reads of them (job.py). The controller side
(recovery.py, run_status.py) reads the same names and fields from here.

starts.jsonl, one JSON object per line:
- a start of a job, written by the job as it starts: {job_id, start, nodes, left, time, node_count};
  `left`: the nodes of the start before (this job's or an earlier job's of the run) that this one
  lacks; node_count: how many nodes it has (lines before it was written lack it);
- the reference trainer's start and resume events ({event: start|resume, job_id, start, ...});
- the end of a start, written by the job as it ends: {event: end, job_id, start, how, exit_code,
  [signal], time}; how: finished, failed, requeued, stopped, hang, preempted or killed.

The markers: STOP (playbooks/stop.yml: the job id it stops), STOP_NOTICE (a stop notice that came
while the checks ran), PREEMPTED (the training stopped with a checkpoint: it names the signal),
HANG (the hang watch ended the training); requeues_uncounted: "<job id> <start>" per requeue
that run_requeue_max does not count.

This file imports nothing from Ansible: it runs on the nodes as part of the llmtrain_node package.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import time as clock

from .atomic import replace_file
from .untrusted import COUNT, INT, JOB, NUMBER, TEXT, Unreadable, fields, loads, printable, read, whole

STARTS = "starts.jsonl"
FACTS = "facts.json"
DONE = "train.done.json"
# the records of the other stages' jobs (done_record.py; each job marks its own completed, job_end.py)
PREPARE_DONE = "data/prepare.done.json"
GENERATE_DONE = "generate.done.json"
EXPORT_DONE = "export.done.json"
# in each batch's directory, batch/<batch>/; the last batch's records and figures are brought to runs/<run>/
BATCH_DONE = "batch.done.json"
BATCH_RECORDS = "generations.jsonl"
BATCH_SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
NODE_TIMES = "node_times.json"
SAMPLES = "samples.txt"
BAD_NODES = "bad_nodes.json"
STOP = "STOP"
STOP_NOTICE = "STOP_NOTICE"
PREEMPTED = "PREEMPTED"
HANG = "HANG"
HANGS = "hangs"
# a hang's verdict, in HANGS/<job>-<start>/ (node/hang.py)
HANG_SUMMARY = "summary.json"
REQUEUES_UNCOUNTED = "requeues_uncounted"
USAGE = "usage.json"
USAGE_MAX_BYTES = 4096
USAGE_FIELDS = dict(first=TEXT, starts=COUNT, node_s=NUMBER, gpu_s=NUMBER, cpu_s=NUMBER, gpus_per_node=COUNT, last=TEXT,
                    jobs=TEXT, jobs_dropped=COUNT)
# the training job ids usage.json keeps (for sacct's ledger: plugins/module_utils/rundir/ledger.py), newest last;
# a run of more jobs than this counts those it drops (the ledger then is usage.json's)
USAGE_JOBS_KEPT = 100
# SLURM_JOB_CPUS_PER_NODE: "2(x3),1", each node's CPUs in the job
CPUS_PER_NODE = re.compile(r"\A([0-9]+)(?:\(x([0-9]+)\))?\Z")
NOTIFY_HOOKS = "env/notify.json"
NOTIFY_SENT = "notify_sent.json"

# Every file and directory of the run directory (<slurm_workspace>/<run_name>): what it holds, who writes
# it, and where it is defined and read. A path role YAML names under run_dir is one of these
# (tests/unit/test_run_layout.py).
LAYOUT = {
    STARTS: "a line per start and end of each job (START_FIELDS, END_FIELDS) and the trainer's start/resume "
            "events: job.py writes, recovery.py, run_status.py, run_report.py read",
    STOP: "the job id playbooks/stop.yml stops (a marker, MARKER_MAX_BYTES): job.py reads",
    STOP_NOTICE: "a stop notice that came while the job's checks ran: job.py",
    PREEMPTED: "the signal the training stopped on with a checkpoint: the trainer writes, job.py reads",
    HANG: "the hang watch ended the training: node/hang.py writes, job.py reads",
    REQUEUES_UNCOUNTED: "'<job id> <start>' per requeue run_requeue_max does not count: job.py",
    FACTS: "the run's facts for its report: module_utils/rundir/run_facts.py (FIELDS) makes them, the collect step "
           "writes them, run_report.py reads them",
    DONE: "the record of the finished training job (done_record.py, RECORD_FIELDS): sbatch writes and reads it",
    METRICS: "the trainer's loss records (LLMTRAIN_METRICS_FILE): metrics.py, the watch and the report read",
    BAD_NODES: "the nodes the run's checks found bad, with why: node/bad_nodes.py merges and writes, "
               "exclusion.py and sbatch read",
    USAGE: "the run's node-, CPU- and GPU-seconds over the starts that ended, and its training job ids "
           "(USAGE_FIELDS; add_usage): job.py writes, run_status.py, ledger.py and run_report.py read",
    NOTIFY_SENT: "the times of the run's last notifications sent, for their rate (node/notify.py): job.py",
    NODE_TIMES: "each node's step times over the run (the reference trainer's): run_report.py reads",
    "checkpoints": "the checkpoints (checkpoint_names, checkpoint_step): the trainer writes, the watch, "
                   "the collect step and the inference stage read",
    "logs": "one log per job id (logs/%x-%j.out), and the watch's place in your event files",
    HANGS: "<job>-<start>/summary.json and each rank's stacks: node/hang.py writes, job_watch.py and the "
           "report read",
    "node_check": "<job name>.json, a job's node check: node/node_check.py writes, check_summary.py reads",
    "network_check": "<job name>.json, a job's network check: node/network_check.py writes, check_summary.py reads",
    "env": "cluster.env and each node's env file (the nccl_env role); secrets.env (slurm_secret_env) and "
           "notify.json (run_notify's webhooks, NOTIFY_HOOKS: the pretrain role writes, node/notify.py reads), "
           "each with mode 0600",
    "scripts": "the job scripts and the code the jobs run (the deploy stage; the node package)",
    "src": "your code with run_source_dir (the deploy stage, source_sync.py)",
    "data": "the tokenized dataset and its record data/prepare.done.json (the deploy stage; the job marks it completed)",
    "tensorboard": "the reference trainer's TensorBoard event files",
    "wandb": "offline W&B runs (run_wandb_mode: offline)",
    "archive": "<time>/: a finished run moved aside by run_force",
    "deployed.json": "what the deploy stage wrote (source_sync.py)",
    "pipeline.json": "the finished pipeline's fingerprint and its stages' records (pipeline_record.py)",
    "preflight.json": "what the preflight checked and found (the preflight role)",
    "prompts.json": "the inference stage's prompts",
    SAMPLES: "the generated text (the inference stage)",
    "samples.json": "the generated text as records (the inference stage)",
    GENERATE_DONE: "the record of the samples job (done_record.py; the job marks it completed, job_end.py)",
    "export": "the Hugging Face model of each checkpoint exported, step_<N>/ (trainer.export), and exported.json, "
              "the newest export's line",
    "eval": "the held-out loss of each model evaluated, step_<N>.json (trainer.evaluate), and the text given "
            "as inference_eval_file",
    EXPORT_DONE: "the record of the export job (done_record.py; the job marks it completed, job_end.py)",
    "batch": "<batch>/ per batch of inference_prompts_file (its prompts, model and sampling defaults): prompts.jsonl, "
             "parts/w<world>/rank-<rank>.jsonl (trainer.batch appends a record per prompt), generations.jsonl and "
             "summary.json (trainer.batch --merge), batch.sbatch and batch.done.json (the sbatch module)",
    "serve": "the serving job's endpoint.json (node/serve_gate.py writes it once the server answers, "
             "module_utils/inference/serve.py reads it) and the link, named after the run, to the model it serves",
}

# what a job reads of starts.jsonl (its end) for the nodes of the start before, and of a marker
STARTS_TAIL_BYTES = 1 << 20
MARKER_MAX_BYTES = 4096
# a line of starts.jsonl (the job's lines are far shorter; a longer line is not read)
LINE_MAX_BYTES = 64 << 10
# a Slurm host list as the job writes it ("n[01-04,07],gpu-a1"), never an option; one host name
HOST_LIST = re.compile(r"\A[A-Za-z0-9._][][A-Za-z0-9._,-]*\Z")
HOST_NAME = re.compile(r"\A[A-Za-z0-9._-]+\Z")
# <run>/checkpoints/: the reference trainer's step_NNNNNN.pt (ddp) and step_NNNNNN/ (fsdp); a Hugging
# Face Trainer's checkpoint-N. Anything else there (a checkpoint moved aside as .bad, a sharded one
# being written, your script's own names) is not numbered.
REFERENCE_CHECKPOINT = re.compile(r"\Astep_0*([0-9]+)(?:[.]pt)?\Z")
CHECKPOINT = re.compile(r"\A(?:step_0*([0-9]+)(?:[.]pt)?|checkpoint-([0-9]+))\Z")
# The fields of each kind of line, of the types they must have (a job id of digits, JOBID_TASK for
# an array's): a line whose job id or start is not of its type is not one of them.
START_FIELDS = dict(job_id=JOB, start=COUNT, nodes=TEXT, left=TEXT, time=TEXT, node_count=COUNT)
END_FIELDS = dict(event=TEXT, job_id=JOB, start=COUNT, how=TEXT, exit_code=INT, time=TEXT, signal=TEXT)


def checkpoint_step(name):
    """The step of a checkpoint's name (step_000100.pt, step_000100, checkpoint-100), or None."""
    match = CHECKPOINT.match(os.path.basename(str(name).rstrip("/")))
    return int(match.group(1) or match.group(2)) if match else None


def checkpoint_names(entries, own_script=False):
    """The names of the checkpoints among entries ({path, mtime} of each entry of <run>/checkpoints),
    oldest first: the reference trainer's by step (its others are not checkpoints); for your
    script every entry with a usable name, those numbered by step after the others, by time."""
    named = [(n, mtime) for n, mtime in entry_names(entries) if n.isprintable()]
    if not own_script:
        return sorted((n for n, mtime in named if REFERENCE_CHECKPOINT.match(n)), key=checkpoint_step)
    steps = dict((n, checkpoint_step(n)) for n, _mtime in named)
    order = dict((n, (steps[n] is not None, steps[n] or 0, mtime, n)) for n, mtime in named)
    return sorted(order, key=order.get)


def entry_names(entries):
    return [(os.path.basename(str(e["path"]).rstrip("/")), e.get("mtime") or 0) for e in entries]


def unusable_checkpoint_names(entries):
    """The names among entries that are never taken for a checkpoint, made safe to print: a name with
    a control character (a line break, an escape) would break a line of a job script or a terminal."""
    return sorted(printable(n) for n, _mtime in entry_names(entries) if not n.isprintable())


def path(run_dir, name):
    return os.path.join(run_dir, name)


def append_line(file_path, record):
    """Adds record as one JSON line (one write, in append mode: lines of several writers never mix)."""
    data = (json.dumps(record) + "\n").encode("utf-8")
    fd = os.open(file_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def start_record(job_id, start, nodes, left, time, node_count=None):
    record = dict(job_id=str(job_id), start=int(start), nodes=nodes, left=left, time=time)
    if node_count is not None:
        record["node_count"] = int(node_count)
    return record


def end_record(job_id, start, how, exit_code, time, signal=None):
    record = dict(event="end", job_id=str(job_id), start=int(start), how=how, exit_code=int(exit_code))
    if signal:
        record["signal"] = signal
    record["time"] = time
    return record


def head(file_path, max_bytes=MARKER_MAX_BYTES):
    """The first max_bytes of a marker file as text ('' when there is none or it cannot be read)."""
    try:
        with open(file_path, "rb") as f:
            return f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return ""


def tail_lines(file_path, max_bytes=STARTS_TAIL_BYTES):
    """The whole lines among the last max_bytes of file_path, oldest first ([] when there is none)."""
    try:
        with open(file_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first is part of a line
    return [line for line in lines if line.strip()]


def new_lines(file_path, offset, max_bytes=STARTS_TAIL_BYTES):
    """(the whole lines added to file_path since offset, at most its last max_bytes; the offset after the
    last of them): a line still being written is read the next time."""
    try:
        with open(file_path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size <= offset:
                return [], min(offset, size)
            begin = max(offset, size - max_bytes)
            handle.seek(begin)
            data = handle.read(size - begin)
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")
    if begin > offset:
        lines = lines[1:]  # the first is part of a line
    return [line for line in lines if line.strip()], begin + end


def _record(line):
    """A line of starts.jsonl as its JSON object, or None (too long, no JSON, no object)."""
    if len(line) > LINE_MAX_BYTES:
        return None
    try:
        record = loads(line, LINE_MAX_BYTES)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def records(file_path):
    """The readable JSON objects of starts.jsonl's bounded tail, oldest first."""
    return [r for r in map(_record, tail_lines(file_path)) if r is not None]


def last_start_nodes(file_path):
    """The nodes of the newest start line of starts.jsonl whose host list is one (None if none is):
    read from the end, only as far back as that line (each job start asks)."""
    for line in reversed(tail_lines(file_path)):
        record = _record(line)
        nodes = record.get("nodes") if record is not None and "event" not in record else None
        if isinstance(nodes, str) and HOST_LIST.match(nodes):
            return nodes
    return None


def uncounted_requeues(run_dir, job_id):
    """How many requeues of job_id run_requeue_max did not count (requeues_uncounted's lines)."""
    prefix = "%s " % job_id
    return sum(1 for line in head(path(run_dir, REQUEUES_UNCOUNTED)).splitlines() if line.startswith(prefix))


def stop_requested(run_dir, job_id):
    """playbooks/stop.yml asked this job to stop: STOP's first line names it."""
    lines = head(path(run_dir, STOP), 64).splitlines()
    return bool(lines) and lines[0] == str(job_id)


def stamp(text):
    """Seconds since the epoch of a line's UTC time (2026-12-06T05:40:00Z), or None."""
    try:
        return calendar.timegm(clock.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")) if isinstance(text, str) else None
    except ValueError:
        return None


def usage(lines, now=None):
    """Each start's use of its nodes, from starts.jsonl's start and end lines (lines: its JSON objects,
    oldest first): [{job_id, start, node_count, began, seconds, running}], seconds from its start
    line's time to its end line's, or to now for the newest start when it has none yet (running; none
    without now: the report, which holds no time of its own); an older start without an end line (its
    batch node lost) counts none. Lines written before start lines carried node_count are left out."""
    starts, ends = [], {}
    for record in lines:
        key = (str(record.get("job_id")), record.get("start"))
        if record.get("event") == "end":
            ends[key] = stamp(record.get("time"))
        elif "event" not in record:
            count, began = record.get("node_count"), stamp(record.get("time"))
            if isinstance(count, int) and not isinstance(count, bool) and began is not None:
                starts.append((key, began, count))
    used = []
    for index, (key, began, count) in enumerate(starts):
        ended = ends.get(key)
        running = ended is None and index == len(starts) - 1
        seconds = max(0.0, ((now if now is not None else began) if running else ended if ended is not None
                            else began) - began)
        used.append(dict(job_id=key[0], start=key[1], node_count=count, began=began, seconds=seconds,
                         running=running))
    return used


def read_usage(run_dir):
    """usage.json (USAGE_FIELDS of their types, the others left out), or {} when there is none."""
    try:
        usage_record = read(path(run_dir, USAGE), USAGE_MAX_BYTES)
    except (OSError, Unreadable):
        return {}
    return fields(usage_record, USAGE_FIELDS) if isinstance(usage_record, dict) else {}


def job_cpus(cpus_per_node, cpus_on_node, node_count):
    """The CPUs of a job's nodes together: SLURM_JOB_CPUS_PER_NODE's ("2(x3),1"), else SLURM_CPUS_ON_NODE's
    (the batch node's) on each node, else 0."""
    total = 0
    for item in (cpus_per_node or "").split(","):
        match = CPUS_PER_NODE.match(item.strip())
        if not match:
            total = None
            break
        total += int(match.group(1)) * int(match.group(2) or 1)
    if total:
        return total
    return whole(cpus_on_node, 0) * node_count


def add_usage(run_dir, job_id, start, began, ended, node_count, gpus_per_node, cpus=0):
    """Adds a start's nodes x its time (seconds since the epoch) to usage.json, once a start: the run's
    hours for any length of it in one small file (the job writes it as each start ends); cpus: the
    CPUs of its nodes together (job_cpus)."""
    usage_record = read_usage(run_dir)
    key = "%s %d" % (job_id, start)
    if usage_record.get("last") == key:
        return usage_record
    seconds = max(0.0, ended - began)
    node_s = seconds * node_count
    jobs = [j for j in (usage_record.get("jobs") or "").split() if j != str(job_id)] + [str(job_id)]
    usage_record = dict(
        first=usage_record.get("first") or clock.strftime("%Y-%m-%dT%H:%M:%SZ", clock.gmtime(began)),
        starts=usage_record.get("starts", 0) + 1, node_s=usage_record.get("node_s", 0) + node_s,
        gpu_s=usage_record.get("gpu_s", 0) + node_s * gpus_per_node, cpu_s=usage_record.get("cpu_s", 0) + seconds * cpus,
        gpus_per_node=gpus_per_node, last=key, jobs=" ".join(jobs[-USAGE_JOBS_KEPT:]),
        jobs_dropped=usage_record.get("jobs_dropped", 0) + max(0, len(jobs) - USAGE_JOBS_KEPT))
    replace_file(path(run_dir, USAGE), json.dumps(usage_record).encode("utf-8"))
    return usage_record


def usage_totals(usage_record, running=None, now=None):
    """{wall_s, node_hours, gpu_hours, cpu_hours, starts} of usage.json's record, and of a running start
    ({time, node_count} of its start line) to now; None when neither says anything. cpu_hours is None
    where usage.json does not count CPUs (written before it did), or a start runs (its CPUs are the job's)."""
    node_s, gpu_s, starts = usage_record.get("node_s", 0), usage_record.get("gpu_s", 0), usage_record.get("starts", 0)
    cpu_s = usage_record.get("cpu_s")
    first = stamp(usage_record.get("first"))
    began = stamp(running.get("time")) if running else None
    if began is not None and isinstance(running.get("node_count"), int):
        extra = max(0.0, now - began) * running["node_count"]
        node_s, gpu_s, starts = node_s + extra, gpu_s + extra * usage_record.get("gpus_per_node", 0), starts + 1
        cpu_s = None
        first = first or began
    if first is None:
        return None
    return dict(wall_s=max(0.0, (now or clock.time()) - first), node_hours=node_s / 3600.0, gpu_hours=gpu_s / 3600.0,
                cpu_hours=None if cpu_s is None else cpu_s / 3600.0, starts=starts)
