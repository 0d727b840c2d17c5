# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Slurm's clients print, as plain data: scontrol/squeue/sacct records, job states,
host lists, GRES, and whether a node can run a job step.

Parsers take the text a Slurm 22.05+ client prints and return plain data, so unit tests
call them directly on recorded output.
"""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.sbatch_argv import fingerprint_of_comment

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

# A key of `scontrol show -o` output: word characters plus the few separators Slurm uses
# in key names (AllocNode:Sid, CPUs/Task, NtasksPerN:B:S:C), after a space, before '='.
KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*(?:[:/][A-Za-z0-9_]+)*)=")

FIELD_SEP = "\x1f"
RECORD_SEP = "\x1e"


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


# a part of a duration: ASCII digits, with a fraction where sacct prints one (TotalCPU's MM:SS.mmm)
DURATION_PART = re.compile(r"[0-9]{1,9}(?:[.][0-9]{1,9})?\Z")


def parse_duration(text):
    """Slurm durations ([D-]HH:MM:SS, MM:SS, MM, D-HH, D-HH:MM) -> seconds; None for UNLIMITED and
    for what is no duration (INVALID, other scripts' digits)."""
    text = null(text)
    if text is None or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, dash, clock = text.rpartition("-")
    parts = clock.split(":")
    if (dash and not (untrusted.digits(days) and len(days) <= 9)) or len(parts) > 3 \
            or not all(DURATION_PART.match(part) for part in parts):
        return None
    numbers = [float(part) for part in parts]
    if dash:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = numbers + [0.0] * (3 - len(numbers))
    elif len(numbers) == 1:  # MM
        hours, minutes, seconds = 0.0, numbers[0], 0.0
    else:  # [HH:]MM:SS
        hours, minutes, seconds = [0.0] * (3 - len(numbers)) + numbers
    return int(int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds)


def parse_exit_code(text):
    """'2:0' -> (2, 0): the job's exit code and the signal that ended it; (None, None) where Slurm
    says none, or what it says is no such pair of ASCII numbers."""
    code, _sep, signal = (null(text) or "").partition(":")
    code, signal = untrusted.whole(code), untrusted.whole(signal or "0")
    return (code, signal) if code is not None and signal is not None else (None, None)


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
            if not (untrusted.digits(low) and untrusted.digits(high)) or int(low) > int(high):
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
        if len(fields) == 2 and not re.match(r"^[0-9]+[KMGT]?$", count_text):
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
    match = re.match(r"^([0-9]+)([KMGT]?)$", text)
    if not match:
        raise ValueError("bad GRES count %r" % text)
    return int(match.group(1)) * {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}[match.group(2)]


def parse_version(text):
    """'slurm-wlm 22.05.8' / 'slurm 23.11.1' -> '22.05.8'."""
    match = re.search(r"([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text or "")
    return match.group(1) if match else None


def _split_list(value):
    value = null(value)
    return [v for v in value.split(",") if v] if value else []


def _node_state(text):
    """'IDLE+DRAIN', 'down*', 'idle~' -> (base state, [flags]), lower case; the one-character
    suffixes (not responding, powered down, ...) are left out."""
    words = (text or "").lower().split("+")
    return words[0].rstrip("*~#!%$@^-"), words[1:]


def node_state_text(node):
    """'down+not_responding: Not responding' from a node as parse_nodes gives it: its state, its
    flags, and Slurm's reason where there is one."""
    state = "+".join([node["state"]] + list(node.get("state_flags") or []))
    return state + (": %s" % node["reason"] if node.get("reason") else "")


def parse_nodes(text):
    """`scontrol show node -o` -> a list of node dicts."""
    nodes = []
    for rec in parse_records(text, "NodeName"):
        state, flags = _node_state(rec.get("State"))
        nodes.append(dict(
            name=rec["NodeName"],
            state=state,
            state_flags=flags,
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


def parse_reservations(text):
    """`scontrol show reservation -o` -> a list of reservation dicts ("No reservations in the
    system" is none)."""
    found = []
    for rec in parse_records(text, "ReservationName"):
        found.append(dict(
            name=rec["ReservationName"],
            state=(rec.get("State") or "").lower(),
            start_time=null(rec.get("StartTime")),
            end_time=null(rec.get("EndTime")),
            nodes=expand_hostlist(rec.get("Nodes")),
            node_count=_int(rec.get("NodeCnt")),
            partition=null(rec.get("PartitionName")),
            features=null(rec.get("Features")),
            flags=_split_list(rec.get("Flags")),
            users=_split_list(rec.get("Users")),
            accounts=_split_list(rec.get("Accounts")),
        ))
    return found


# sacctmgr -nP show assoc: account|partition|qos (QoS names joined by commas)
ASSOC_FORMAT = "account,partition,qos"
# What sacctmgr prints where the cluster keeps no accounting (AccountingStorageType=accounting_storage/none)
NO_ACCOUNTING_MARKER = "not running a supported accounting_storage plugin"


def parse_associations(text):
    """`sacctmgr --noheader --parsable2 show assoc format=account,partition,qos` -> [{account,
    partition (None for any), qos: [names]}]."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = (line.split("|") + ["", "", ""])[:3]
        found.append(dict(account=fields[0] or None, partition=fields[1] or None,
                          qos=[q for q in fields[2].split(",") if q]))
    return found


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
    return untrusted.whole(null(value))


# Reasons a pending job gives when the nodes it needs are out of service: it cannot start
# until someone brings them back (or changes the job).
NODE_UNAVAILABLE_REASONS = ("ReqNodeNotAvail", "NodeDown", "Nodes_required_for_job_are_DOWN", "PartitionNodeLimit",
                            "PartitionConfig", "Nodes required for job are DOWN")


def waits_for_nodes(state, reason):
    """A pending job that waits for nodes that are down or drained (not merely busy)."""
    return state == "PENDING" and any((reason or "").startswith(r) for r in NODE_UNAVAILABLE_REASONS)


# The job record every Slurm module returns (sbatch's and slurm_job_info's jobs[], the done
# record's source): field -> (its types, its value for a job nobody knows, what it holds).
# job_record() makes one and nothing else does; a field not listed here is refused.
_TEXT, _INT, _BOOL = (str, type(None)), (int, type(None)), (bool, type(None))
JOB_FIELDS = dict(
    job_id=(_TEXT, None, "the job id (JOBID_TASK for an array's task)"),
    name=(_TEXT, None, "the job's name"),
    state=((str,), "UNKNOWN", "Slurm's state, normalised (UNKNOWN for a job nobody knows any more)"),
    active=((bool,), False, "pending, running or requeued: not ended"),
    success=(_BOOL, None, "COMPLETED (None where unknown)"),
    reason=(_TEXT, None, "Slurm's reason, or ours where Slurm has none"),
    exit_code=(_INT, None, "the batch script's exit code"),
    signal=(_INT, None, "the signal that ended it"),
    partition=(_TEXT, None, "its partition"),
    nodelist=(_TEXT, None, "its nodes as a Slurm host list"),
    nodes=((list,), (), "its nodes, expanded"),
    excluded_nodes=((list,), (), "the nodes it may not run on, expanded"),
    submit_time=(_TEXT, None, "when it was submitted"),
    start_time=(_TEXT, None, "when it started (or is expected to)"),
    end_time=(_TEXT, None, "when it ended"),
    elapsed=(_INT, None, "seconds it ran"),
    time_limit=(_TEXT, None, "its time limit"),
    restarts=((int,), 0, "how many times it was requeued"),
    num_nodes=(_INT, None, "how many nodes it asks for"),
    waits_for_nodes=((bool,), False, "pending for nodes that are down or drained"),
    dependency=(_TEXT, None, "the jobs it still waits for, as Slurm says (afterok:108(unfulfilled))"),
    stdout_path=(_TEXT, None, "its output file"),
    stderr_path=(_TEXT, None, "its error file"),
    workdir=(_TEXT, None, "its working directory"),
    command=(_TEXT, None, "its batch script"),
    comment=(_TEXT, None, "its comment (where llmtrain.slurm.sbatch keeps the job's fingerprint)"),
    fingerprint=(_TEXT, None, "the fingerprint in its comment"),
    known=((bool,), False, "a controller or accounting knows it"),
    source=(_TEXT, None, "scontrol, sacct, or None"),
)


def job_record(job_id, **fields):
    """A job record (JOB_FIELDS): the fields given, the others at their defaults (a job nobody knows)."""
    unknown = set(fields) - set(JOB_FIELDS)
    if unknown:
        raise TypeError("job_record: no such field %s" % ", ".join(sorted(unknown)))
    record = dict((key, default) for key, (_types, default, _meaning) in JOB_FIELDS.items())
    record.update(fields, job_id=None if job_id is None else str(job_id))
    record["nodes"], record["excluded_nodes"] = list(record["nodes"]), list(record["excluded_nodes"])
    return record


def job_from_scontrol(rec):
    """One `scontrol show job -o` record -> the job record the modules return."""
    state = normalize_state(rec.get("JobState"))
    exit_code, signal = parse_exit_code(rec.get("ExitCode"))
    comment = null(rec.get("Comment"))
    return job_record(
        rec.get("JobId"),
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
        excluded_nodes=expand_hostlist(null(rec.get("ExcNodeList"))),
        submit_time=null(rec.get("SubmitTime")),
        start_time=null(rec.get("StartTime")),
        end_time=null(rec.get("EndTime")),
        elapsed=parse_duration(rec.get("RunTime")),
        time_limit=null(rec.get("TimeLimit")),
        restarts=_int(rec.get("Restarts")) or 0,
        num_nodes=_int((rec.get("NumNodes") or "").split("-")[0]),
        waits_for_nodes=waits_for_nodes(state, null(rec.get("Reason"))),
        dependency=null(rec.get("Dependency")),
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
    return job_record(job_id, reason="the controller no longer knows this job and no accounting is available")


SQUEUE_FIELDS = ("job_id", "state", "name", "comment")
SQUEUE_FORMAT = FIELD_SEP.join(["%i", "%T", "%j", "%k"]) + RECORD_SEP
# what the status playbook shows of each job: why it waits, its nodes, when it may start, the jobs
# it waits for (%E: the dependencies not yet satisfied)
QUEUE_FIELDS = ("job_id", "state", "name", "reason", "num_nodes", "nodelist", "start_time", "dependency")
QUEUE_FORMAT = FIELD_SEP.join(["%i", "%T", "%j", "%r", "%D", "%N", "%S", "%E"]) + RECORD_SEP
# Slurm's reasons of a job that waits for others: still waiting, or never to start (one of them failed)
DEPENDENCY_REASONS = ("Dependency", "DependencyNeverSatisfied")
DEPENDENCY_ITEM = re.compile(r"(after[a-z]*|singleton):?([0-9]+)?(?:_\*)?(?:\+[0-9]+)?(?:\(([a-z]+)\))?$")


def parse_dependency(text):
    """Slurm's remaining dependencies (squeue %E, scontrol's Dependency=), such as
    'afterok:108(unfulfilled),afterok:109(failed)' -> [{type, job_id, status}] (job_id None for
    singleton, status None where Slurm adds none); what is not such an item is left out."""
    items = []
    for word in re.split(r"[,?]", text or ""):
        match = DEPENDENCY_ITEM.match(word.strip())
        if match:
            items.append(dict(type=match.group(1), job_id=match.group(2), status=match.group(3)))
    return items


def parse_squeue(text, fields=SQUEUE_FIELDS):
    """squeue output in SQUEUE_FORMAT -> [{job_id, state, name, comment}] (QUEUE_FORMAT with
    fields=QUEUE_FIELDS); fields that say nothing ("", "(null)", "None", "N/A") are None."""
    jobs = []
    for record in text.split(RECORD_SEP):
        record = record.lstrip("\n")
        if not record:
            continue
        values = record.split(FIELD_SEP)
        if len(values) != len(fields):
            raise ValueError("unexpected squeue record %r" % record)
        job = dict(zip(fields, values))
        job["state"] = normalize_state(job["state"])
        for key in set(fields) - {"job_id", "state", "name"}:
            job[key] = null(job[key])
        if "num_nodes" in job:
            job["num_nodes"] = untrusted.whole(job["num_nodes"])
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
        job = job_record(rec["JobIDRaw"], name=rec.get("JobName"), state=state, active=state in ACTIVE_STATES,
                         success=state == "COMPLETED", reason=null(rec.get("Reason")),
                         exit_code=exit_code, signal=signal, partition=null(rec.get("Partition")),
                         nodelist=null(rec.get("NodeList")), nodes=expand_hostlist(rec.get("NodeList")),
                         submit_time=null(rec.get("Submit")), start_time=null(rec.get("Start")),
                         end_time=null(rec.get("End")), elapsed=parse_duration(rec.get("Elapsed")),
                         comment=comment, fingerprint=fingerprint_of_comment(comment), known=True,
                         source="sacct")
        jobs.append(job)
    return jobs


# Node states (base or flag, lower case) in which a node cannot run a job step: a drained
# node (idle+drain) is out of service although its base state is idle.
UNUSABLE_STATES = frozenset(["down", "drain", "drained", "draining", "fail", "failing", "future", "inval",
                             "invalid", "invalid_reg", "maint", "not_responding", "power_down",
                             "powered_down", "powering_down", "reboot_issued", "unknown"])


def usable(node):
    """Whether a node (as parse_nodes returns it) can run a job step now."""
    return not ({node["state"]} | set(node.get("state_flags", []))) & UNUSABLE_STATES


def usable_nodes(nodes, partition):
    """The nodes (as parse_nodes returns them) of partition that can run a job step now."""
    return [node for node in nodes if partition in node["partitions"] and usable(node)]


# `sinfo -p PARTITION -h -o '%D %T'`: the partition's nodes counted per state, a few lines
# whatever the cluster's size.
SINFO_STATE_FORMAT = "%D %T"


def parse_state_counts(text):
    """`sinfo -h -o '%D %T'` -> [{count, state, state_flags}], states as parse_nodes gives them
    (usable() takes each)."""
    counts = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not untrusted.digits(fields[0]):
            raise ValueError("unexpected sinfo line %r (expected '%s')" % (line, SINFO_STATE_FORMAT))
        state, flags = _node_state(fields[1])
        counts.append(dict(count=int(fields[0]), state=state, state_flags=flags))
    return counts


def usable_count(counts):
    """How many of the nodes parse_state_counts counted can run a job step now (usable_nodes's rule)."""
    return sum(c["count"] for c in counts if usable(c))


def out_of_service_nodes(nodes, partition):
    """The nodes of partition that usable_nodes leaves out."""
    return [node for node in nodes if partition in node["partitions"] and not usable(node)]


def failure_message(job):
    """One line of how a job ended (a job record of job_record()), for a person."""
    parts = ["job %s (%s) ended %s" % (job["job_id"], job.get("name") or "?", job["state"])]
    if job.get("exit_code") is not None:
        parts.append("exit code %s" % job["exit_code"])
    if job.get("signal"):
        parts.append("signal %s" % job["signal"])
    parts.append("reason: %s" % (job.get("reason") or JOB_STATES.get(job["state"], {}).get("meaning", "unknown")))
    return ", ".join(parts)
