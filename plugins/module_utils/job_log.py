# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job's output, for a person: its last lines, its error lines, the traceback of the
rank that failed first, and one line that says how the job ended."""

from __future__ import annotations

import os
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm_parse import JOB_STATES


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


def output_tail(job, count):
    """The last count lines of a job's output file, and of its error file when separate."""
    lines = []
    paths = [job.get("stdout_path"), job.get("stderr_path")]
    for path in dict.fromkeys(p for p in paths if p):
        try:
            lines += tail_lines(path, count)
        except (IOError, OSError) as err:
            lines.append("(cannot read %s: %s)" % (path, err))
    return lines


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


def failure_message(job):
    parts = ["job %s (%s) ended %s" % (job["job_id"], job.get("name") or "?", job["state"])]
    if job.get("exit_code") is not None:
        parts.append("exit code %s" % job["exit_code"])
    if job.get("signal"):
        parts.append("signal %s" % job["signal"])
    parts.append("reason: %s" % (job.get("reason") or JOB_STATES.get(job["state"], {}).get("meaning", "unknown")))
    return ", ".join(parts)
