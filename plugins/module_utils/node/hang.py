# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hang detection inside the training job: a rank that stops making progress (a deadlocked
collective, a GPU that stops answering, a process stopped by the kernel) leaves every other rank
waiting in its collective, silent, until the process group's timeout (10 minutes for NCCL, 30 for
Gloo) or the time limit. The training job script starts a watcher beside its training step:

    python -m llmtrain_node.hang watch --pid SRUN_PID --progress FILE [--progress FILE ...]
        [--event-dir DIR ...] [--progress-tag TAG] --timeout auto|SECONDS --policy requeue|fail|warn --out-dir DIR [--bad-nodes-file FILE]
        [--requeue-max N] [--restarts-in-job N] [--record-pattern REGEX ...] [--poll S] [--python P]
        [-- WORDS BEFORE THE DUMP'S COMMAND]

Progress is a change of any --progress file (the metrics file, the job's log), or a new loss
record in the newest TensorBoard event file under an --event-dir (a script's own, written since
this start began; --progress-tag, pretrain_progress_tag, names the loss). The clock starts
at this start's first training record (a metrics record with a step and a loss, a log line
that a --record-pattern, pretrain_progress_regex, or else a known trainer's pattern matches, or
such a loss record): the
start-up, however long and whatever it prints, is never a hang; nor is a restart inside the job
(--restarts-in-job N: a silence over the timeout is a hang only when the batch node's ranks are
still the same processes RESTART_GRACE_S later; where torch.distributed.run replaced them, the
clock waits for their first record again). From then on, silence longer than the timeout is a
hang (auto: AUTO_FACTOR times the median interval between the last changes, at least
AUTO_FLOOR_S). The watcher then finds where, inside the job's own allocation (a step with
--overlap, never a new job): one task per node runs

    python -m llmtrain_node.hang dump --out-dir DIR

which writes DIR/<node>.json (each rank's process state, wchan, and its main thread's Python stack
from py-spy, when py-spy is beside the Python or on the path) and DIR/<node>.txt (py-spy's dumps).
judge() names the node of a rank that is stopped, in uninterruptible sleep, gone, or not in the
frame the other ranks wait in; DIR/summary.json holds the verdict. Then the policy: requeue (the
named nodes go to the bad-nodes file and the job asks Slurm to requeue it held, as the node check
does: the watcher excludes them and releases it; with no node named, a plain requeue), fail (the
training step is ended and the job exits HANG) or warn (said; the watch goes on).

It imports nothing from Ansible: it runs on the nodes as part of the llmtrain_node package.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

from . import bad_nodes, event_files, slurm_job
from .exit_codes import code
from .node_check import read_json, write_json
from .untrusted import METRICS_RECORD_MAX_BYTES, digits, record as json_record, whole
from .record_patterns import DEFAULT_PATTERNS, ESCAPES, MAX_LINE_CHARS, UNTIMED_CHARS
from .run_files import HANG_SUMMARY

AUTO_FACTOR = 10
AUTO_FLOOR_S = 300
INTERVALS = 20
DUMP_TIMEOUT_S = 30  # one rank's py-spy dump
STEP_TIMEOUT_S = 120  # the dump step on every node
FRAMES = 40
SHOWN_FRAMES = 3
# a hang's summary, where it is shown (the watch's message, the run report), names at most this
# many of its nodes, each with its first frames; the others are counted
SHOWN_NODES = 8
# with pretrain_restarts_in_job: how long after a silence over the limit the batch node's ranks
# are watched for a restart (torch.distributed.run stopping them and starting new ones) first
RESTART_GRACE_S = 60
READ_MAX_BYTES = 1 << 20  # of a file's new lines, each poll before the first training record
# a rank in one of these states does not run: T stopped, t traced, D uninterruptible sleep (a
# device or a file system that does not answer), Z exited and not reaped
STATES = {"T": "stopped (state T)", "t": "stopped by a tracer (state t)", "Z": "exited (zombie, state Z)",
          "D": "in uninterruptible sleep (state D%s): a device or file system that does not answer"}


def now_stamp():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def say(text):
    sys.stdout.write("llmtrain: hang: %s\n" % text)
    sys.stdout.flush()


# ---------------------------------------------------------------- the watch


def is_loss_record(record):
    """Whether a metrics record is a training step's: an integer step and a loss."""
    return isinstance(record, dict) and isinstance(record.get("step"), int) and "loss" in record


class NewLines(object):
    """The lines a file gains from the size it had when the watch began (a requeued job's log
    holds its earlier starts), a bounded read each time: at most READ_MAX_BYTES, the newest."""

    def __init__(self, path):
        self.path, self.partial = path, ""
        try:
            self.offset = os.stat(path).st_size
        except OSError:
            self.offset = 0

    def read(self):
        try:
            with open(self.path, "rb") as handle:
                end = handle.seek(0, os.SEEK_END)
                if end < self.offset:  # the file was started again
                    self.offset, self.partial = 0, ""
                start = max(self.offset, end - READ_MAX_BYTES)
                if start > self.offset:
                    self.partial = ""  # the lines between are skipped: the newest ones say enough
                handle.seek(start)
                text = handle.read(end - start).decode("utf-8", "replace")
        except OSError:
            return []
        self.offset = end
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()[-MAX_LINE_CHARS:]
        return lines


class Records(object):
    """Whether a line is a training record: a JSON record with an integer step and a loss (the
    metrics file), or a line one of the patterns matches (pretrain_progress_regex, else the
    public trainers' record_patterns.DEFAULT_PATTERNS). A pattern of your own sees the first
    UNTIMED_CHARS of a line (nothing can stop a search that backtracks without end); the
    built-in ones, linear in the line, MAX_LINE_CHARS."""

    def __init__(self, patterns=None):
        self.own = bool(patterns)
        self.compiled = []
        for pattern in patterns or DEFAULT_PATTERNS:
            try:
                self.compiled.append(re.compile(pattern))
            except re.error as err:
                say("pretrain_progress_regex %r is not a regular expression (%s): not used" % (pattern, err))
        self.escapes = re.compile(ESCAPES)

    def __call__(self, line):
        line = line.strip()
        if line.startswith("{\"") and is_loss_record(json_record(line, METRICS_RECORD_MAX_BYTES, nonfinite=True)):
            return True
        line = self.escapes.sub("", line[:MAX_LINE_CHARS]) if "\x1b" in line else line[:MAX_LINE_CHARS]
        if self.own:
            line = line[:UNTIMED_CHARS]
        return any(regex.search(line) for regex in self.compiled)


class EventFiles(object):
    """Progress in a script's TensorBoard event files (or Lightning metrics.csv) under dirs: a new
    loss record of the newest one written since this start began (event_files.poll, which reads
    only what they got since the last look). A new loss record is a training record too."""

    def __init__(self, dirs, tag=None, wall=time.time):
        self.dirs, self.tag, self.wall = dirs, tag, wall
        self.state, self.key, self.step = {}, None, None
        self.since = wall()

    def changed(self):
        """True when the newest loss record differs from the one seen last."""
        try:
            progress, self.state, _warnings = event_files.poll(self.dirs, self.state, self.tag, now=self.wall(),
                                                               since=self.since)
        except (OSError, ValueError):
            return False
        if progress is None:
            return False
        key = (progress["file"], progress["step"], progress["wall"])
        if key == self.key:
            return False
        self.key, self.step = key, progress["step"]
        return True

    def rearm(self):
        """The ranks started again: only a file written from now on is their progress."""
        self.since, self.key = self.wall(), None


class Silence(object):
    """Progress seen in files: changes of (size, mtime) of each, and how long since the last.
    The clock starts at the first training record of this start of the job (is_record, on the
    lines the files gained since the watch began): before it, the start-up (imports, the
    rendezvous, loading a checkpoint, compiling) may be as long and as quiet as it takes, and
    the lines it prints are no progress. From then on any change of any file is progress."""

    def __init__(self, paths, timeout, clock=time.monotonic, is_record=None, events=None):
        self.paths, self.timeout, self.clock = paths, timeout, clock
        self.is_record = is_record or Records()
        self.events = events  # EventFiles, or None
        self.seen = {path: self._stat(path) for path in paths}
        self.unread = {path: NewLines(path) for path in paths}  # until the first record
        self.waiting = True  # for this start's first training record
        self.began = clock()
        self.last = None  # no progress yet: this start has logged no training record
        self.intervals = []

    @staticmethod
    def _stat(path):
        try:
            info = os.stat(path)
        except OSError:
            return None
        return (info.st_size, info.st_mtime_ns)

    def look(self):
        """Records a change of any file as progress, once a training record came; True when
        there was one."""
        changed = []
        for path in self.paths:
            state = self._stat(path)
            if state != self.seen[path]:
                self.seen[path] = state
                changed.append(path)
        events = self.events is not None and self.events.changed()
        if not changed and not events:
            return False
        if self.waiting:
            found = events
            for path in changed:
                found = any(self.is_record(line) for line in self.unread[path].read()) or found
            if not found:
                return False
            self.unread, self.waiting = {}, False
        at = self.clock()
        if self.last is not None:
            self.intervals = (self.intervals + [at - self.last])[-INTERVALS:]
        self.last = at
        return True

    def rearm(self):
        """The ranks started again (torch.distributed.run restarted them inside the job): what
        follows is a start-up again, so the clock waits for their first training record."""
        self.unread = {path: NewLines(path) for path in self.paths}
        self.seen = {path: self._stat(path) for path in self.paths}
        self.began, self.last, self.waiting = self.clock(), None, True
        if self.events is not None:
            self.events.rearm()

    def waiting_s(self):
        """Seconds the watch has waited for this start's first training record; None after it."""
        return self.clock() - self.began if self.waiting else None

    def rebase(self):
        """What the files hold now is no progress (the watch's own lines in the job's log)."""
        self.seen = {path: self._stat(path) for path in self.paths}
        for reader in self.unread.values():
            reader.read()
        if self.events is not None:
            self.events.changed()  # what they hold now is seen

    def limit(self):
        """The silence that is a hang, in seconds."""
        if self.timeout != "auto":
            return float(self.timeout)
        typical = statistics.median(self.intervals) if self.intervals else 0.0
        return max(float(AUTO_FLOOR_S), AUTO_FACTOR * typical)

    def silent_for(self):
        """Seconds since the last progress; None before the first."""
        return None if self.last is None else self.clock() - self.last


def last_step(path, size=8192):
    """The step of the last record of a metrics file (JSON lines), from its last bytes, or None."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, end - size))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        record = json_record(line, METRICS_RECORD_MAX_BYTES, nonfinite=True)
        if is_loss_record(record):
            return record["step"]
    return None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a child that ended and was not reaped yet is gone too
    try:
        return proc_state(pid)[0] != "Z"
    except (OSError, IndexError):
        return True


def local_rank_pids(proc="/proc"):
    """The pids of this job's ranks on this node (the batch node, where the watcher runs)."""
    found = ranks_of(os.environ.get("SLURM_JOB_ID", ""), os.environ.get("SLURMD_NODENAME"), proc=proc)
    return {pid for pid, _env in found}


class RestartGrace(object):
    """With pretrain_restarts_in_job, a silence over the limit may be torch.distributed.run
    restarting the ranks: every node's ranks wait for the failed one until their launcher stops
    them and starts new ones. Such a silence is a hang only when this node's ranks are the same
    processes RESTART_GRACE_S later; if they changed, it is a restart."""

    def __init__(self, grace_s, pids=local_rank_pids, clock=time.monotonic):
        self.grace_s, self.pids, self.clock = grace_s, pids, clock
        self.since = self.before = None

    def reset(self):
        self.since = self.before = None

    def check(self):
        """'restarted', 'wait' (within the grace, the ranks unchanged) or 'hang'."""
        now = self.pids()
        if self.since is None:
            self.since, self.before = self.clock(), now
            return "wait"
        if now != self.before:
            self.reset()
            return "restarted"
        if self.clock() - self.since < self.grace_s:
            return "wait"
        self.reset()
        return "hang"


def run_dump(args, out_dir):
    """The dump step on every node of the job (inside its allocation), bounded in time."""
    nodes = os.environ.get("SLURM_JOB_NUM_NODES", "1")
    # --overlap: beside the training step, on its CPUs; --mem=0: within the memory the training
    # step holds (a step of its own would find none left: "Memory required by task is not
    # available"); --gres=none: no GPU of its own
    argv = (["srun", "--overlap", "--mem=0", "--gres=none", "--nodes", nodes, "--ntasks", nodes, "--ntasks-per-node", "1",
             "--kill-on-bad-exit=0", "--job-name", "hang-dump"] + list(args.prefix)
            + [args.python, "-m", "llmtrain_node.hang", "dump", "--out-dir", out_dir])
    try:
        subprocess.run(argv, timeout=STEP_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        say("the stack dump did not end within %d s; judging what it wrote" % STEP_TIMEOUT_S)
    except OSError as err:
        say("the stack dump could not start: %s" % err)


def node_names():
    """The job's nodes, from Slurm's host list (scontrol expands it)."""
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", os.environ.get("SLURM_JOB_NODELIST", "")],
                             stdout=subprocess.PIPE, universal_newlines=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.split()


def read_dumps(out_dir, nodes):
    records = {}
    for node in nodes:
        record = read_json(os.path.join(out_dir, node + ".json"), {})
        if record:
            # as the dump step writes it, whatever the file holds: ranks with a state and frames of text
            ranks = record.get("ranks") if isinstance(record.get("ranks"), list) else []
            records[node] = dict(record, ranks=[
                dict(rank, state=rank.get("state") if isinstance(rank.get("state"), str) else None,
                     frames=[str(f) for f in rank["frames"]] if isinstance(rank.get("frames"), list) else [])
                for rank in ranks if isinstance(rank, dict)])
    return records


def first_frames(rank):
    return (rank.get("frames") or [])[:SHOWN_FRAMES]


def judge(records, nodes):
    """{node: reason} of the nodes where the hang is, from the dumps ({node: record}) of the
    job's nodes: a node that did not answer, one with no training process, a rank that does not
    run (STATES), else the ranks whose innermost frame is not the one most ranks wait in, when
    they are on fewer than half of the nodes. Empty when the dumps name none."""
    suspects = {}
    for node in nodes:
        record = records.get(node)
        if record is None:
            suspects[node] = "no answer to the stack dump within %d s" % STEP_TIMEOUT_S
        elif not record.get("ranks"):
            suspects[node] = "no training process of the job left on the node"
    for node, record in sorted(records.items()):
        for rank in record.get("ranks") or []:
            state = rank.get("state")
            if state in STATES:
                why = STATES[state] % (", in %s" % rank["wchan"] if rank.get("wchan") else "") if state == "D" \
                    else STATES[state]
                suspects.setdefault(node, "rank %s %s" % (rank.get("rank"), why))
    if suspects:
        return suspects
    tops = {}
    for node, record in records.items():
        for rank in record.get("ranks") or []:
            if rank.get("frames"):
                tops.setdefault(rank["frames"][0].split(" (", 1)[0], []).append((node, rank))
    if len(tops) < 2:
        return {}
    waiting = max(tops, key=lambda top: len(tops[top]))
    odd = [(node, rank, top) for top, ranks in tops.items() if top != waiting for node, rank in ranks]
    odd_nodes = set(node for node, _rank, _top in odd)
    if len(odd_nodes) * 2 >= len(nodes):
        return {}
    for node, rank, top in sorted(odd, key=lambda item: (item[0], str(item[1].get("rank")))):
        suspects.setdefault(node, "rank %s is in %s while %d other rank(s) wait in %s" % (
            rank.get("rank"), top, len(tops[waiting]), waiting))
    return suspects


def summarize(records, nodes, suspects, silent_s, limit_s, step, out_dir):
    frames = {}
    for node in suspects:
        ranks = (records.get(node) or {}).get("ranks") or []
        for rank in ranks:
            if first_frames(rank):
                frames[node] = first_frames(rank)
                break
    return dict(job_id=os.environ.get("SLURM_JOB_ID"), restart=whole(os.environ.get("SLURM_RESTART_COUNT"), 0),
                time=now_stamp(), silent_s=round(silent_s), timeout_s=round(limit_s), step=step,
                nodes=len(nodes), answered=len(records), ranks=sum(len(r.get("ranks") or []) for r in records.values()),
                suspects=suspects, frames=frames, dir=out_dir)


def act(args, summary):
    """The policy; returns the watcher's exit status (it returns only where the job goes on)."""
    suspects, restart = summary["suspects"], summary["restart"]
    job = slurm_job.own_id()  # this job alone, also as a task of an array
    if args.policy == "warn":
        say("pretrain_hang_policy=warn: the job goes on")
        return 0
    if args.policy == "requeue" and restart < args.requeue_max:
        if suspects and args.bad_nodes_file:
            bad_nodes.record(args.bad_nodes_file, {node: "hang: " + reason for node, reason in suspects.items()}, job,
                             summary["time"])
            say("requeue %d of %d without %s, held until the watcher excludes them" % (
                restart + 1, args.requeue_max, ", ".join(sorted(suspects))))
            command = ["scontrol", "requeuehold", job]
        else:
            say("requeue %d of %d (no node named: the job starts again as it is)" % (restart + 1, args.requeue_max))
            command = ["scontrol", "requeue", job]
        if subprocess.run(command, check=False).returncode == 0:
            return 0
        say("%s failed" % " ".join(command))
    elif args.policy == "requeue":
        say("run_requeue_max=%d requeues are used up" % args.requeue_max)
    # fail: the training step ends; the job script sees the marker and exits HANG
    write_json(args.marker, summary)
    say("ending the training step; the job ends with exit code %d (HANG)" % code("HANG"))
    end_training(job, args.pid)
    return 0


def end_training(job, pid):
    """Kills the job's training step (a stopped rank ignores SIGTERM): its running steps other
    than the batch, extern and dump steps; then srun (pid), should it still run."""
    try:
        out = subprocess.run(["squeue", "--steps", "--jobs", job, "--noheader", "--format=%i|%j"],
                             stdout=subprocess.PIPE, universal_newlines=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        step, _bar, name = line.strip().partition("|")
        if step.startswith(job + ".") and digits(step.rsplit(".", 1)[1]) and name != "hang-dump":
            subprocess.run(["scancel", "--signal=KILL", step], check=False)
    for _attempt in range(12):
        if not alive(pid):
            return
        time.sleep(5)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class Ended(Exception):
    """The job script ended the watch (SIGTERM): the training step is over."""


def _ended(_signum, _frame):
    raise Ended()


def watch(args):
    """Watches until the training (args.pid) ends or the job script ends the watch with SIGTERM
    once it did; then looks once more, so that a step which logged its first records and ended
    between two looks still says so."""
    events = EventFiles(args.event_dir, args.progress_tag) if args.event_dir else None
    silence = Silence(args.progress, args.timeout, is_record=Records(args.record_pattern), events=events)
    previous = signal.signal(signal.SIGTERM, _ended)
    try:
        try:
            watch_until_the_end(args, silence, events)
        except Ended:
            pass
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        waiting = silence.waiting_s()
        if waiting is not None and silence.look():
            say("the first training record of this start came after %d s; the training step ended before the hang "
                "watch's next look" % waiting)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def watch_until_the_end(args, silence, events):
    metrics = args.progress[0] if args.progress else None
    reported = waited = False
    grace = RestartGrace(RESTART_GRACE_S) if args.restarts_in_job > 0 else None
    while alive(args.pid):
        time.sleep(args.poll)
        waiting = silence.waiting_s()
        if silence.look():
            reported = False
            if grace is not None:
                grace.reset()
            if waiting is not None:
                say("the first training record of this start came after %d s: the hang watch is on (pretrain_hang_timeout "
                    "%s)" % (waiting, args.timeout))
                silence.rebase()
            continue
        silent, limit, waiting = silence.silent_for(), silence.limit(), silence.waiting_s()
        if not waited and waiting is not None and waiting > 2 * max(limit, AUTO_FLOOR_S):
            waited = True
            say("no training record yet after %d s (a record with a step and a loss in %s, or a line of the job's log "
                "that pretrain_progress_regex or a known trainer's pattern matches%s): the hang watch starts at the first"
                % (waiting, metrics, ", or a loss in the TensorBoard event files under %s" % ", ".join(args.event_dir)
                   if args.event_dir else ""))
            silence.rebase()
        if silent is None or silent <= limit or reported:
            continue
        if grace is not None:
            verdict = grace.check()
            if verdict == "wait":
                continue
            if verdict == "restarted":
                say("no progress for %d s, and torch.distributed.run restarted the ranks (pretrain_restarts_in_job): "
                    "their start-up is no hang; the hang watch waits for their first training record" % silent)
                silence.rearm()
                waited = False
                continue
        reported = True
        step = last_step(metrics) if metrics else None
        step = events.step if step is None and events is not None else step
        start = whole(os.environ.get("SLURM_RESTART_COUNT"), 0) + 1
        out_dir = os.path.join(args.out_dir, "%s-%d" % (os.environ.get("SLURM_JOB_ID", "job"), start))
        os.makedirs(out_dir, exist_ok=True)
        say("no progress for %d s (pretrain_hang_timeout %s: %d s)%s; dumping every rank's stack into %s" % (
            silent, args.timeout, limit, " after step %d" % step if step is not None else "", out_dir))
        nodes = node_names()
        run_dump(args, out_dir)
        records = read_dumps(out_dir, nodes)
        suspects = judge(records, nodes)
        summary = summarize(records, nodes, suspects, silent, limit, step, out_dir)
        write_json(os.path.join(out_dir, HANG_SUMMARY), summary)
        if not suspects:
            say("the stacks name no node: every rank runs, in the same frame (%s)" % out_dir)
        for node, reason in sorted(suspects.items()):
            say("%s: %s" % (node, reason))
            for frame in summary["frames"].get(node, []):
                say("%s:     %s" % (node, frame))
        act(args, summary)
        silence.rebase()


# ---------------------------------------------------------------- the dump, on each node


def environ_of(pid, proc="/proc"):
    with open("%s/%d/environ" % (proc, pid), "rb") as handle:
        pairs = handle.read().split(b"\0")
    return dict(p.decode("utf-8", "replace").split("=", 1) for p in pairs if b"=" in p)


def proc_state(pid):
    """(state letter, wchan) of a process."""
    with open("/proc/%d/stat" % pid) as handle:
        state = handle.read().rsplit(")", 1)[1].split()[0]
    try:
        with open("/proc/%d/wchan" % pid) as handle:
            wchan = handle.read().strip()
    except OSError:
        wchan = ""
    return state, ("" if wchan in ("0", "") else wchan)


def ranks_of(job_id, node=None, uid=None, proc="/proc"):
    """[(pid, environment)] of this job's training processes on this node: this user's
    processes whose environment has the job's SLURM_JOB_ID and a RANK and LOCAL_RANK (what
    torch.distributed.run gives its workers), and this node's SLURMD_NODENAME where it has one
    (nodes that share one process table, as the local cluster's do, see each other's)."""
    uid = os.getuid() if uid is None else uid
    found = []
    for name in os.listdir(proc):
        if not digits(name):
            continue
        pid = int(name)
        try:
            if os.stat("%s/%s" % (proc, name)).st_uid != uid:
                continue
            env = environ_of(pid, proc)
        except (OSError, ValueError):
            continue
        if env.get("SLURM_JOB_ID") == job_id and "RANK" in env and "LOCAL_RANK" in env \
                and (node is None or env.get("SLURMD_NODENAME", node) == node):
            found.append((pid, env))
    return sorted(found, key=lambda item: whole(item[1].get("RANK"), 0))


def py_spy():
    """py-spy beside this Python (the run's venv) or on the path, or None."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def main_thread_frames(text, pid=None):
    """The frames of a py-spy dump's main thread (the thread whose id is the process's, else the
    first), innermost first."""
    threads, frames = [], None
    for line in text.splitlines():
        if line.startswith("Thread "):
            frames = []
            threads.append((line.split()[1], frames))
        elif frames is not None and line.startswith("    ") and line.strip():
            frames.append(line.strip())
    chosen = [f for tid, f in threads if pid is not None and tid == str(pid)] or [f for _tid, f in threads[:1]]
    return chosen[0][:FRAMES] if chosen else []


def dump(args):
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    spy = py_spy()
    ranks, texts = [], []
    for pid, env in ranks_of(os.environ.get("SLURM_JOB_ID", ""), node):
        rank = dict(pid=pid, rank=whole(env.get("RANK"), 0), local_rank=whole(env.get("LOCAL_RANK"), 0))
        try:
            rank["state"], rank["wchan"] = proc_state(pid)
        except (OSError, IndexError):
            rank["state"] = "gone"
        if spy is None:
            rank["error"] = ("py-spy is not beside %s nor on the path: add py-spy to the run's Python "
                             "(deploy_venv_packages) for the stacks" % sys.executable)
        elif rank["state"] != "gone":
            try:
                done = subprocess.run([spy, "dump", "--nonblocking", "--pid", str(pid)], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, universal_newlines=True, timeout=DUMP_TIMEOUT_S,
                                      check=False)
                texts.append("== rank %d, pid %d, state %s\n%s" % (rank["rank"], pid, rank["state"], done.stdout))
                rank["frames"] = main_thread_frames(done.stdout, pid)
                if done.returncode != 0:
                    said = done.stdout.strip().splitlines()
                    rank["error"] = said[-1] if said else "py-spy ended with exit code %d" % done.returncode
            except subprocess.TimeoutExpired:
                rank["error"] = "py-spy did not answer within %d s" % DUMP_TIMEOUT_S
        ranks.append(rank)
    with open(os.path.join(args.out_dir, node + ".txt"), "w") as handle:
        handle.write("\n".join(texts))
    write_json(os.path.join(args.out_dir, node + ".json"), dict(node=node, time=now_stamp(), ranks=ranks))
    return 0


def timeout_value(text):
    if text == "auto":
        return text
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("a number of seconds above 0, or auto")
    return value


def parser():
    top = argparse.ArgumentParser(prog="python -m llmtrain_node.hang")
    commands = top.add_subparsers(dest="command", required=True)
    w = commands.add_parser("watch")
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--progress", action="append", default=[])
    w.add_argument("--record-pattern", action="append", default=[])
    w.add_argument("--event-dir", action="append", default=[])
    w.add_argument("--progress-tag")
    w.add_argument("--timeout", type=timeout_value, default="auto")
    w.add_argument("--policy", choices=("requeue", "fail", "warn"), default="requeue")
    w.add_argument("--out-dir", required=True)
    w.add_argument("--marker", required=True)
    w.add_argument("--bad-nodes-file")
    w.add_argument("--requeue-max", type=int, default=0)
    w.add_argument("--restarts-in-job", type=int, default=0)
    w.add_argument("--poll", type=float, default=5.0)
    w.add_argument("--python", default=sys.executable)
    w.add_argument("prefix", nargs="*")
    d = commands.add_parser("dump")
    d.add_argument("--out-dir", required=True)
    return top


def main(argv=None):
    # the stop notice (SIGUSR2) reaches every process of the job: it is the training's, not ours
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    args = parser().parse_args(argv)
    return watch(args) if args.command == "watch" else dump(args)


if __name__ == "__main__":
    raise SystemExit(main())
