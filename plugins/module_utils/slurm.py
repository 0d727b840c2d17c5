# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm for modules: commands as argv lists, parsers as pure functions, the job-state map.

Parsers take the text a Slurm 22.05+ client prints and return plain data, so unit tests
call them directly on recorded output.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import time

# Base states and state flags as Slurm names them (slurm.h, job_state_string()).
# active: the controller still holds resources or will still run the job.
# success: only COMPLETED is a successful end.
JOB_STATES = {
    "PENDING": dict(active=True, meaning="queued, waiting for resources or a condition"),
    "CONFIGURING": dict(active=True, meaning="allocated, nodes being readied"),
    "RUNNING": dict(active=True, meaning="running"),
    "COMPLETING": dict(active=True, meaning="ended, epilog or cleanup still running"),
    "SUSPENDED": dict(active=True, meaning="suspended; keeps its allocation"),
    "STOPPED": dict(active=True, meaning="stopped by SIGSTOP; keeps its allocation"),
    "SIGNALING": dict(active=True, meaning="being signalled"),
    "STAGE_OUT": dict(active=True, meaning="staging out data"),
    "REQUEUED": dict(active=True, meaning="requeued, will run again"),
    "REQUEUE_HOLD": dict(active=True, meaning="requeued and held"),
    "REQUEUE_FED": dict(active=True, meaning="requeued by the federation"),
    "RESIZING": dict(active=True, meaning="changing size"),
    "RESV_DEL_HOLD": dict(active=True, meaning="held after its reservation was deleted"),
    "PREEMPTED": dict(active=False, meaning="terminated by preemption"),
    "COMPLETED": dict(active=False, meaning="ended with exit code 0"),
    "FAILED": dict(active=False, meaning="ended with a non-zero exit code or failed to start"),
    "CANCELLED": dict(active=False, meaning="cancelled"),
    "TIMEOUT": dict(active=False, meaning="reached its time limit"),
    "NODE_FAIL": dict(active=False, meaning="ended by the failure of an allocated node"),
    "OUT_OF_MEMORY": dict(active=False, meaning="ran out of memory"),
    "BOOT_FAIL": dict(active=False, meaning="a node failed to boot"),
    "DEADLINE": dict(active=False, meaning="reached its deadline before it could run"),
    "SPECIAL_EXIT": dict(active=False, meaning="requeued in a held special-exit state"),
    "REVOKED": dict(active=False, meaning="revoked: a sibling job of the federation runs it"),
    "UNKNOWN": dict(active=False, meaning="finished, and forgotten by the controller"),
}
ACTIVE_STATES = frozenset(s for s, v in JOB_STATES.items() if v["active"])
# sacct abbreviates; squeue --states takes these names too.
STATE_ALIASES = {"OOM": "OUT_OF_MEMORY", "CA": "CANCELLED", "CD": "COMPLETED", "F": "FAILED",
                 "TO": "TIMEOUT", "NF": "NODE_FAIL", "PD": "PENDING", "R": "RUNNING",
                 "CG": "COMPLETING", "CF": "CONFIGURING", "S": "SUSPENDED", "PR": "PREEMPTED",
                 "BF": "BOOT_FAIL", "DL": "DEADLINE", "SE": "SPECIAL_EXIT", "RQ": "REQUEUED",
                 "RH": "REQUEUE_HOLD", "RF": "REQUEUE_FED", "RS": "RESIZING", "ST": "STOPPED",
                 "SI": "SIGNALING", "SO": "STAGE_OUT", "RV": "REVOKED"}

COMMENT_PREFIX = "llmtrain:"

# sbatch long options of Slurm 22.05 that a task may set through `options`. The options
# the module sets itself (job name, comment, parsable, wait, chdir) are not among them.
SBATCH_OPTIONS = frozenset("""
account acctg-freq array batch bb bbf begin cluster-constraint clusters constraint container
contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot
dependency distribution error exclude exclusive export export-file extra-node-info get-user-env
gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint hold
ignore-pbs input kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind
mem-per-cpu mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks
ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode output overcommit
oversubscribe partition power priority profile propagate qos quiet reboot requeue reservation
signal sockets-per-node spread-job switches test-only thread-spec threads-per-core time time-min
tmp tres-per-task uid use-min-nodes verbose wait-all-nodes wckey
""".split())
RESERVED_OPTIONS = {
    "job-name": "set the job name with the name option",
    "comment": "the comment records the job's identity (name and fingerprint)",
    "chdir": "use the chdir option",
    "parsable": "the module always submits with --parsable",
    "wait": "use the wait option",
    "wrap": "use the content option",
}
OPTION_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# A key of `scontrol show -o` output: word characters plus the few separators Slurm uses
# in key names (AllocNode:Sid, CPUs/Task, NtasksPerN:B:S:C), after a space, before '='.
KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*(?:[:/][A-Za-z0-9_]+)*)=")

FIELD_SEP = "\x1f"
RECORD_SEP = "\x1e"


def show_argv(argv):
    """An argument vector for messages, control characters visible."""
    return " ".join(a if a.isprintable() and a else repr(a) for a in argv)


class SlurmError(Exception):
    """A Slurm command failed; the message says which and what it printed."""


# ---------------------------------------------------------------- pure parsers

def parse_kv_line(line):
    """One record of `scontrol show ... -o`: {key: value}, values may hold spaces."""
    line = line.rstrip("\n")
    matches = list(KEY.finditer(line))
    record = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        record[match.group(1)] = line[match.end():end].strip()
    return record


def parse_records(text, first_key):
    """Records of `scontrol show X -o`, each starting with first_key= (a value such as a
    job name may hold a newline, so records are split by their first key, not by line)."""
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=\n))%s=" % re.escape(first_key), text)]
    return [parse_kv_line(text[a:b]) for a, b in zip(starts, starts[1:] + [len(text)])]


def null(value):
    """Slurm's ways of saying 'nothing' -> None."""
    if value is None or value in ("", "(null)", "None", "Unknown", "N/A", "n/a", "NONE"):
        return None
    return value


def normalize_state(text):
    """'CANCELLED by 0', 'CANCELLED+', 'OOM', 'CD' -> the state's Slurm name."""
    word = (text or "").strip().split(" ")[0].rstrip("+").upper()
    word = STATE_ALIASES.get(word, word)
    return word if word in JOB_STATES else (word or "UNKNOWN")


def is_active(state):
    return normalize_state(state) in ACTIVE_STATES


def parse_duration(text):
    """Slurm durations ([D-]HH:MM:SS, MM:SS, MM) -> seconds; None for UNLIMITED/unknown."""
    text = null(text)
    if text is None or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
    parts = [float(p) for p in text.split(":")]
    if len(parts) == 1:
        seconds = parts[0] * 60
    else:
        seconds = 0
        for part in parts:
            seconds = seconds * 60 + part
    return int(days * 86400 + seconds)


def parse_exit_code(text):
    """'2:0' -> (2, 0): the job's exit code and the signal that ended it."""
    text = null(text)
    if text is None:
        return None, None
    code, _sep, signal = text.partition(":")
    return int(code), int(signal or 0)


def expand_hostlist(text):
    """'slurm-worker-[0-2,5],n[01-03],a[1-2]b[3-4]' -> the host names, in order."""
    text = null(text)
    if text is None:
        return []
    hosts = []
    for item in _split_top_level(text):
        hosts.extend(_expand_one(item))
    return hosts


def _split_top_level(text):
    items, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise ValueError("unbalanced brackets in host list %r" % text)
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def _expand_one(item):
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    prefix, rest = item[:match.start()], item[match.end():]
    names = []
    for value in _expand_range_list(match.group(1)):
        names.extend(_expand_one(prefix + value + rest))
    return names


def _expand_range_list(text):
    values = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            low, high = part.split("-", 1)
            width = len(low) if low.startswith("0") or len(low) == len(high) else 0
            if not (low.isdigit() and high.isdigit()) or int(low) > int(high):
                raise ValueError("bad range %r in host list" % part)
            values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
        elif part:
            values.append(part)
    return values


def parse_gres(text):
    """'gpu:a100:4(S:0-1),gpu:2' -> {'gpu': {'total': 6, 'types': {'a100': 4}, 'untyped': 2}}."""
    result = {}
    for item in _split_top_level(null(text) or ""):
        item = re.sub(r"\(.*?\)$", "", item)
        fields = item.split(":")
        name = fields[0]
        count_text = fields[-1] if len(fields) > 1 else "1"
        gres_type = fields[1] if len(fields) == 3 else None
        if len(fields) == 2 and not re.match(r"^\d+[KMGT]?$", count_text):
            gres_type, count_text = count_text, "1"
        count = _count(count_text)
        entry = result.setdefault(name, dict(total=0, types={}, untyped=0))
        entry["total"] += count
        if gres_type:
            entry["types"][gres_type] = entry["types"].get(gres_type, 0) + count
        else:
            entry["untyped"] += count
    return result


def _count(text):
    match = re.match(r"^(\d+)([KMGT]?)$", text)
    if not match:
        raise ValueError("bad GRES count %r" % text)
    return int(match.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}[match.group(2)]


def parse_version(text):
    """'slurm-wlm 22.05.8' / 'slurm 23.11.1' -> '22.05.8'."""
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", text or "")
    return match.group(1) if match else None


def _split_list(value):
    value = null(value)
    return [v for v in value.split(",") if v] if value else []


def parse_nodes(text):
    """`scontrol show node -o` -> a list of node dicts."""
    nodes = []
    for rec in parse_records(text, "NodeName"):
        state = rec.get("State", "")
        nodes.append(dict(
            name=rec["NodeName"],
            state=state.split("+")[0].rstrip("*~#!%$@^-").lower(),
            state_flags=[f.lower() for f in state.split("+")[1:]],
            cpus=_int(rec.get("CPUTot")),
            cpus_allocated=_int(rec.get("CPUAlloc")),
            memory_mb=_int(rec.get("RealMemory")),
            memory_allocated_mb=_int(rec.get("AllocMem")),
            gres=parse_gres(rec.get("Gres")),
            features=_split_list(rec.get("AvailableFeatures")),
            active_features=_split_list(rec.get("ActiveFeatures")),
            partitions=_split_list(rec.get("Partitions")),
            address=null(rec.get("NodeAddr")),
            reason=null(rec.get("Reason")),
            version=null(rec.get("Version")),
        ))
    return nodes


def parse_partitions(text):
    """`scontrol show partition -o` -> a list of partition dicts."""
    parts = []
    for rec in parse_records(text, "PartitionName"):
        parts.append(dict(
            name=rec["PartitionName"],
            default=rec.get("Default") == "YES",
            state=(rec.get("State") or "").lower(),
            nodes=expand_hostlist(rec.get("Nodes")),
            nodelist=null(rec.get("Nodes")),
            total_nodes=_int(rec.get("TotalNodes")),
            total_cpus=_int(rec.get("TotalCPUs")),
            time_limit=null(rec.get("MaxTime")),
            time_limit_s=parse_duration(rec.get("MaxTime")),
            default_time=null(rec.get("DefaultTime")),
        ))
    return parts


def _int(value):
    value = null(value)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# Reasons a pending job gives when the nodes it needs are out of service: it cannot start
# until someone brings them back (or changes the job).
NODE_UNAVAILABLE_REASONS = ("ReqNodeNotAvail", "NodeDown", "Nodes_required_for_job_are_DOWN", "PartitionNodeLimit",
                            "PartitionConfig", "Nodes required for job are DOWN")


def waits_for_nodes(state, reason):
    """A pending job that waits for nodes that are down or drained (not merely busy)."""
    return state == "PENDING" and any((reason or "").startswith(r) for r in NODE_UNAVAILABLE_REASONS)


def job_from_scontrol(rec):
    """One `scontrol show job -o` record -> the job dict the modules return."""
    state = normalize_state(rec.get("JobState"))
    exit_code, signal = parse_exit_code(rec.get("ExitCode"))
    comment = null(rec.get("Comment"))
    return dict(
        job_id=rec.get("JobId"),
        name=rec.get("JobName"),
        state=state,
        active=state in ACTIVE_STATES,
        success=state == "COMPLETED",
        reason=null(rec.get("Reason")),
        exit_code=exit_code,
        signal=signal,
        partition=null(rec.get("Partition")),
        nodelist=null(rec.get("NodeList")),
        nodes=expand_hostlist(rec.get("NodeList")),
        submit_time=null(rec.get("SubmitTime")),
        start_time=null(rec.get("StartTime")),
        end_time=null(rec.get("EndTime")),
        elapsed=parse_duration(rec.get("RunTime")),
        time_limit=null(rec.get("TimeLimit")),
        restarts=_int(rec.get("Restarts")) or 0,
        num_nodes=_int((rec.get("NumNodes") or "").split("-")[0]),
        waits_for_nodes=waits_for_nodes(state, null(rec.get("Reason"))),
        stdout_path=null(rec.get("StdOut")),
        stderr_path=null(rec.get("StdErr")),
        workdir=null(rec.get("WorkDir")),
        command=null(rec.get("Command")),
        comment=comment,
        fingerprint=fingerprint_of_comment(comment),
        known=True,
        source="scontrol",
    )


def unknown_job(job_id):
    """A job the controller has forgotten and no accounting remembers."""
    return dict(job_id=str(job_id), name=None, state="UNKNOWN", active=False, success=None,
                reason="the controller no longer knows this job and no accounting is available",
                exit_code=None, signal=None, partition=None, nodelist=None, nodes=[],
                submit_time=None, start_time=None, end_time=None, elapsed=None, time_limit=None,
                restarts=0, num_nodes=None, waits_for_nodes=False, stdout_path=None, stderr_path=None, workdir=None, command=None,
                comment=None, fingerprint=None, known=False, source=None)


SQUEUE_FIELDS = ("job_id", "state", "name", "comment")
SQUEUE_FORMAT = FIELD_SEP.join(["%i", "%T", "%j", "%k"]) + RECORD_SEP


def parse_squeue(text):
    """squeue output in SQUEUE_FORMAT -> [{job_id, state, name, comment}]."""
    jobs = []
    for record in text.split(RECORD_SEP):
        record = record.lstrip("\n")
        if not record:
            continue
        fields = record.split(FIELD_SEP)
        if len(fields) != len(SQUEUE_FIELDS):
            raise ValueError("unexpected squeue record %r" % record)
        job = dict(zip(SQUEUE_FIELDS, fields))
        job["state"] = normalize_state(job["state"])
        job["comment"] = null(job["comment"])
        jobs.append(job)
    return jobs


SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "ExitCode", "Elapsed", "NodeList", "Submit",
                "Start", "End", "Partition", "Comment", "Reason")


def parse_sacct(text):
    """`sacct -X --parsable2 --noheader --delimiter=FIELD_SEP --format=SACCT_FIELDS`
    -> job dicts (Comment last but one: only Reason follows it)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        rec = dict(zip(SACCT_FIELDS, line.split(FIELD_SEP)))
        state = normalize_state(rec.get("State"))
        exit_code, signal = parse_exit_code(rec.get("ExitCode"))
        comment = null(rec.get("Comment"))
        job = unknown_job(rec["JobIDRaw"])
        job.update(name=rec.get("JobName"), state=state, active=state in ACTIVE_STATES,
                   success=state == "COMPLETED", reason=null(rec.get("Reason")),
                   exit_code=exit_code, signal=signal, partition=null(rec.get("Partition")),
                   nodelist=null(rec.get("NodeList")), nodes=expand_hostlist(rec.get("NodeList")),
                   submit_time=null(rec.get("Submit")), start_time=null(rec.get("Start")),
                   end_time=null(rec.get("End")), elapsed=parse_duration(rec.get("Elapsed")),
                   comment=comment, fingerprint=fingerprint_of_comment(comment), known=True,
                   source="sacct")
        jobs.append(job)
    return jobs


# ---------------------------------------------------------------- identity

def fingerprint(name, content, options, env, chdir):
    """What makes two submissions the same job, as 16 hex digits."""
    blob = json.dumps(dict(name=name, content=content, options=options, env=env, chdir=chdir),
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def identity_comment(fp):
    return COMMENT_PREFIX + fp


def fingerprint_of_comment(comment):
    if comment and comment.startswith(COMMENT_PREFIX):
        return comment[len(COMMENT_PREFIX):].split(" ")[0] or None
    return None


def option_argv(options):
    """{'cpus_per_task': 2, 'exclusive': True} -> ['--cpus-per-task=2', '--exclusive'].

    Raises ValueError naming every unknown, reserved or malformed key."""
    argv, errors = [], []
    for key in sorted(options or {}):
        value = options[key]
        if not isinstance(key, str) or not OPTION_NAME.match(key):
            errors.append("%r is not an option name" % (key,))
            continue
        name = key.replace("_", "-")
        if name in RESERVED_OPTIONS:
            errors.append("%s: %s" % (key, RESERVED_OPTIONS[name]))
        elif name not in SBATCH_OPTIONS:
            errors.append("%s is not an sbatch option" % key)
        elif value is True:
            argv.append("--" + name)
        elif value is False or value is None:
            continue
        elif isinstance(value, (str, int, float)):
            argv.append("--%s=%s" % (name, value))
        else:
            errors.append("%s: value must be a string, a number or true" % key)
    if errors:
        raise ValueError("; ".join(errors))
    return argv


def export_argv(export, env):
    """The --export option that passes env (given to sbatch through its own process
    environment, so values reach the job byte for byte: commas, quotes, newlines included).

    Only variable names go on the command line; Slurm takes their values from sbatch's
    environment. export is the user's own --export value, if any."""
    names = sorted(env or {})
    bad = [n for n in names if not ENV_NAME.match(n)]
    if bad:
        raise ValueError("env: %s not a valid variable name" % ", ".join(repr(b) for b in bad))
    if export is None or export == "ALL" or str(export).startswith("ALL,"):
        return ["--export=%s" % (export or "ALL")]
    if str(export) in ("NONE", "NIL"):
        return ["--export=%s" % (",".join(names) or export)]
    return ["--export=%s" % ",".join([str(export)] + names)]


def submit_argv(sbatch, name, comment, chdir, options, export, script):
    argv = [sbatch, "--parsable", "--job-name=" + name, "--comment=" + comment]
    if chdir:
        argv.append("--chdir=" + chdir)
    argv += options + export
    if script:
        argv.append(script)
    return argv


def parse_parsable(stdout):
    """`sbatch --parsable` prints 'JOBID' or 'JOBID;CLUSTER'."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";")[0]
    if not job_id.isdigit():
        raise ValueError("sbatch printed no job id: %r" % stdout)
    return job_id


# ---------------------------------------------------------------- files

def tail_lines(path, count, block=8192):
    """The last count lines of a file, read backwards from its end."""
    if count <= 0:
        return []
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        position = handle.tell()
        data = b""
        while position > 0 and data.count(b"\n") <= count:
            step = min(block, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    lines = data.decode("utf-8", "replace").splitlines()
    if position > 0:
        lines = lines[1:]  # begins mid-line
    return lines[-count:]


def last_json_records(path, count=16):
    """The complete JSON objects among the last `count` lines of a JSONL file, in file order
    (a half-written last line is skipped)."""
    records = []
    for line in tail_lines(path, count):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


RANK_PREFIX = re.compile(r"^\[(?:default)?rank(\d+)\]:\s?(.*)$")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b.*$|^[A-Za-z_][\w.]*: .*$")
ERROR_LINE = re.compile(r"(^|: )(error|Error|ERROR)[: ]|^Traceback|Error: ")
# What the other ranks report when one rank died: consequences, not the cause.
SECONDARY_ERRORS = ("Connection closed by peer", "Connection reset by peer", "remote worker crash", "Broken pipe",
                    "SignalException", "got signal:", "ProcessGroupGloo", "NCCL communicator was aborted",
                    "Socket Timeout", "Connection refused", "ChildFailedError")
TRACEBACK_START = "Traceback (most recent call last):"


# Python's lines between the tracebacks of a chained exception (the last one is the one raised).
CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")


def _rank_tracebacks(lines):
    """[(rank, index of its exception line, traceback lines)] in log order; rank is None for
    lines without torch's "[rankN]: " prefix. A chained exception is one traceback, from its
    first "Traceback" line to the exception raised last."""
    found, open_tracebacks, ended = [], {}, {}
    for index, line in enumerate(lines):
        match = RANK_PREFIX.match(line)
        rank, text = (match.group(1), match.group(2)) if match else (None, line)
        chained = None
        if rank in ended:  # (its place in found, the lines since its exception line)
            if not text.strip() or text.startswith(CHAIN_MARKERS):
                ended[rank][1].append(text)
                continue
            position, gap = ended.pop(rank)
            if any(g.startswith(CHAIN_MARKERS) for g in gap):
                chained = position, found[position][2] + gap
        if text.startswith(TRACEBACK_START):
            position, block = chained or (None, [])
            open_tracebacks[rank] = (position, block + [text])
        elif rank in open_tracebacks:
            position, block = open_tracebacks[rank]
            block.append(text)
            if text and not text[0].isspace() and EXCEPTION_LINE.match(text) and not text.startswith(CHAIN_MARKERS):
                if position is None:
                    position = len(found)
                    found.append(None)
                found[position] = (rank, index, block)
                ended[rank] = (position, [])
                del open_tracebacks[rank]
    return [(rank, index, block if len(block) <= 60 else block[:20] + ["  ..."] + block[-39:])
            for rank, index, block in found]


def log_summary(path, tail=30, errors=8):
    """What a failed job's log says, for a person: its last `tail` lines, the first `errors`
    error lines, and the traceback of the rank that failed first.

    When one rank raises, the others report lost peers ("Connection closed by peer") and the
    launcher its own traceback; the first traceback whose exception is not such a consequence
    is the cause (else the first one)."""
    with open(path, "rb") as handle:
        lines = handle.read().decode("utf-8", "replace").splitlines()
    tracebacks = _rank_tracebacks(lines)
    primary = [t for t in tracebacks if not any(s in t[2][-1] for s in SECONDARY_ERRORS)]
    cause = (primary or tracebacks or [None])[0]
    return {
        "path": path,
        "tail": lines[-tail:] if tail > 0 else [],
        "errors": [line for line in lines if ERROR_LINE.search(line)][:errors],
        "failed_rank": cause[0] if cause else None,
        "traceback": cause[2] if cause else [],
        # every traceback is a consequence: the process that failed first left none (killed,
        # out of memory, its node lost)
        "lost_peer": bool(tracebacks) and not primary,
    }


METRIC_KEYS = ("step", "total_steps", "loss", "val_loss", "lr", "tokens_per_s", "elapsed_s", "eta_s")


def progress_of(records):
    """Progress from the tail of a metrics file: the metrics of the last loss record, and the
    last record's `event` (e.g. checkpoint, preempted, done) with its step."""
    if not records:
        return None
    metrics = next((r for r in reversed(records) if "loss" in r), records[-1])
    progress = {k: metrics.get(k) for k in METRIC_KEYS}
    if progress["step"] is not None and progress["total_steps"]:
        progress["percent"] = round(100.0 * progress["step"] / progress["total_steps"], 1)
    progress["event"] = records[-1].get("event")
    progress["event_step"] = records[-1].get("step")
    return progress


def failure_message(job):
    parts = ["job %s (%s) ended %s" % (job["job_id"], job.get("name") or "?", job["state"])]
    if job.get("exit_code") is not None:
        parts.append("exit code %s" % job["exit_code"])
    if job.get("signal"):
        parts.append("signal %s" % job["signal"])
    parts.append("reason: %s" % (job.get("reason") or JOB_STATES.get(job["state"], {}).get("meaning", "unknown")))
    return ", ".join(parts)


# ---------------------------------------------------------------- commands

# What Slurm's clients print when the controller does not answer (stopped, restarting,
# overloaded): worth retrying, unlike other failures.
UNREACHABLE_MARKERS = ("Unable to contact slurm controller", "Socket timed out", "Zero Bytes were transmitted",
                       "Connection refused", "Connection reset", "Communication connection failure",
                       "Slurm backup controller in standby mode")


class ControllerUnreachable(SlurmError):
    """The Slurm controller did not answer; the jobs themselves are unaffected."""


def slurm_error(argv, rc, out, err):
    text = (err or out).strip()
    cls = ControllerUnreachable if any(m in text for m in UNREACHABLE_MARKERS) else SlurmError
    return cls("%s failed (rc %d): %s" % (show_argv(argv), rc, text))


class Slurm:
    """Slurm client commands through module.run_command, argv lists only."""

    def __init__(self, module):
        self.module = module
        self._bins = {}
        self._sacct = None

    def bin(self, name, required=True):
        if name not in self._bins:
            self._bins[name] = self.module.get_bin_path(name, required=False)
        if required and not self._bins[name]:
            raise SlurmError("%s not found on PATH (%s): is the Slurm client installed on this host?"
                             % (name, os.environ.get("PATH", "")))
        return self._bins[name]

    def run(self, argv, ok_rcs=(0,), **kwargs):
        rc, out, err = self.module.run_command(argv, **kwargs)
        if rc not in ok_rcs:
            raise slurm_error(argv, rc, out, err)
        return rc, out, err

    def user(self):
        return pwd.getpwuid(os.getuid()).pw_name

    def jobs_of_user(self):
        """Every job of this user the controller still knows, any state."""
        _rc, out, _err = self.run([self.bin("squeue"), "--noheader", "--states=all", "--user=" + self.user(),
                                  "--format=" + SQUEUE_FORMAT])
        return parse_squeue(out)

    def show_job(self, job_id):
        """scontrol's view of one job, sacct's when the controller forgot it, else unknown."""
        rc, out, err = self.run([self.bin("scontrol"), "show", "job", "-o", str(job_id)], ok_rcs=(0, 1))
        if rc == 0 and out.strip():
            records = parse_records(out, "JobId")
            if records:
                return job_from_scontrol(records[0])
        elif "Invalid job id" not in (err + out):
            raise slurm_error(["scontrol", "show", "job", "-o", str(job_id)], rc, out, err)
        return self.sacct_job(job_id) or unknown_job(job_id)

    def nodes(self):
        """`scontrol show node -o` as parse_nodes gives it."""
        return parse_nodes(self.run([self.bin("scontrol"), "show", "node", "-o"])[1])

    def sacct_available(self):
        if self._sacct is None:
            self._sacct = bool(self.bin("sacct", required=False))
        return self._sacct

    def sacct(self, *selection):
        """sacct rows, or None when this cluster keeps no accounting."""
        if not self.sacct_available():
            return None
        rc, out, err = self.module.run_command(
            [self.bin("sacct"), "-X", "--noheader", "--parsable2", "--delimiter=" + FIELD_SEP,
             "--format=" + ",".join(SACCT_FIELDS)] + list(selection))
        if rc != 0:
            self._sacct = False  # accounting disabled or slurmdbd down: scontrol/squeue only
            return None
        return parse_sacct(out)

    def sacct_job(self, job_id):
        rows = self.sacct("--jobs=%s" % job_id)
        return rows[0] if rows else None

    def cancel(self, job_ids):
        self.run([self.bin("scancel")] + [str(j) for j in job_ids])

    def wait(self, job_id, timeout, interval, clock=None, sleep=None):
        """Poll the job (one query per interval) until it leaves the active states.
        Returns (job, timed_out)."""
        clock, sleep = clock or time.monotonic, sleep or time.sleep
        deadline = clock() + timeout
        while True:
            started = clock()
            job = self.show_job(job_id)
            if not job["active"]:
                return job, False
            if clock() >= deadline:
                return job, True
            sleep(max(0.0, interval - (clock() - started)))
