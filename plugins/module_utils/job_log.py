# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job's output, for a person: its last lines, its error lines, the traceback of the
rank that failed first, and one line that says how the job ended."""

from __future__ import annotations

import os
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm_parse import JOB_STATES


# Logs appended across requeues with NCCL_DEBUG=INFO reach gigabytes, and output without
# line breaks (progress bars, NUL runs after a crash) makes one line of any length: what a
# person is shown comes from a bounded end of the file, in lines of bounded length.
MAX_LOG_BYTES = 16 * 1024 * 1024
MAX_TAIL_BYTES = 1024 * 1024
MAX_LINE_CHARS = 4096
CUT = "[...]"
LINE_BREAK = re.compile(rb"\r\n|[\r\n]")


def _text_lines(data, mid_line=False):
    """The lines of raw log bytes, each cut to MAX_LINE_CHARS; without the first one when data
    begins mid-line. A run of NULs (what a crashed node leaves in a file) ends a line and is
    no line itself."""
    if mid_line:
        data = LINE_BREAK.split(data, maxsplit=1)[-1]
    lines = []
    for line in data.decode("utf-8", "replace").splitlines():
        pieces = [piece for piece in line.split("\0") if piece] if "\0" in line else [line]
        lines += [piece if len(piece) <= MAX_LINE_CHARS else piece[:MAX_LINE_CHARS] + CUT for piece in pieces]
    return lines


def tail_lines(path, count, block=8192):
    """The last count lines of a file, read backwards from its end, at most MAX_TAIL_BYTES.
    A line that begins before those bytes starts with CUT."""
    if count <= 0:
        return []
    chunks, breaks = [], 0
    with open(path, "rb") as handle:
        position = handle.seek(0, os.SEEK_END)
        start = max(0, position - MAX_TAIL_BYTES)
        while position > start and breaks <= count:
            step = min(block, position - start)
            position -= step
            handle.seek(position)
            chunk = handle.read(step)
            breaks += chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
            if chunk.endswith(b"\r") and chunks and chunks[-1].startswith(b"\n"):
                breaks -= 1  # one "\r\n" split between two chunks
            chunks.append(chunk)
    data = b"".join(reversed(chunks))
    if position > 0 and breaks <= count:
        data = CUT.encode() + data
    return _text_lines(data, mid_line=position > 0 and breaks > count)[-count:]


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
    error lines, and the traceback of the rank that failed first, from the last MAX_LOG_BYTES
    of the log.

    When one rank raises, the others report lost peers ("Connection closed by peer") and the
    launcher its own traceback; the first traceback whose exception is not such a consequence
    is the cause (else the first one)."""
    with open(path, "rb") as handle:
        start = max(0, handle.seek(0, os.SEEK_END) - MAX_LOG_BYTES)
        handle.seek(start)
        lines = _text_lines(handle.read(MAX_LOG_BYTES), mid_line=start > 0)
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
