# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's notifications (run_notify), sent by its training job itself, since nobody may be
watching: a start, a requeue and why, a restart inside the job, a stop, a failure, the end. The job (job.py) calls
post() at each; a sender process of its own posts the event to each webhook, so that a webhook
that is slow, hangs or fails never delays or fails the training (the job waits for its senders,
at most SEND_MAX_S, only where the training has already stopped: before a requeue, at its end).

The webhooks are in env/notify.json (NOTIFY_HOOKS: [{url, format}], written by the pretrain role
with mode 0600, as their URLs hold tokens): never in the job script, its config, a log or the
report. A log line about a webhook names its host alone, and why a post failed by the HTTP status or
the error's type alone (an error's text may quote the URL). The webhooks are posted to at once, each
with REQUEST_TIMEOUT_S for each step (to connect, for the answer), all within SEND_MAX_S; a redirect
is not followed (urllib would post to, or GET, wherever it points: another host, ftp://).

Formats: "slack" posts {"text": the event's line} (Slack's incoming webhooks and the many that
take their payload: Mattermost, Rocket.Chat, Teams' workflows); "json" posts the event as a
record (EVENT_FIELDS). Text taken from the run's files (a log's exception line, a marker, a
node's reason) is made printable and cut; in Slack's text, &, < and > are escaped, so that no
file can write a mention (<!channel>) or a link.

Rate: at most RATE_MAX events of a run in RATE_WINDOW_S are sent, so that a job that fails as it
starts, requeue after requeue, does not flood a channel; the ones held back are counted and
said by the next message sent. A stop, a failure and the end are always sent.

This file imports nothing from Ansible: it runs on the nodes as part of the llmtrain_node package."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

from . import run_files
from .atomic import replace_file
from .untrusted import Unreadable, printable, read

FORMATS = ("slack", "json")
EVENTS = ("start", "requeue", "restart", "stop", "failure", "end")
ENDS = ("requeue", "stop", "failure", "end")  # how a start ends: one of them is told of each start
ALWAYS_SENT = ("stop", "failure", "end")
# the fields of an event record (the json format's body), each event's own besides the first six
EVENT_FIELDS = {
    "event": "one of EVENTS",
    "run": "the run's name",
    "job_id": "the Slurm job id",
    "start": "the job's start (1, then one more per requeue)",
    "time": "when it happened, UTC (ISO 8601)",
    "text": "the line a person reads (the slack format's text)",
    "nodes": "start: the job's nodes, as a Slurm host list",
    "node_count": "start: how many",
    "lost": "start, requeue: [{node, reason}] of nodes the start before had, with Slurm's reason for each",
    "why": "requeue, stop, failure: why, in a line",
    "restart": "restart: which restart of the ranks inside the job (pretrain_restarts_in_job)",
    "rank": "failure, restart: the rank that failed first, where the log (or the trainer) says",
    "node": "failure, restart: its node; a hang: the node of the stuck rank",
    "exception": "failure, restart: the exception's line of that rank",
    "step": "end: the last step the metrics file records; restart: the step the ranks resumed at",
    "loss": "end: its loss",
    "wall_s": "end: seconds from the run's first start to its end",
    "gpu_hours": "end: GPU-hours of every start of the run (its start and end lines x the allocation)",
    "node_hours": "end: node-hours, likewise",
    "held": "how many events before this one the rate held back",
}
RATE_MAX = 10
RATE_WINDOW_S = 600
REQUEST_TIMEOUT_S = 5
SEND_MAX_S = 10
HOOKS_MAX_BYTES = 65536
STATE_MAX_BYTES = 4096
TEXT_MAX_CHARS = 300
NODES_MAX_CHARS = 200
# what a URL's characters outside printable ASCII are called, where a message says why it is refused
CHARACTER_NAMES = {" ": "a space", "\t": "a tab", "\r": "a carriage return", "\n": "a line break"}


def cut(text, limit=TEXT_MAX_CHARS):
    """Text from the run's files (or Slurm's), as one printable line of at most limit characters."""
    text = printable(text).strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def host_of(url):
    """What a log may say of a webhook: its host, never its path, query or user (tokens live there)."""
    try:
        return urlsplit(url).hostname or "?"
    except ValueError:
        return "?"


def odd_character(url):
    """What the first character of url that no URL may hold as it is (a blank, a control, one outside
    ASCII) is, in words that do not quote the URL; None where every one is printable ASCII. Such a
    URL is refused where it is given: urllib would drop a tab or a line break where it parses it, and
    refuse the others only once a post is due."""
    odd = next((c for c in url if not " " < c < "\x7f"), None)
    if odd is None:
        return None
    return CHARACTER_NAMES.get(odd) or ("a control character" if odd <= "\x7f" else "a character outside ASCII")


def load_hooks(run_dir, uid=None):
    """(webhooks, problem) of env/notify.json: [{url, format}], or [] and why not. The file holds
    secrets: it must be a file of the job's user that no one else can read or write."""
    path = run_files.path(run_dir, run_files.NOTIFY_HOOKS)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return [], None
    except OSError as err:
        return [], "cannot read %s: %s" % (path, err.strerror)
    uid = os.getuid() if uid is None else uid
    if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        return [], ("%s is not a file of yours that only you can read (mode 0600): no notification is sent; "
                    "the pretrain stage writes it" % path)
    try:
        hooks = read(path, HOOKS_MAX_BYTES)
    except (OSError, Unreadable) as err:
        return [], "cannot read %s: %s" % (path, cut(err))
    good = [h for h in hooks if isinstance(h, dict) and isinstance(h.get("url"), str)
            and odd_character(h["url"]) is None and urlsplit(h["url"]).scheme in ("http", "https")
            and h.get("format", "slack") in FORMATS] \
        if isinstance(hooks, list) else []
    if not isinstance(hooks, list) or len(good) != len(hooks):
        return good, "%s holds entries that are no webhook ({url: http(s)://..., format: slack|json}): left out" % path
    return good, None


def load_state(run_dir):
    """notify_sent.json: {times: of the last RATE_MAX events sent, held: how many the rate held back
    since, told: "<job id> <start>" of the last start whose end (requeue, stop, failure, end) was
    told, and by which event}. The job alone writes it, one event at a time."""
    try:
        state = read(run_files.path(run_dir, run_files.NOTIFY_SENT), STATE_MAX_BYTES)
    except (OSError, Unreadable):
        state = {}
    return state if isinstance(state, dict) else {}


def save_state(run_dir, state):
    try:
        replace_file(run_files.path(run_dir, run_files.NOTIFY_SENT), json.dumps(state).encode("utf-8"))
    except OSError:
        pass


def rate(run_dir, event, now):
    """(send, held): whether this event is sent, and how many were held back since the last one sent."""
    state = load_state(run_dir)
    times = [t for t in state.get("times", []) if isinstance(t, (int, float)) and now - RATE_WINDOW_S < t <= now] \
        if isinstance(state.get("times"), list) else []
    held = state.get("held") if isinstance(state.get("held"), int) and state.get("held") > 0 else 0
    send = event in ALWAYS_SENT or len(times) < RATE_MAX
    state.update(dict(times=(times + [now])[-RATE_MAX:], held=0) if send else dict(times=times, held=held + 1))
    save_state(run_dir, state)
    return send, held if send else 0


def told(run_dir, job_id, start):
    """The event that told the end of that start of the job (also when the rate held it back), or None."""
    words = str(load_state(run_dir).get("told", "")).split(" ")
    return words[2] if len(words) == 3 and words[:2] == [str(job_id), str(start)] else None


def tell_end(run_dir, job_id, start, event):
    """Records that the end of that start was told, and by which event."""
    state = load_state(run_dir)
    state["told"] = "%s %d %s" % (job_id, start, event)
    save_state(run_dir, state)


def hours(seconds):
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60) if seconds >= 3600 else "%d min %02d s" % (
        seconds // 60, seconds % 60)


def failed_rank(event, who, what):
    """The failed rank and node of an event in the words who gives ('' when it names neither), and its
    exception's line in those of what."""
    text = who % ("rank %s on %s" % (event.get("rank", "?"), event.get("node") or "?")) \
        if event.get("rank") is not None or event.get("node") else ""
    return text + (what % event["exception"] if event.get("exception") else "")


def describe(event):
    """The line a person reads of an event record (all of whose text fields are printable already)."""
    head = "run %s: job %s start %s" % (event["run"], event["job_id"], event["start"])
    kind = event["event"]
    lost = ", ".join("%s (%s)" % (n["node"], n["reason"] or "no reason given") for n in event.get("lost", []))
    if kind == "start":
        text = "%s began on %d node(s) %s" % (head, event["node_count"], event["nodes"])
        if lost:
            text += "; without %s, which the start before had" % lost
    elif kind == "requeue":
        text = "%s is requeued: %s" % (head, event["why"])
    elif kind == "restart":
        text = "%s restarted its ranks inside the job (restart %d)%s" % (head, event["restart"], failed_rank(
            event, ": %s failed", " (%s)"))
        if event.get("step") is not None:
            text += "; resumed at step %s" % event["step"]
    elif kind == "stop":
        text = "%s stopped: %s" % (head, event["why"])
    elif kind == "failure":
        text = "%s failed: %s%s" % (head, event["why"], failed_rank(event, "; first failed: %s", ": %s"))
    else:
        text = "run %s finished (job %s start %s)" % (event["run"], event["job_id"], event["start"])
        if event.get("step") is not None:
            text += ": step %s" % event["step"]
            if event.get("loss") is not None:
                text += ", loss %.4g" % event["loss"]
        if event.get("wall_s") is not None:
            text += "; %s since its first start" % hours(event["wall_s"])
        if event.get("gpu_hours") is not None:
            text += "; %.2f GPU-hours, %.2f node-hours" % (event["gpu_hours"], event["node_hours"])
    if event.get("held"):
        text += " (%d event(s) before this one were not sent: more than %d in %d minutes)" % (
            event["held"], RATE_MAX, RATE_WINDOW_S // 60)
    return text


def slack_escape(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def body(hook_format, event):
    if hook_format == "json":
        return json.dumps(event).encode("utf-8")
    return json.dumps({"text": slack_escape(event["text"])}).encode("utf-8")


class NoRedirect(HTTPRedirectHandler):
    """A webhook's redirect is not followed: urllib would turn the POST into a GET to wherever it points
    (another host, another scheme). The answer is an HTTPError of its 3xx status."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def post_one(hook, event, timeout):
    """Posts event to one webhook -> None once it took it, else why not: the HTTP status or the error's
    type, never its text (http.client's quotes the URL's path, where the token is)."""
    request = Request(hook["url"], data=body(hook.get("format", "slack"), event), method="POST",
                      headers={"Content-Type": "application/json", "User-Agent": "llmtrain-notify"})
    try:
        # besides NoRedirect, the default handlers: the environment's proxies (https_proxy, no_proxy),
        # certificates verified
        with build_opener(NoRedirect).open(request, timeout=timeout) as answer:
            answer.read(65536)
        return None
    except HTTPError as err:
        err.close()
        if 300 <= err.code < 400:
            return "it answered a redirect (HTTP %d), which is not followed: give run_notify the URL it redirects to" % err.code
        return "HTTP %d" % err.code
    except Exception as err:  # any failure of one webhook is said, by its type
        reason = err.reason if isinstance(err, URLError) and isinstance(err.reason, BaseException) else err
        return "no answer in %d s" % timeout if isinstance(reason, socket.timeout) else type(reason).__name__


def send(hooks, event, timeout=REQUEST_TIMEOUT_S, limit=SEND_MAX_S - 1):
    """Posts event to each webhook at once, each with timeout seconds for each step (to connect, for
    the answer), all within limit seconds -> [(host, why)] of those that failed, in the order of hooks,
    those still unanswered at the limit among them. A hook that hangs keeps none of the others from
    being tried; its thread is left to the sender's exit."""
    done = {}

    def post_to(index, hook):
        done[index] = post_one(hook, event, timeout)

    threads = [threading.Thread(target=post_to, args=(index, hook), daemon=True) for index, hook in enumerate(hooks)]
    deadline = time.monotonic() + limit
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    failed = []
    for index, hook in enumerate(hooks):
        why = done.get(index, "no answer in %d s" % limit)
        if why:
            failed.append((host_of(hook["url"]), why))
    return failed


def event_record(kind, run, job_id, start, **details):
    record = dict(event=kind, run=run, job_id=str(job_id), start=int(start),
                  time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    record.update((k, v) for k, v in details.items() if v is not None and v != [] and v != "")
    return record


def post(run_dir, event, python, env):
    """Sends event (event_record's) to the run's webhooks from a sender process of its own -> that
    process (None when the run has none, or the rate holds the event back). Its failures go to the
    job's error output, naming the webhook's host."""
    if not os.path.exists(run_files.path(run_dir, run_files.NOTIFY_HOOKS)):
        return None
    if event["event"] in ENDS:
        tell_end(run_dir, event["job_id"], event["start"], event["event"])
    send_it, held = rate(run_dir, event["event"], time.time())
    if not send_it:
        return None
    if held:
        event["held"] = held
    event["text"] = describe(event)
    try:
        sender = subprocess.Popen(list(python) + ["-m", "llmtrain_node.notify", run_dir], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, env=env)
    except OSError as err:
        sys.stderr.write("llmtrain: cannot start the notification's sender: %s\n" % err)
        return None
    try:
        sender.stdin.write(json.dumps(event).encode("utf-8"))
        sender.stdin.close()
    except OSError:
        pass
    return sender


def wait(senders, limit=SEND_MAX_S + 2):
    """Waits for the senders, at most limit seconds in all (each ends itself by SEND_MAX_S)."""
    deadline = time.monotonic() + limit
    for sender in senders:
        try:
            sender.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            sender.kill()


def main(argv=None):
    """python -m llmtrain_node.notify RUN_DIR < EVENT_JSON: posts the event to the run's webhooks."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # the alarm, should anything here hang, ends the sender unheard: send's own limit ends before it, so
    # that each failure is said
    signal.alarm(SEND_MAX_S)
    deadline = time.monotonic() + SEND_MAX_S - 1
    event = json.loads(sys.stdin.read(1 << 20))
    hooks, problem = load_hooks(argv[0])
    if problem:
        sys.stderr.write("llmtrain: %s\n" % problem)
    for host, why in send(hooks, event, limit=max(0.0, deadline - time.monotonic())):
        sys.stderr.write("llmtrain: the %s notification to %s was not sent: %s\n" % (event["event"], host, why))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
