# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The training job's own logic, run by its job script (scripts/pretrain.sbatch) on the batch node
in place of its shell, once the script has set the run's environment:

    python -m llmtrain_node.job CONFIG_JSON -- TRAINING STEP'S COMMAND (srun ... sh -c '...')

CONFIG_JSON (made by plugins/module_utils/jobs/train.py, Train.job_config): {run_dir, run_name, requeue_max, uncounted_max, done_file,
checks: [the node check's command, the network check's], script_chdir (your script's working
directory, or null), wandb_run (the W&B run id's prefix, or null), hang: null or {python: the
batch Python's command, args: the hang watch's options, prefix: the words before its dump's
command}, notify (run_notify has webhooks: env/notify.json), gpus_per_node, signal_lead
(pretrain_signal_lead: how long before its time limit the job is told to stop)}.

What it does, in order:
1. your script's working directory must exist (else EXIT_SETTING); MASTER_ADDR is the job's first
   node (else EXIT_FAILED); with W&B, every start continues one W&B run (wandb/run_id);
2. a start line in starts.jsonl (run_files.py), and at the end of the start, however it ends,
   an end line saying how; a start that finished marks the run's done record (job_end.py);
3. the checks run as steps, one after the other; a stop notice (SIGUSR2) to this process while
   they run is recorded in STOP_NOTICE, as the checks record theirs, and then stops the job
   before training: a stop asked for (playbooks/stop.yml, STOP names the job) ends it, else it
   requeues itself while run_requeue_max allows;
4. the training step runs, with the hang watch beside it; a stop notice to this process now is
   passed on to the training step; the training stopping with a checkpoint (PREEMPTED) requeues
   the job, uncounted where the SIGTERM that stopped it was not Slurm's (stray_sigterm), and so
   does a step that such a SIGTERM ended before its ranks could stop (stray_sigterm_failure);
5. a signal that ends this process (a cancel's or the time limit's SIGTERM) is named in the end line;
6. with run_notify, each of these is sent to the run's webhooks (notify.py): the start (with the
   nodes the start before had and this one lacks, and Slurm's reason for each: a lost node's
   requeue is told there), a requeue and why, a stop, a failure (the rank that failed first, its
   node, its exception's line, from the job's log), a restart of the ranks inside the job (the
   reference trainer's start line of it in starts.jsonl), the end (the last step and loss, the wall
   time and the GPU-hours of every start, from usage.json).

Every decision is here, not in the job script, so that it is tested without Slurm
(tests/unit/test_job.py runs it against fake srun, scontrol and scancel commands).
This file imports nothing from Ansible: it runs on the nodes as part of the llmtrain_node package.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from . import job_end, job_log, notify, run_files, slurm_job
from .exit_codes import code, name_of
from .untrusted import HANG_SUMMARY_MAX_BYTES, METRICS_RECORD_MAX_BYTES, Unreadable, loads, printable, read, whole

ENDING_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1")
SHOW_JOB_MAX_BYTES = 65536
# what a failure's notification reads of the job's log (its last start's lines, at most this end)
LOG_READ_MAX_BYTES = 32 << 20
# what the end's notification reads of metrics.jsonl for the last step and loss
METRICS_TAIL_BYTES = 256 << 10
# a stop notice within the signal lead (pretrain_signal_lead) and this much of the job's end time is
# the time limit's (Slurm sends it up to 60 s late)
LIMIT_NOTICE_SLACK_S = 90
# a job killed this close to (or past) its EndTime was ended by its time limit
TIME_LIMIT_SLACK_S = 30
# how often the restarts' watch looks for new lines of starts.jsonl
RESTARTS_POLL_S = 2
# how many lost nodes a notification names, with their reasons
LOST_NODES_NAMED = 8
# the job states in which a killed start is Slurm's requeue of the job (a node lost: NODE_FAIL until
# the job is requeued, as it has --requeue): the next start tells it, with the nodes lost
REQUEUE_STATES = ("PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RUNNING", "COMPLETING", "CONFIGURING",
                  "RESIZING", "SIGNALING", "STAGE_OUT", "NODE_FAIL")


def utc_now(fraction=False):
    now = time.time()
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return text + (".%09dZ" % int((now % 1) * 1e9) if fraction else "Z")


def say(text, err=False):
    stream = sys.stderr if err else sys.stdout
    stream.write("llmtrain: %s\n" % text)
    stream.flush()


def preempted(job):
    """Whether Slurm preempts a job (`scontrol show job`'s fields): it has set its PreemptTime."""
    return bool(re.match(r"[0-9]", job.get("PreemptTime", "")))


def time_left(job):
    """Seconds from now to a job's EndTime (`scontrol show job`'s fields, the controller's local time,
    which the nodes share), or None when it has none."""
    try:
        return time.mktime(time.strptime(job.get("EndTime", ""), "%Y-%m-%dT%H:%M:%S")) - time.time()
    except ValueError:
        return None


class End(Exception):
    """The job ends with exit status `status`; `how` is its end line's (None: told by the status)."""

    def __init__(self, status, how=None):
        super().__init__(status)
        self.status = status
        self.how = how


def exit_status(returncode):
    """A child's exit status as a shell tells it: 128 + N for one ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Job:
    def __init__(self, config, command, env=None):
        self.config = config
        self.command = list(command)
        self.env = os.environ if env is None else env
        self.run_dir = config["run_dir"]
        self.job_id = self.env.get("SLURM_JOB_ID", "")
        self.start = whole(self.env.get("SLURM_RESTART_COUNT"), 0) + 1
        self.how = None
        self.signal = None
        self.ending = False
        self.training = None
        self.nodes = []  # the job's nodes, as scontrol expands its node list
        self.senders = []  # the notifications' sender processes
        self.began = None  # when this start's line was written (time.time())
        self.sending = threading.Lock()
        self.trained = threading.Event()  # the training step ended (or the job ends)
        # the batch node's Python children find the llmtrain_node package first; the steps get
        # the environment the job script had (the package is first on theirs by their own means)
        self.child_env = dict(self.env)
        self.scripts = os.path.join(self.run_dir, "scripts")
        parts = self.child_env.get("PYTHONPATH", "").split(os.pathsep)
        if parts and parts[0] == self.scripts:
            parts = parts[1:]
            if any(parts):
                self.child_env["PYTHONPATH"] = os.pathsep.join(parts)
            else:
                self.child_env.pop("PYTHONPATH", None)

    def python_env(self):
        """The environment of the batch node's Python children: the package first on their path."""
        rest = self.child_env.get("PYTHONPATH")
        return dict(self.child_env, PYTHONPATH=self.scripts + (os.pathsep + rest if rest else ""))

    def file(self, name):
        return run_files.path(self.run_dir, name)

    def slurm(self, *argv):
        """A Slurm command's output ('' when it fails or is missing)."""
        try:
            return subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  stdin=subprocess.DEVNULL, env=self.child_env, check=False).stdout.decode(
                                      "utf-8", "replace")
        except OSError:
            return ""

    def hostnames(self, host_list):
        """The names scontrol expands a host list into, as printed."""
        return self.slurm("scontrol", "show", "hostnames", host_list).splitlines()

    def show(self, what, name):
        """`scontrol show <what> -o <name>`'s first lines' fields {key: value} (bounded)."""
        text = self.slurm("scontrol", "show", what, "-o", name)[:SHOW_JOB_MAX_BYTES]
        # a value runs to the next " Key=" (a node's Reason has blanks: "Not responding [slurm@...]")
        return [dict(re.findall(r"(?:^| )(\w+)=(.*?)(?= \w+=|$)", line)) for line in text.splitlines() if "=" in line]

    def notify(self, kind, wait=False, start=None, **details):
        """Sends an event of this start (or of the start given) to the run's webhooks (run_notify), in
        order after those sent before; waits for it only where asked (the training has stopped)."""
        if not self.config.get("notify"):
            return
        with self.sending:  # the restarts' watch (a thread) sends too
            notify.wait(self.senders)
            self.senders = [s for s in [notify.post(self.run_dir, notify.event_record(
                kind, self.config.get("run_name") or os.path.basename(self.run_dir), self.job_id,
                start or self.start, **details), [sys.executable], self.python_env())] if s is not None]
            if wait:
                notify.wait(self.senders)

    def watch_restarts(self, offset):
        """While the training runs (with run_notify): each restart of its ranks inside the job
        (pretrain_restarts_in_job), as the reference trainer's start or resume line of this start in
        starts.jsonl tells it (restart_in_job, failed_ranks), told once. New lines only, each poll."""
        starts = self.file(run_files.STARTS)
        told, ended = 0, False
        while not ended:
            ended = self.trained.wait(RESTARTS_POLL_S)
            lines, offset = run_files.new_lines(starts, offset)
            for line in lines:
                try:
                    record = loads(line, run_files.LINE_MAX_BYTES)
                except ValueError:
                    continue
                if not isinstance(record, dict) or record.get("event") not in ("start", "resume") or str(
                        record.get("job_id")) != self.job_id or record.get("start") != self.start:
                    continue
                restart = record.get("restart_in_job")
                if not isinstance(restart, int) or isinstance(restart, bool) or restart <= told:
                    continue
                told = restart
                failed = [f for f in record.get("failed_ranks") or [] if isinstance(f, dict)][:1] \
                    if isinstance(record.get("failed_ranks"), list) else []
                first = failed[0] if failed else {}
                rank, step = first.get("rank"), record.get("step")
                self.notify("restart", restart=restart, step=step if isinstance(step, int) else None,
                            rank=rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
                            node=notify.cut(first["node"], 64) if isinstance(first.get("node"), str) else None,
                            exception=notify.cut(first["error"]) if isinstance(first.get("error"), str) else None)

    def lost_nodes(self, left):
        """[{node, reason}] of the nodes the start before had and this one lacks, with Slurm's reason."""
        names = [n for n in self.hostnames(left) if run_files.HOST_NAME.match(n)][:LOST_NODES_NAMED]
        shown = dict((n.get("NodeName"), n) for n in self.show("node", ",".join(names))) if names else {}
        return [dict(node=n, reason=notify.cut(shown.get(n, {}).get("Reason") or shown.get(n, {}).get("State") or "",
                                               120)) for n in names]

    # -- before the start line -------------------------------------------------------------------

    def prepare(self):
        chdir = self.config.get("script_chdir")
        if chdir and not os.path.isdir(chdir):
            say("the working directory of your script, %s, is not a directory: set run_script_chdir to one that "
                "exists on the nodes (or null for the directory the script was deployed to)" % chdir, err=True)
            raise End(code("SETTING"))
        prefix = self.config.get("wandb_run")
        if prefix:
            wandb = self.file("wandb")
            os.makedirs(wandb, exist_ok=True)
            run_id_file = os.path.join(wandb, "run_id")
            run_id = run_files.head(run_id_file, 256).strip()
            if not run_id:
                run_id = "%s-%s" % (prefix, os.urandom(4).hex())
                with open(run_id_file, "w") as f:
                    f.write(run_id + "\n")
            self.child_env.update(WANDB_RUN_ID=run_id, WANDB_RESUME="allow")
        nodelist = self.env.get("SLURM_JOB_NODELIST", "")
        self.nodes = self.hostnames(nodelist)
        if not self.nodes or not self.nodes[0]:
            say("no master address: 'scontrol show hostnames %s' printed nothing" % printable(nodelist), err=True)
            raise End(code("FAILED"))
        self.child_env["MASTER_ADDR"] = self.nodes[0]
        say("job %s start %d on %s, master %s:%s" % (
            self.job_id, self.start, nodelist, self.nodes[0], self.env.get("MASTER_PORT", "")))

    def record_start(self):
        """The start line: with the nodes of the run's start before that this one lacks."""
        nodelist = self.env.get("SLURM_JOB_NODELIST", "")
        starts = self.file(run_files.STARTS)
        left = ""
        before = run_files.last_start_nodes(starts)
        if before:
            now = set(self.nodes)
            gone = [n for n in self.hostnames(before) if n not in now and run_files.HOST_NAME.match(n)]
            if gone:
                left = self.slurm("scontrol", "show", "hostlist", ",".join(gone)).strip()
                left = left if run_files.HOST_LIST.match(left) else ""
        self.began = time.time()
        run_files.append_line(starts, run_files.start_record(self.job_id, self.start, nodelist, left, utc_now(),
                                                             len(self.nodes)))
        if not self.config.get("notify"):
            return
        lost = self.lost_nodes(left) if left else []
        if self.start > 1 and notify.told(self.run_dir, self.job_id, self.start - 1) != "requeue":
            # Slurm requeued the start before (a node lost, its batch node too, an admin's requeue): it
            # could not say so itself; a failure it told may have been the ranks losing that node
            self.notify("requeue", start=self.start - 1, lost=lost, why="Slurm requeued it" + (": lost %s" % ", ".join(
                "%s (%s)" % (n["node"], n["reason"] or "no reason given") for n in lost) if lost else ""))
        self.notify("start", nodes=notify.cut(nodelist, notify.NODES_MAX_CHARS), node_count=len(self.nodes),
                    lost=lost)

    def record_end(self, status):
        """The end line, and a finished start marks the run's done record."""
        self.trained.set()
        how = self.how
        if how is None:
            how = {0: "killed", code("REQUEUED_HELD"): "requeued", code("HANG"): "hang"}.get(status, "failed")
        try:
            run_files.append_line(self.file(run_files.STARTS), run_files.end_record(
                self.job_id, self.start, how, status, utc_now(), self.signal))
        except OSError as err:
            say("cannot add the end line to %s: %s" % (self.file(run_files.STARTS), err), err=True)
        if how == "finished":
            try:
                # in a sweep's array the record names the task (<array>_<index>), as the sweep module wrote it
                why = job_end.mark(self.config["done_file"], slurm_job.own_id(self.env))
            except OSError as err:
                why = "cannot write %s: %s" % (self.config["done_file"], err)
            if why:
                say(why, err=True)
        try:
            run_files.add_usage(self.run_dir, self.job_id, self.start, self.began, time.time(), len(self.nodes),
                                int(self.config.get("gpus_per_node") or 0), run_files.job_cpus(
                                    os.environ.get("SLURM_JOB_CPUS_PER_NODE"), os.environ.get("SLURM_CPUS_ON_NODE"),
                                    len(self.nodes)))
        except OSError as err:
            say("cannot add this start's hours to %s: %s" % (self.file(run_files.USAGE), err), err=True)
        if self.config.get("notify"):
            self.notify_end(how, status)
            notify.wait(self.senders)

    # -- the notifications of a start's end (with run_notify) --------------------------------------

    def notify_end(self, how, status):
        """The notification of how this start ended, where job.py has not sent one as it decided."""
        if how == "finished":
            self.notify("end", **self.run_totals())
        elif how == "hang":
            self.notify("failure", **self.hang_details("the training hung and pretrain_hang_policy=fail ended it "
                                                       "(exit code %d); the checkpoints are intact" % status))
        elif how == "failed" and self.nodes_down():
            pass  # a node lost: Slurm requeues the job, and its next start tells it, with the node and why
        elif how == "failed":
            self.notify("failure", **self.log_details("exit code %d%s" % (
                status, " (%s: docs/exit-codes.md)" % name_of(status) if name_of(status) else "")))
        elif how == "requeued" and status == code("REQUEUED_HELD"):
            self.notify("requeue", why="a check found bad nodes (bad_nodes.json): requeued held, to start again "
                        "without them once the watch (playbooks/pretrain.yml) excludes them")
        elif how == "killed":
            job = (self.show("job", self.job_id) or [{}])[0]
            state, reason = job.get("JobState", ""), job.get("Reason", "")
            left = time_left(job)
            hang = self.hang_summary()
            if hang is not None and state in REQUEUE_STATES:
                self.notify("requeue", **self.hang_details("the training hung and the hang watch requeued the job"))
            elif state == "CANCELLED":
                self.notify("stop", why="cancelled (%s, scancel or an administrator)" % (self.signal or "a signal"))
            elif state == "TIMEOUT" or left is not None and left <= TIME_LIMIT_SLACK_S:
                self.notify("failure", why="its time limit ended it (%s) before it stopped with a checkpoint: a "
                            "larger pretrain_signal_lead gives the training the time to save one first"
                            % (self.signal or "a signal"))
            elif state not in REQUEUE_STATES:
                self.notify("failure", why="ended by %s; Slurm says %s (%s)" % (
                    self.signal or "a signal", notify.cut(state or "nothing", 40), notify.cut(reason or "-", 80)))
            # else Slurm requeues the job: its next start says so, with the nodes lost

    def nodes_down(self):
        """Whether Slurm has a node of this job down or not responding (a training step that lost a node
        ends once Slurm declared it failed, as srun waits for its task there)."""
        return bool(self.slurm("sinfo", "--noheader", "--Node", "--nodes=" + self.env.get("SLURM_JOB_NODELIST", ""),
                               "--states=down,fail,no_respond", "--format=%N").strip())

    def hang_summary(self):
        """This start's hang summary (hangs/<job>-<start>/summary.json, node/hang.py's), or None."""
        try:
            summary = read(os.path.join(self.file(run_files.HANGS), "%s-%d" % (self.job_id, self.start), run_files.HANG_SUMMARY),
                           HANG_SUMMARY_MAX_BYTES)
        except (OSError, Unreadable):
            return None
        return summary if isinstance(summary, dict) else None

    def hang_details(self, why):
        summary = self.hang_summary() or {}
        suspects = summary.get("suspects") if isinstance(summary.get("suspects"), dict) else {}
        named = sorted(suspects)[:LOST_NODES_NAMED]
        silent = summary.get("silent_s")
        if isinstance(silent, int):
            why += " after %d s without progress" % silent
        if named:
            why += "; stuck: %s" % ", ".join("%s (%s)" % (notify.cut(n, 64), notify.cut(suspects[n], 120))
                                             for n in named)
        return dict(why=why, node=notify.cut(named[0], 64) if named else None)

    def log_details(self, why):
        """The failure's rank, node and exception line, from this start's lines of the job's log."""
        details = dict(why=why)
        try:
            log = os.readlink("/proc/self/fd/1")
            if not os.path.isfile(log):
                return details
            summary = job_log.log_summary(log, tail=0, errors=0, max_bytes=LOG_READ_MAX_BYTES)
        except OSError:
            return details
        if whole(summary["failed_rank"]) is not None:
            details["rank"] = whole(summary["failed_rank"])
        if summary["node"]:
            details["node"] = notify.cut(summary["node"], 64)
        if summary["traceback"]:
            details["exception"] = notify.cut(summary["traceback"][-1])
        if summary["lost_peer"]:
            details["why"] += ("; every traceback is a lost peer's: a process or a node was lost (if Slurm finds a "
                               "node down, it requeues the job, and the next start says so)")
        return details

    def run_totals(self):
        """The end's figures: the last step and loss of metrics.jsonl, the wall time from the run's
        first start, the GPU- and node-hours of its starts (usage.json, this start's added)."""
        totals = {}
        for line in reversed(run_files.tail_lines(self.file(run_files.METRICS), METRICS_TAIL_BYTES)):
            try:
                record = loads(line, METRICS_RECORD_MAX_BYTES)
            except ValueError:
                continue
            step, loss = (record.get("step"), record.get("loss")) if isinstance(record, dict) else (None, None)
            if isinstance(step, int) and not isinstance(step, bool) and isinstance(loss, (int, float)) \
                    and not isinstance(loss, bool):
                totals.update(step=step, loss=float(loss))
                break
        used = run_files.usage_totals(run_files.read_usage(self.run_dir))
        if used:
            totals.update(wall_s=int(used["wall_s"]), gpu_hours=round(used["gpu_hours"], 3),
                          node_hours=round(used["node_hours"], 3))
        return totals

    # -- signals ---------------------------------------------------------------------------------

    def ended_by_signal(self, signum, _frame):
        """A signal that ends the job (a cancel's or the time limit's SIGTERM, a site's): named in
        the end line. How the start ends, when already decided (a requeue asked for, which Slurm
        carries out with SIGTERM), stays, with its status."""
        if self.ending or self.how is not None:
            return
        self.signal = signal.Signals(signum).name
        self.how = "killed"
        raise End(128 + signum, "killed")

    def stop_notice(self, _signum, _frame):
        """A stop notice to the batch process (scancel --full or --batch --signal=USR2, a site's
        --signal=B:USR2@<lead>): before training, recorded as the checks record theirs; during
        training, passed on to the training step."""
        if self.ending:
            return
        if self.training is not None:
            say("a stop notice (SIGUSR2) to the batch shell: passed on to the training step")
            try:
                done = subprocess.run(["scancel", "--signal=USR2", self.job_id], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, env=self.child_env, check=False).returncode == 0
            except OSError:
                done = False
            if not done:
                try:
                    os.kill(self.training.pid, signal.SIGUSR2)
                except OSError:
                    pass
        else:
            with open(self.file(run_files.STOP_NOTICE), "a") as f:
                f.write("SIGUSR2 to the batch shell at %s\n" % utc_now())

    # -- the decisions ---------------------------------------------------------------------------

    def stop_asked(self):
        """playbooks/stop.yml asked this job to stop: STOP names it by its id, or in a sweep's array by
        its task (<array>_<index>: the sweep's stop names the tasks of every member)."""
        return run_files.stop_requested(self.run_dir, self.job_id) or run_files.stop_requested(
            self.run_dir, slurm_job.own_id(self.env))

    def requeue_or_stop(self, why, uncounted=False, cause=""):
        """Stopping with a checkpoint, or before training started: stopped on request (STOP), else
        requeued while run_requeue_max allows (a requeue it does not count: uncounted_max a job),
        else ended PREEMPTED with the checkpoints intact."""
        if self.stop_asked():
            say("%s; stopped on request (playbooks/stop.yml), not requeued: playbooks/pretrain.yml resumes the run "
                "from its newest checkpoint" % why)
            self.notify("stop", why="%s; stopped on request (playbooks/stop.yml): playbooks/pretrain.yml resumes "
                        "the run from its newest checkpoint" % why)
            raise End(code("STOPPED"), "stopped")
        requeue_max, uncounted_max = int(self.config["requeue_max"]), int(self.config["uncounted_max"])
        done_uncounted = run_files.uncounted_requeues(self.run_dir, self.job_id)
        restarts = self.start - 1 - done_uncounted
        which = None
        if uncounted and done_uncounted < uncounted_max:
            with open(self.file(run_files.REQUEUES_UNCOUNTED), "a") as f:
                f.write("%s %d\n" % (self.job_id, self.start))
            which = ("requeued, not counted against run_requeue_max (%d): uncounted requeue %d of %d of this job"
                     % (requeue_max, done_uncounted + 1, uncounted_max))
        elif restarts < requeue_max:
            which = "requeue %d of %d" % (restarts + 1, requeue_max)
        if which:
            self.how = "requeued"
            say("%s; %s" % (why, which))
            self.notify("requeue", wait=True, why="%s%s; %s" % (cause, why, which))
            # this job alone, also as a task of an array
            subprocess.run(["scontrol", "requeue", slurm_job.own_id(self.env)], env=self.child_env, check=False)
            raise End(0, "requeued")
        say("%s and run_requeue_max=%d requeues are used up; the checkpoints in %s are intact: run the playbook "
            "again to continue" % (why, requeue_max, self.file("checkpoints")), err=True)
        self.notify("failure", why="%s%s and run_requeue_max=%d requeues are used up; the checkpoints are intact: "
                    "run playbooks/pretrain.yml again to continue" % (cause, why, requeue_max))
        raise End(code("PREEMPTED"), "preempted")

    def stray_sigterm(self):
        """The training stopped on a SIGTERM that Slurm did not send to end the job: after a node
        lost by an earlier start came back, the controller's resent request to end that start
        reaches the node's slurmd, which signals every step of the job id there, this start's too
        (docs/reliability.md, row 3). Known by the stop naming SIGTERM while the controller still
        runs the job: no time limit, cancel, requeue or preemption's grace time (PreemptTime)."""
        return '"SIGTERM"' in run_files.head(self.file(run_files.PREEMPTED)) and self.slurm_runs_on()

    def slurm_runs_on(self):
        """Slurm still runs the job as before: RUNNING, not preempted, its time limit not near."""
        job = (self.show("job", self.job_id) or [{}])[0]
        left = time_left(job)
        near = int(self.config.get("signal_lead") or 0) + LIMIT_NOTICE_SLACK_S
        return job.get("JobState") == "RUNNING" and not preempted(job) and (left is None or left > near)

    def stray_sigterm_failure(self):
        """The training step failed because a SIGTERM that Slurm did not send to end the job reached one
        of its tasks before its ranks could stop with a checkpoint (a second into the start, say, as
        stray_sigterm's request lands): the line of this start's log where a task ended on a SIGTERM
        before any ended otherwise (srun's "task 1: Terminated", the launcher's death signal), while
        Slurm runs the job on; else None. srun ending the step because a task failed comes after that
        task's own end, so a failure of the training is never taken for it."""
        try:
            log = os.readlink("/proc/self/fd/1")
            if not os.path.isfile(log):
                return None
            line = job_log.log_summary(log, tail=0, errors=0, max_bytes=LOG_READ_MAX_BYTES)["sigterm_first"]
        except OSError:
            return None
        return line if line and self.slurm_runs_on() else None

    def notice_cause(self):
        """What the stop notice that stopped the training was, for its notification: a preemption's
        (Slurm's PreemptTime), the time limit's (its end within the signal lead), or a stop notice."""
        if not self.config.get("notify"):
            return ""
        job = (self.show("job", self.job_id) or [{}])[0]
        if preempted(job):
            return "a preemption notice: "
        left = time_left(job)
        near = int(self.config.get("signal_lead") or 0) + LIMIT_NOTICE_SLACK_S
        return "its time limit nears: " if left is not None and left <= near else "a stop notice: "

    # -- the job ---------------------------------------------------------------------------------

    def run_checks(self):
        notice = self.file(run_files.STOP_NOTICE)
        self.child_env["LLMTRAIN_STOP_NOTICE"] = notice
        try:
            os.unlink(notice)
        except FileNotFoundError:
            pass
        for check in self.config.get("checks", []):
            status = exit_status(subprocess.call(check, env=self.child_env))
            if status:
                raise End(status)
        # A notice during the checks: the training would start only to be stopped, and Slurm sends
        # the notice once, so it would never hear of it. Nothing was trained: the last checkpoint stands.
        first = run_files.head(notice).splitlines()[:1]
        if first:
            os.unlink(notice)
            self.requeue_or_stop("the stop notice (%s) came during the checks, before training started; nothing new "
                                 "to save" % printable(first[0]))
        del self.child_env["LLMTRAIN_STOP_NOTICE"]
        if self.stop_asked():
            self.requeue_or_stop("a stop was requested before training started; nothing new to save")

    def hang_watch(self):
        hang = self.config.get("hang")
        if not hang:
            return None
        requeue_max = int(self.config["requeue_max"]) + run_files.uncounted_requeues(self.run_dir, self.job_id)
        me = "/proc/%d/fd/" % os.getpid()
        argv = list(hang["python"]) + [
            "-m", "llmtrain_node.hang", "watch", "--pid", str(self.training.pid),
            "--progress", self.file(run_files.METRICS), "--progress", me + "1", "--progress", me + "2"] \
            + list(hang["args"]) + ["--requeue-max", str(requeue_max), "--"] + list(hang.get("prefix", []))
        return subprocess.Popen(argv, env=self.python_env(), stdin=subprocess.DEVNULL)

    def train(self):
        # a marker left by an earlier start is not this start's
        for name in (run_files.PREEMPTED, run_files.HANG):
            try:
                os.unlink(self.file(name))
            except FileNotFoundError:
                pass
        try:  # the restarts' watch reads what the training adds to starts.jsonl from here
            offset = os.path.getsize(self.file(run_files.STARTS))
        except OSError:
            offset = 0
        self.training = subprocess.Popen(self.command, env=self.child_env, stdin=subprocess.DEVNULL)
        watch = self.hang_watch()
        restarts = threading.Thread(target=self.watch_restarts, args=(offset,), daemon=True)
        if self.config.get("notify"):
            restarts.start()
        status = exit_status(self.training.wait())
        self.trained.set()
        if restarts.is_alive():  # its last look, before the end is told
            restarts.join(notify.SEND_MAX_S + 5)
        if watch is not None:
            watch.terminate()
            watch.wait()
            if os.path.exists(self.file(run_files.HANG)):
                say("the training hung and pretrain_hang_policy ended it: the stacks are in %s; the checkpoints in %s "
                    "are intact" % (self.file(run_files.HANGS), self.file("checkpoints")), err=True)
                raise End(code("HANG"), "hang")
        if os.path.exists(self.file(run_files.PREEMPTED)):
            # what the training wrote there, as one line (a trailing line break is not part of it)
            stopped = "stopped with a checkpoint (%s)" % printable(
                run_files.head(self.file(run_files.PREEMPTED), 512).rstrip("\r\n"))
            if self.stray_sigterm():
                self.requeue_or_stop(
                    "%s on a SIGTERM while Slurm still runs the job: not its time limit, a cancel, a requeue or a "
                    "preemption (a resent request to end an earlier start, after a lost node came back)" % stopped,
                    uncounted=True)
            self.requeue_or_stop(stopped, cause=self.notice_cause())
        sigterm = self.stray_sigterm_failure() if status != 0 else None
        if sigterm:
            self.requeue_or_stop(
                "the training step ended (exit code %d) on a SIGTERM to its tasks (%s) while Slurm still runs the job: "
                "not its time limit, a cancel, a requeue or a preemption (a resent request to end an earlier start, "
                "after a lost node came back); it resumes from its newest checkpoint" % (status, printable(sigterm)[:200]),
                uncounted=True)
        say("job %s ends with exit code %d at %s" % (self.job_id, status, utc_now(fraction=True)))
        raise End(status, "finished" if status == 0 else "failed")

    def run(self):
        """The job, start to end -> its exit status."""
        signal.signal(signal.SIGUSR2, self.stop_notice)
        try:
            self.prepare()
        except End as end:
            return end.status
        self.record_start()
        for name in ENDING_SIGNALS:
            signal.signal(getattr(signal, name), self.ended_by_signal)
        status = code("FAILED")
        try:
            self.run_checks()
            self.train()
        except End as end:
            status = end.status
            self.how = end.how
        except BaseException:
            self.how = "failed"
            raise
        finally:
            self.ending = True
            self.record_end(status)
        return status


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m llmtrain_node.job CONFIG_JSON -- COMMAND...\n")
        return code("FAILED")
    return Job(json.loads(argv[0]), argv[2:]).run()


if __name__ == "__main__":
    raise SystemExit(main())
