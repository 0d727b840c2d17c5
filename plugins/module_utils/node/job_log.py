# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job's output, for a person: its last lines, its error lines, the traceback of the
rank that failed first and its node. It imports nothing from Ansible: it runs on the nodes as part
of the llmtrain_node package too (the job's failure notification, job.py)."""

from __future__ import annotations

import collections
import os
import re

from .record_patterns import MAX_LINE_CHARS


# Logs appended across requeues with NCCL_DEBUG=INFO reach gigabytes, and output without
# line breaks (progress bars, NUL runs after a crash) makes one line of any length: the tail
# comes from a bounded end of the file, the summary from the last start read in pieces, both
# in lines of bounded length.
MAX_TAIL_BYTES = 1024 * 1024
# (lines are cut to MAX_LINE_CHARS, record_patterns': what the progress patterns see of a line)
CUT = "[...]"
LINE_BREAK = re.compile(rb"\r\n|[\r\n]")
# A line break, or a run of NULs (what a crashed node leaves in a file): a NUL run ends a
# line and is no line itself.
LINE_END = re.compile(rb"\r\n|[\r\n]|\0+")
READ_BYTES = 1024 * 1024


class _Lines:
    """Raw log bytes fed in pieces -> their lines, each cut to MAX_LINE_CHARS; a line longer
    than that is never held whole."""

    def __init__(self):
        self.piece, self.cut, self.nul = b"", False, False
        self.held = b""  # a "\r" at the end of a piece, perhaps half of a "\r\n"

    def feed(self, data, last=False):
        data, self.held = self.held + data, b""
        if data.endswith(b"\r") and not last:
            data, self.held = data[:-1], b"\r"
        lines = []
        if b"\0" in data or b"\r" in data:
            begin = 0
            for match in LINE_END.finditer(data):
                self._add(data[begin:match.start()])
                self._end(lines, line_break=match.group()[:1] != b"\0")
                begin = match.end()
            data = data[begin:]
        else:  # the usual text: whole lines at C speed
            parts = data.split(b"\n")
            if len(parts) > 1:
                self._add(parts[0])
                self._end(lines, line_break=True)
                lines += [_cut(part.decode("utf-8", "replace")) for part in parts[1:-1]]
            data = parts[-1]
        self._add(data)
        if last:
            self._end(lines, line_break=False)
        return lines

    def _add(self, data):
        if not self.cut and data:
            self.piece += data
            if len(self.piece) > 4 * MAX_LINE_CHARS:  # at most 4 bytes a character
                self.piece, self.cut = self.piece[:4 * MAX_LINE_CHARS], True

    def _end(self, lines, line_break):
        """A line break ends a line, an empty one too unless a NUL run came since the last
        break; a NUL run (and the end of the file) ends a line that has text."""
        if self.piece or (line_break and not self.nul):
            text = self.piece.decode("utf-8", "replace")
            lines.append(text[:MAX_LINE_CHARS] + CUT if self.cut else _cut(text))
        self.piece, self.cut, self.nul = b"", False, not line_break


def _cut(text):
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + CUT


def _text_lines(data, mid_line=False):
    """The lines of raw log bytes; without the first one when data begins mid-line."""
    if mid_line:
        data = LINE_BREAK.split(data, maxsplit=1)[-1]
    return _Lines().feed(data, last=True)


def read_back(path, count, breaks_in, max_bytes, block):
    """(data, position, breaks): the end of the file at path, read backwards in blocks until
    it holds more than count line breaks or max_bytes; breaks_in(chunk, the chunk after it)
    counts a chunk's line breaks, and position is where data begins in the file."""
    chunks, breaks = [], 0
    with open(path, "rb") as handle:
        position = handle.seek(0, os.SEEK_END)
        start = max(0, position - max_bytes)
        while position > start and breaks <= count:
            step = min(block, position - start)
            position -= step
            handle.seek(position)
            chunk = handle.read(step)
            breaks += breaks_in(chunk, chunks[-1] if chunks else b"")
            chunks.append(chunk)
    return b"".join(reversed(chunks)), position, breaks


def _log_breaks(chunk, after):
    """A log's line breaks: \n, \r (progress bars) and \r\n, one split between two chunks once."""
    return (chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
            - (chunk.endswith(b"\r") and after.startswith(b"\n")))


def tail_lines(path, count, block=8192):
    """The last count lines of a file, read backwards from its end, at most MAX_TAIL_BYTES.
    A line that begins before those bytes starts with CUT."""
    if count <= 0:
        return []
    data, position, breaks = read_back(path, count, _log_breaks, MAX_TAIL_BYTES, block)
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


RANK_PREFIX = re.compile(r"^\[(?:default)?rank([0-9]+)\]:\s?(.*)$")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b.*$|^[A-Za-z_][\w.]*: .*$")
# an error line; Slurm 26.05 writes its own in a job's log as "[2026-12-05T06:19:51.002] error: ...",
# where 22.05 and 24.11 write "slurmstepd: error: ..."
ERROR_LINE = re.compile(r"(^|: |^\[[^\]]{1,40}\] )(error|Error|ERROR)[: ]|^Traceback|Error: ")
# Slurm's own lines of why the job or a step ended (a node failure, a time limit, a signal): kept
# among the error lines even when the ranks' lost-peer errors fill the first ones
SLURM_END_LINE = re.compile(r"error: \*\*\* |^srun: error: Node failure on ")
SLURM_END_LINES = 8
# What the other ranks report when one rank died: consequences, not the cause (Gloo's and
# NCCL's lost peers, NCCL's watchdog, the launcher's ChildFailedError).
SECONDARY_ERRORS = ("Connection closed by peer", "Connection reset by peer", "remote worker crash", "Broken pipe",
                    "SignalException", "got signal:", "ProcessGroupGloo", "NCCL communicator was aborted",
                    "Socket Timeout", "Connection refused", "ChildFailedError", "remote process exited",
                    "ncclRemoteError", "Watchdog caught collective operation timeout", "watchdog thread terminated",
                    "Timed out waiting")
TRACEBACK_START = "Traceback (most recent call last):"
TRACEBACK_LINES = 60  # a deeper traceback keeps its first 20 and last 39 lines


# Python's lines between the tracebacks of a chained exception (the last one is the one raised).
CHAIN_MARKERS = ("During handling of the above exception", "The above exception was the direct cause")
# The line the pretrain job script prints at each start: its output file is opened for
# appending, so the starts of a requeued job follow each other there.
START = re.compile(r"llmtrain: job [0-9]+ start [0-9]+ on ")
START_LINE = re.compile(rb"[\r\n](" + START.pattern.encode() + rb")")
# torch.distributed.run's failure summary (ChildFailedError): per failed process its host, then its rank.
SUMMARY_HOST = re.compile(r"^\s+host\s+: (\S+)\s*$")
SUMMARY_RANK = re.compile(r"^\s+rank\s+: ([0-9]+) \(local_rank: [0-9]+\)")
SRUN_TASK_FAILED = re.compile(r"^srun: error: ([^\s:]+): task ([0-9]+): Exited with exit code")
# How a task of the training step ended, as srun tells it ("task 1: Terminated" is a SIGTERM's), and
# torch.distributed.run's line as its launcher takes a SIGTERM once it has its handlers
SRUN_TASK_END = re.compile(r"^srun: error: [^\s:]+: tasks? [0-9,-]+: ")
SRUN_TASK_SIGTERM = re.compile(r"^srun: error: [^\s:]+: tasks? [0-9,-]+: Terminated$")
LAUNCHER_SIGTERM = re.compile(r"Received (?:Signals\.SIGTERM|15) death signal")
# Slurm ending the whole job (a cancel, its time limit): its SIGTERMs are no stray ones
SLURM_JOB_ENDED = re.compile(r"error: \*\*\* JOB [0-9]+ ON \S+ CANCELLED AT ")


def last_start(handle, block=READ_BYTES, floor=0):
    """The offset of the line the last start of a job begins with in its output file (floor when
    the log has none after floor), read backwards from the end."""
    end = handle.seek(0, os.SEEK_END)
    while end > floor:
        begin = max(floor, end - block)
        handle.seek(begin)
        # a line break before the file's first line; bytes past `end` for a start line cut there
        data = (b"\n" if begin == 0 else b"") + handle.read(end - begin + 128)
        found = list(START_LINE.finditer(data))
        if found:
            return begin + found[-1].start(1) - (1 if begin == 0 else 0)
        end = begin
    return floor


def _shorten(block):
    return block if len(block) <= TRACEBACK_LINES else block[:20] + ["  ..."] + block[-39:]


class _Tracebacks:
    """The tracebacks of a log's lines, fed in order, in bounded memory: the first whose
    exception is not a lost peer's (the cause), the first lost peer's, and how many of each.
    Torch's "[rankN]: " prefixes tell the ranks' interleaved lines apart. A chained exception
    is one traceback, from its first "Traceback" line to the exception raised last, in the
    place of its first exception line."""

    def __init__(self):
        self.open = {}    # rank -> [place, lines] of a traceback before its exception line
        self.ended = {}   # rank -> [place, kind, lines of a first, lines since] of one a chain may go on
        self.first = {}   # kind ("cause" or "lost_peer") -> (place, rank, lines)
        self.counts = {"cause": 0, "lost_peer": 0}
        self.places = 0
        self.host, self.hosts, self.srun_failed = None, {}, None

    def feed(self, line):
        match = RANK_PREFIX.match(line)
        rank, text = (match.group(1), match.group(2)) if match else (None, line)
        if rank is None:
            self._launcher(text)
        chained = None
        if rank in self.ended:
            entry = self.ended[rank]
            if not text.strip() or text.startswith(CHAIN_MARKERS):
                if len(entry[3]) < 8:  # Python prints a blank line, the chain line and a blank line
                    entry[3].append(text)
                return
            del self.ended[rank]
            if text.startswith(TRACEBACK_START) and any(g.startswith(CHAIN_MARKERS) for g in entry[3]):
                self._unsettle(rank, entry)
                chained = [entry[0], (entry[2] or ["  ..."]) + entry[3]]
        if text.startswith(TRACEBACK_START):
            self.open[rank] = chained or [None, []]
            self.open[rank][1].append(text)
        elif rank in self.open:
            place, block = self.open[rank]
            block.append(text)
            if len(block) > 2 * TRACEBACK_LINES:
                block[:] = _shorten(block)
            if text and not text[0].isspace() and EXCEPTION_LINE.match(text) and not text.startswith(CHAIN_MARKERS):
                del self.open[rank]
                if place is None:
                    place, self.places = self.places, self.places + 1
                self._settle(rank, place, _shorten(block))

    def _settle(self, rank, place, block):
        kind = "lost_peer" if any(s in block[-1] for s in SECONDARY_ERRORS) else "cause"
        self.counts[kind] += 1
        first = kind not in self.first or place < self.first[kind][0]
        if first:
            self.first[kind] = (place, rank, block)
        self.ended[rank] = [place, kind, block if first else None, []]

    def _unsettle(self, rank, entry):
        """A chained exception goes on: its kind is that of the exception raised last."""
        place, kind = entry[0], entry[1]
        self.counts[kind] -= 1
        if self.first.get(kind, (None, None))[:2] == (place, rank):
            del self.first[kind]

    def _launcher(self, text):
        """Where the failed ranks ran: the launcher's summary of the first ones, srun's first failed task."""
        host = SUMMARY_HOST.match(text)
        if host:
            self.host = host.group(1)
            return
        summary = SUMMARY_RANK.match(text)
        if summary and self.host:
            if any(summary.group(1) == first[1] for first in self.first.values()):
                self.hosts[summary.group(1)] = self.host
            self.host = None
            return
        failed = SRUN_TASK_FAILED.match(text)
        if failed and self.srun_failed is None:
            self.srun_failed = failed.group(1)

    def cause(self):
        """(rank, lines, only lost peers, node) of the rank that failed first."""
        cause = self.first.get("cause") or self.first.get("lost_peer")
        if cause is None:
            return None, [], False, self.srun_failed
        rank = cause[1]
        return rank, cause[2], "cause" not in self.first, self.hosts.get(rank) if rank else self.srun_failed


def log_summary(path, tail=30, errors=8, max_bytes=None):
    """What a failed job's log says, for a person, from the line its last start began with
    (the whole log when it has none): its last `tail` lines, the first `errors` error lines (and
    after them Slurm's own lines of why the job or a step ended, SLURM_END_LINES at most),
    the traceback of the rank that failed first, and that rank's node where the log says it.
    The log is read once, forwards, in bounded memory; with max_bytes, no more than its last max_bytes.

    When one rank raises, the others report lost peers ("Connection closed by peer", NCCL's
    watchdog) and the launcher its own traceback; the first traceback whose exception is not
    such a consequence is the cause (else the first one)."""
    last, found, start, first_end, job_ended = collections.deque(maxlen=max(tail, 0)), [], None, None, False
    tracebacks, lines = _Tracebacks(), _Lines()
    with open(path, "rb") as handle:
        floor = max(0, handle.seek(0, os.SEEK_END) - max_bytes) if max_bytes else 0
        handle.seek(last_start(handle, floor=floor))
        while True:
            data = handle.read(READ_BYTES)
            for line in lines.feed(data, last=not data):
                if start is None:
                    start = line if START.match(line) else ""
                last.append(line)
                if len(found) < errors and ERROR_LINE.search(line):
                    found.append(line)
                elif SLURM_END_LINE.search(line) and len(found) < errors + SLURM_END_LINES and ERROR_LINE.search(line):
                    found.append(line)
                tracebacks.feed(line)
                if first_end is None and (SRUN_TASK_END.match(line) or LAUNCHER_SIGTERM.search(line)) \
                        and not RANK_PREFIX.match(line):
                    first_end = line
                job_ended = job_ended or bool(SLURM_JOB_ENDED.search(line))
            if not data:
                break
    rank, traceback, lost_peer, node = tracebacks.cause()
    return {
        "path": path,
        "start": start or None,
        "tail": list(last) if tail > 0 else [],
        "errors": found,
        "failed_rank": rank,
        "node": node,
        "traceback": traceback,
        # every traceback is a consequence: the process that failed first left none (killed,
        # out of memory, its node lost)
        "lost_peer": lost_peer,
        "tracebacks": dict(tracebacks.counts),
        # the step's first task that ended, ended on a SIGTERM (srun's "Terminated", the launcher's death
        # signal) before any other ended, and Slurm did not end the job: a signal from outside, not srun
        # ending the step on a failure
        "sigterm_first": first_end if first_end and not job_ended and (
            SRUN_TASK_SIGTERM.match(first_end) or LAUNCHER_SIGTERM.search(first_end)) else None,
    }
