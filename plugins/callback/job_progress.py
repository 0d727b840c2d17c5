# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: job_progress
type: aggregate
short_description: One line of Slurm job progress per retry of a task that watches a job
description:
  - When a task that watches a Slurm job is retried (C(until)/C(retries)), prints one line
    per retry with the job id, state, nodes, step/total, loss, tokens per second and ETA.
  - Before it, the per-node table of the job's node check (once per check, from C(node_check) - every
    node's line up to 32 nodes, else the bad nodes' lines and where the whole table is),
    the fabric its network check measured and the slow node it names (once per check, from
    C(network_check), its table alike), a line for each release of the job without bad nodes and each
    requeue whose delay was lifted (from C(excluded)),
    a line naming each node that holds the others back (once per job and node, from C(stragglers)),
    a hang the job's hang watch found, with the node it names and that rank's first frames (once per
    hang, from C(hang)),
    each recovery of the job (from C(recovery)), once each - its requeue, naming the nodes of the start
    that ended which Slurm has out of service and its reason; the next start, naming the nodes it lacks;
    and where the reference trainer resumed, naming the rank that failed where torch.distributed.run
    restarted the ranks inside the job,
    and a warning for each progress pattern that backtracks and for lines of the metrics file that
    cannot be read (once each, from C(progress_warnings)).
  - A watch without a limit (C(retries) of a billion or more, as the pretrain role's
    C(pretrain_watch_timeout=0)) counts its polls instead of its retries left.
  - "A sweep's watch (M(llmtrain.slurm.sweep)) prints its one line per retry (RV(llmtrain.slurm.sweep#module:sweep)'s
    C(line)) - the members in each state and the lowest loss so far."
  - A task watches a job when its result carries C(job_id) or C(jobs) and C(state), as the
    results of M(llmtrain.slurm.slurm_job_info) and M(llmtrain.slurm.sbatch) do; the
    progress fields come from C(progress) (O(llmtrain.slurm.slurm_job_info#module:metrics_file)).
  - When the watching task ends, one more line gives the job's state and its last progress
    (a job that ends between two retries shows where it got).
  - Works beside any stdout callback. Ansible gives every retry to the stdout callback
    first, and no other callback can withdraw that line, so the C(FAILED - RETRYING) line
    of the default callback stays and this line follows it. The stdout callback
    P(llmtrain.slurm.default#callback) prints this line in place of the retry line; while it
    is the stdout callback, this one prints nothing.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
requirements:
  - Enabled in C(callbacks_enabled) (the collection's C(ansible.cfg) does that).
"""

from ansible import constants as C
from ansible.plugins.callback import CallbackBase

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.metrics import METRIC_FIELDS
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import fields, printable
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.stragglers import straggler_line

# The stdout callback that prints the progress line itself (plugins/callback/default.py).
PRINTED_BY_STDOUT_CALLBACK = "llmtrain.slurm.default"
# until knows no unlimited: a watch without a time limit (pretrain_watch_timeout=0) retries this
# many times (decades of polls), and its lines count the polls without a total.
ENDLESS_RETRIES = 1000000000


def _duration(seconds):
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh%02dm" % (hours, minutes)
    if minutes:
        return "%dm%02ds" % (minutes, secs)
    return "%ds" % secs


def _number(value):
    if isinstance(value, float):
        return "%.4g" % value
    return str(value)


def progress_line(host, result):
    """The line for one retry, or None when the result does not describe a Slurm job (or a sweep's)."""
    sweep = result.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("line"), str):
        return _with_retry("[%s] %s" % (host, sweep["line"]), result)
    job = result
    if isinstance(result.get("jobs"), list) and result["jobs"]:
        job = result["jobs"][-1]
    if not isinstance(job, dict) or not job.get("job_id") or not job.get("state"):
        return None
    head = "job %s %s" % (job["job_id"], job["state"])
    if job.get("nodelist"):
        head += " on %s" % job["nodelist"]
    elif job.get("reason") and job["state"] == "PENDING":
        head += " (%s)" % job["reason"]
    parts = []
    progress = fields(result["progress"], METRIC_FIELDS) if isinstance(result.get("progress"), dict) else {}
    if progress.get("step") is not None:
        parts.append("step %s/%s" % (progress["step"], progress.get("total_steps") or "?"))
    if progress.get("loss") is not None:
        parts.append("loss %s" % _number(progress["loss"]))
    if progress.get("tokens_per_s") is not None:
        parts.append("%s tokens/s" % _number(round(progress["tokens_per_s"])))
    if progress.get("eta_s") is not None:
        parts.append("ETA %s" % _duration(progress["eta_s"]))
    return _with_retry("[%s] %s" % (host, head) + (": " + ", ".join(parts) if parts else ""), result)


def _with_retry(line, result):
    """line, with the poll or retry it was printed at, printable."""
    retries, attempts = result.get("retries"), result.get("attempts")
    if retries and attempts:
        line += " (poll %d)" % attempts if retries - 1 >= ENDLESS_RETRIES else " (retry %d/%d)" % (attempts, retries - 1)
    return printable(line)


def final_line(host, result):
    """The line for the end of a watch (the job ended, or waits for nodes out of service): its
    last progress, so that a job that ends between two polls still shows where it got. None
    for a result without RV(progress) (any task but a watch)."""
    if "progress" not in result:
        return None
    return progress_line(host, dict((k, v) for k, v in result.items() if k not in ("retries", "attempts")))


def network_lines(host, check):
    """The network check's summary, its per-node table and the slow node(s) it names."""
    busbw, latency = check.get("busbw"), check.get("latency_us")
    head = "[%s] network check of job %s (start %s): all-reduce bus bandwidth %s GB/s" % (
        host, check.get("job_id"), (check.get("restart") or 0) + 1, "?" if busbw is None else "%.3g" % busbw)
    if check.get("fraction") is not None:
        head += " (%.0f%% of the slowest link's %.3g GB/s)" % (100 * check["fraction"], check.get("limit") or 0)
    if latency is not None:
        head += ", latency %.0f us" % latency
    lines = [head + ":"] + ["    " + str(line) for line in check["table"]]
    for node, reason in sorted((check.get("slow") or {}).items()):
        lines.append("[%s] network check: %s is slow: %s" % (host, node, reason))
    if check.get("slow_fabric"):
        lines.append("[%s] network check: the fabric is slow: %s" % (host, check["slow_fabric"]))
    return lines


def hang_lines(host, hang):
    """A hang the job's watch found: how long it was silent, the node(s) it names with the first
    frames of the rank there, and where the stacks are."""
    after = " after step %s" % hang["step"] if hang.get("step") is not None else ""
    lines = ["[%s] job %s (start %s) hung%s: no progress for %s s (timeout %s s); stacks in %s" % (
        host, hang.get("job_id"), hang.get("start"), after, hang.get("silent_s"), hang.get("timeout_s"), hang.get("dir"))]
    suspects, frames = hang["suspects"], hang.get("frames") or {}
    if not suspects:
        lines.append("    the stacks name no node: every rank runs, in the same frame")
    for node in sorted(suspects):
        lines.append("    %s: %s" % (node, suspects[node]))
        lines += ["        %s" % frame for frame in (frames.get(node) or [])]
    more = (hang.get("suspect_count") or 0) - len(suspects)
    if more > 0:
        lines.append("    and %d more node(s): %s/summary.json" % (more, hang.get("dir")))
    return lines


def recovery_lines(host, found, seen):
    """The lines of a job's recoveries not said yet: its requeue (the lost nodes of the start that
    ended), its next start (the nodes it lacks), where the trainer resumed. A requeue the watch did
    not see while the job waited (the next start began before it looked) is told with that start."""
    lines, job_id, start = [], found.get("job_id"), found.get("start")
    previous = found.get("previous") or {}
    lost = found.get("lost") if isinstance(found.get("lost"), dict) else {}
    # how it ended, from its end line (killed, preempted, hang, ...): the requeue says itself
    how = previous.get("how") if previous.get("how") not in (None, "requeued") else None
    ended = "start %s on %s ended%s" % (previous.get("start"), previous.get("nodes"), " (%s)" % how if how else "")
    if found.get("requeued") and previous and _first_time(seen, "requeued", host, job_id, start, tuple(sorted(lost))):
        _first_time(seen, "requeue told", host, job_id, start)
        more = (found.get("lost_count") or 0) - len(lost)
        what = ("lost %s%s" % (", ".join("%s (%s)" % kv for kv in sorted(lost.items())),
                               " and %d more" % more if more > 0 else "")
                if lost else "none of its nodes is out of service")
        lines.append("[%s] job %s: %s and the job is requeued (start %s next): %s" % (host, job_id, ended, start, what))
    if found.get("nodes") and previous and _first_time(seen, "started", host, job_id, start):
        same_job = str(previous.get("job_id")) == str(job_id)
        which = "start %s" % previous.get("start") if same_job else "start %s of job %s" % (
            previous.get("start"), previous.get("job_id"))
        nodes = "without %s, which %s had" % (found["left"], which) if found.get("left") else "every node %s had" % which
        if same_job and previous.get("start") == (start or 0) - 1 and _first_time(seen, "requeue told", host, job_id, start):
            lines.append("[%s] job %s: %s and the job was requeued; start %s began on %s before the watch looked: %s"
                         % (host, job_id, ended, start, found["nodes"], nodes))
        else:
            lines.append("[%s] job %s start %s on %s: %s" % (host, job_id, start, found["nodes"], nodes))
    resumed = found.get("resumed") if isinstance(found.get("resumed"), dict) else None
    if resumed and (resumed.get("restart_in_job") or resumed.get("event") == "resume" or start != 1) and _first_time(
            seen, "resumed", host, job_id, start, resumed.get("restart_in_job")):
        at = ("resumed at step %s from %s" % (resumed.get("step"), str(resumed.get("checkpoint")).rsplit("/", 1)[-1])
              if resumed.get("event") == "resume" else "started again at step 0 (no checkpoint yet)")
        if isinstance(resumed.get("steps_lost"), int) and isinstance(resumed.get("step"), int):
            at += " (steps %d to %d, recorded past it, train again)" % (
                resumed["step"] + 1, resumed["step"] + resumed["steps_lost"])
        if resumed.get("restart_in_job"):
            failed = [f for f in resumed.get("failed_ranks") or [] if isinstance(f, dict)]
            why = ("rank %s on %s failed after step %s (%s)%s" % (
                failed[0].get("rank"), failed[0].get("node"), failed[0].get("step"), failed[0].get("error"),
                ", and %d more rank(s) after it" % (len(failed) - 1) if len(failed) > 1 else "") if failed
                else "a rank failed (its traceback is in the job log)")
            lines.append("[%s] job %s start %s: %s; torch.distributed.run restarted every rank on the same nodes "
                         "(restart %s in the job); %s" % (host, job_id, start, why, resumed["restart_in_job"], at))
        else:
            lines.append("[%s] job %s start %s %s" % (host, job_id, start, at))
    return lines


def _first_time(seen, *key):
    """Whether key is new to seen (which it then holds): each event is said once."""
    if key in seen:
        return False
    seen.add(key)
    return True


def event_lines(host, result, seen):
    """Lines for what happened to the job since the last retry: a node check's table (once per
    check), each exclusion of bad nodes, and each progress pattern that backtracks (once per
    pattern: the line it overran on changes as the log grows). seen: a set this function keeps
    up to date. Each line printable: what the job's files held is shown, never obeyed."""
    lines = []
    check = result.get("node_check")
    if isinstance(check, dict) and isinstance(check.get("table"), list) and _first_time(
            seen, "node_check", host, check.get("job_id"), check.get("restart"), check.get("time")):
        lines.append("[%s] node check of job %s (start %s):" % (host, check.get("job_id"), (check.get("restart") or 0) + 1))
        lines += ["    " + str(line) for line in check["table"]]
    job_id = result.get("job_id")
    for found in result.get("stragglers") or []:
        if isinstance(found, dict) and _first_time(seen, "straggler", host, job_id, found.get("node")):
            lines.append("[%s] job %s: %s" % (host, job_id, straggler_line(found)))
    network = result.get("network_check")
    if isinstance(network, dict) and isinstance(network.get("table"), list) and _first_time(
            seen, "network_check", host, network.get("job_id"), network.get("restart"), network.get("time")):
        lines += network_lines(host, network)
    hang = result.get("hang")
    if isinstance(hang, dict) and isinstance(hang.get("suspects"), dict) and _first_time(
            seen, "hang", host, hang.get("job_id"), hang.get("start"), hang.get("time")):
        lines += hang_lines(host, hang)
    found = result.get("recovery")
    if isinstance(found, dict):
        lines += recovery_lines(host, found, seen)
    for event in result.get("excluded") or []:
        if isinstance(event, dict) and _first_time(
                seen, "excluded", host, event.get("job_id"), event.get("restarts"), event.get("message")):
            lines.append("[%s] %s" % (host, event.get("message")))
    warnings = result.get("progress_warnings")
    for pattern, message in (warnings.items() if isinstance(warnings, dict) else ()):
        if _first_time(seen, "progress_warning", host, pattern):
            lines.append("[%s] [WARNING]: %s" % (host, message))
    return [printable(line) for line in lines]


def show_retry(display, result, seen):
    """Shows a watch's retry: its events not shown yet, then its progress line. False when it has
    no progress line (not a watch's retry: the caller shows it its own way)."""
    for event in event_lines(result.host.get_name(), result.result, seen):
        display.display(event)
    line = progress_line(result.host.get_name(), result.result)
    if line:
        display.display(line)
    return bool(line)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "llmtrain.slurm.job_progress"
    CALLBACK_NEEDS_ENABLED = True

    def set_options(self, *args, **kwargs):
        super().set_options(*args, **kwargs)
        # a disabled callback is not called at all: no line twice
        self.disabled = C.DEFAULT_STDOUT_CALLBACK == PRINTED_BY_STDOUT_CALLBACK

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen = set()

    def v2_runner_retry(self, result):
        show_retry(self._display, result, self._seen)

    def v2_runner_on_ok(self, result):
        # what happened between the last retry and the end of the watch (a requeue, say)
        for event in event_lines(result.host.get_name(), result.result, self._seen):
            self._display.display(event)
        line = final_line(result.host.get_name(), result.result)
        if line:
            self._display.display(line)
