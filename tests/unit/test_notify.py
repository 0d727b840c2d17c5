"""run_notify: the training job posts its events to webhooks itself (llmtrain_node.notify, called by
llmtrain_node.job). The job runs as its job script runs it (test_job.py's Fake: the shipped package,
fake scontrol and scancel), and the webhooks are a real HTTP server of the test's on 127.0.0.1:
what a channel would receive, in order, in both formats."""

import json
import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.run import notify_errors
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import notify, run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.exit_codes import code

from test_job import JOB_PYTHON, Fake
from webhook_receiver import Receiver


@pytest.fixture
def receiver():
    got = Receiver("127.0.0.1")
    yield got
    got.close()


@pytest.fixture
def fake(tmp_path):
    made = Fake(tmp_path)
    made.config.update(notify=True, run_name="r1", gpus_per_node=8)
    return made


class Silent:
    """A webhook that hangs, or a server a redirect points to: a real TCP server that accepts each
    connection and never answers; it keeps what each connection sent first."""

    def __init__(self, address):
        self.server = socket.socket()
        self.server.bind((address, 0))
        self.server.listen(16)
        self.address = "%s:%d" % self.server.getsockname()
        self.connections, self.got = [], []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                connection = self.server.accept()[0]
            except OSError:  # closed
                return
            self.connections.append(connection)
            threading.Thread(target=self.read, args=(connection,), daemon=True).start()

    def read(self, connection):
        try:
            self.got.append(connection.recv(65536))
        except OSError:
            pass

    def close(self):
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        for connection in self.connections:
            connection.close()


class Answering:
    """A webhook that answers each post with its status (and a Location, where given)."""

    def __init__(self, address, status, location=None):
        self.paths = []
        answering = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                answering.paths.append(self.path)
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path):
        return "http://%s:%d%s" % (self.server.server_address[0], self.server.server_address[1], path)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def hooks(fake, *entries, mode=0o600):
    path = fake.run_dir / run_files.NOTIFY_HOOKS
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(list(entries)))
    path.chmod(mode)


def run_logged(fake, command, restart=0):
    """The job with its output in a log file, as Slurm gives it one (the failure is read from there)."""
    log = fake.root / "job.out"
    with open(log, "ab") as out:
        proc = subprocess.Popen([JOB_PYTHON, "-m", "llmtrain_node.job", json.dumps(fake.config), "--"] + command,
                                cwd=str(fake.root), env=dict(fake.env, SLURM_RESTART_COUNT=str(restart)),
                                stdout=out, stderr=subprocess.STDOUT)
        proc.wait(60)
    return proc.returncode, log.read_text()


def test_a_finished_run_posts_its_start_and_end_in_both_formats(fake, receiver):
    hooks(fake, dict(url=receiver.url("/slack/T000/B000/secret"), format="slack"),
          dict(url=receiver.url("/json"), format="json"))
    (fake.run_dir / "metrics.jsonl").write_text(
        json.dumps(dict(step=59, loss=2.5)) + "\n" + json.dumps(dict(step=60, loss=2.25, lr=0.1)) + "\n"
        + json.dumps(dict(step=60, val_loss=2.4)) + "\n")
    status, out = fake.run(fake.step("sleep 1"))
    assert status == 0, out
    slack = [body for path, body, _at in receiver.posts if path.startswith("/slack")]
    records = [body for path, body, _at in receiver.posts if path == "/json"]
    assert [r["event"] for r in records] == ["start", "end"]
    start, end = records
    assert start["run"] == "r1" and start["job_id"] == "42" and start["start"] == 1
    assert start["nodes"] == "n[1-3]" and start["node_count"] == 3
    assert slack[0] == {"text": "run r1: job 42 start 1 began on 3 node(s) n[1-3]"}
    # the last step with a loss; a second of 3 nodes x 8 GPUs
    assert end["step"] == 60 and end["loss"] == 2.25
    assert end["wall_s"] >= 1 and end["gpu_hours"] == pytest.approx(end["node_hours"] * 8, abs=0.01)
    assert end["node_hours"] == pytest.approx(3 * end["wall_s"] / 3600, abs=0.002)
    assert slack[1]["text"].startswith("run r1 finished (job 42 start 1): step 60, loss 2.25; ")
    assert "GPU-hours" in slack[1]["text"] and end["text"] == slack[1]["text"]
    assert set(start) <= set(notify.EVENT_FIELDS) and set(end) <= set(notify.EVENT_FIELDS)


def test_a_requeue_says_why_before_it_is_asked_and_a_file_cannot_mention_or_escape(fake, receiver):
    hooks(fake, dict(url=receiver.url(), format="slack"), dict(url=receiver.url("/json"), format="json"))
    # what the training wrote in its marker: a Slack mention, a link and a terminal escape
    marker = fake.run_dir / run_files.PREEMPTED
    status, out = fake.run(fake.step("printf 'step 42 <!channel> <http://x|y> \\033]52;c;aGk=\\007 &' > %s" % marker))
    assert status == 0, out
    assert "scontrol requeue 42" in fake.calls()
    slack = [body["text"] for path, body, _at in receiver.posts if path == "/hook"]
    assert slack[0].startswith("run r1: job 42 start 1 began")
    assert slack[1] == ("run r1: job 42 start 1 is requeued: a stop notice: stopped with a checkpoint (step 42 "
                        "&lt;!channel&gt; &lt;http://x|y&gt;  &amp;); requeue 1 of 2")
    record = [body for path, body, _at in receiver.posts if path == "/json"][1]
    assert record["event"] == "requeue" and "\x1b" not in record["why"] and "\x07" not in record["why"]
    # the requeue was posted before the job asked Slurm for it: nobody hears of a requeue that has happened unsaid
    assert len(receiver.posts) == 4


def test_the_next_start_tells_a_requeue_slurm_made_with_the_lost_node_and_slurms_reason(fake, receiver):
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    (fake.run_dir / run_files.STARTS).write_text(
        json.dumps(dict(job_id="42", start=1, nodes="n[1-4]", left="", time="2026-12-06T05:00:00Z", node_count=4))
        + "\n" + json.dumps(dict(event="end", job_id="42", start=1, how="killed", exit_code=143,
                                 signal="SIGTERM", time="2026-12-06T05:10:00Z")) + "\n")
    (fake.slurm / "show_node").write_text("NodeName=n4 Arch=x86_64 State=DOWN+NOT_RESPONDING Reason=Not responding "
                                          "[slurm@2026-12-06T05:09:58]")
    fake_scontrol = fake.bin / "scontrol"
    fake_scontrol.write_text(fake_scontrol.read_text() + '''elif args[:2] == ["show", "node"]:
    print(open(os.path.join(fake, "show_node")).read())
''')
    status, out = fake.run(fake.step("true"), restart=1)
    assert status == 0, out
    requeue, start, end = [body for _path, body, _at in receiver.posts]
    reason = "Not responding [slurm@2026-12-06T05:09:58]"
    assert requeue["event"] == "requeue" and requeue["start"] == 1 and requeue["lost"] == [dict(node="n4", reason=reason)]
    assert requeue["text"] == "run r1: job 42 start 1 is requeued: Slurm requeued it: lost n4 (%s)" % reason
    assert start["event"] == "start" and start["start"] == 2 and start["lost"] == requeue["lost"]
    assert "without n4 (%s), which the start before had" % reason in start["text"]
    # start 2's hours: start 1's batch node lost it before its end (no end line of its own) counts none
    assert end["event"] == "end" and end["node_hours"] < 0.01


def test_a_failure_names_the_first_failed_rank_its_node_and_its_exception(fake, receiver):
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    status, log = run_logged(fake, fake.step('''
        echo "[rank1]: Traceback (most recent call last):"
        echo "[rank1]:   File \\"train.py\\", line 3, in <module>"
        echo "[rank1]: RuntimeError: Connection closed by peer"
        echo "[rank3]: Traceback (most recent call last):"
        echo "[rank3]:   File \\"train.py\\", line 9, in step"
        echo "[rank3]: ValueError: loss is nan at step 12"
        echo "    host      : n2"
        echo "    rank      : 3 (local_rank: 1)"
        exit 1'''))
    assert status == 1, log
    failure = [body for _path, body, _at in receiver.posts][-1]
    assert failure["event"] == "failure" and failure["why"] == "exit code 1 (FAILED: docs/exit-codes.md)"
    assert (failure["rank"], failure["node"], failure["exception"]) == (3, "n2", "ValueError: loss is nan at step 12")
    assert failure["text"].endswith("failed: exit code 1 (FAILED: docs/exit-codes.md); first failed: rank 3 on n2: "
                                    "ValueError: loss is nan at step 12")


def test_a_webhook_that_hangs_does_not_hold_the_training_and_one_that_is_down_fails_nothing(fake, tmp_path):
    started = tmp_path / "training-started"
    hanging = Receiver("127.0.0.1", hold=str(started))
    try:
        closed = Receiver("127.0.0.1")
        down = closed.url("/down/token-123")
        closed.close()  # nothing listens there now
        hooks(fake, dict(url=hanging.url(), format="json"), dict(url=down, format="json"))
        status, out = fake.run(fake.step("touch %s" % started))
        # the training ran while the start's post hung (the receiver held it until the training's file came)
        assert status == 0, out
        assert [body["event"] for _path, body, _at in hanging.posts] == ["start", "end"]
        # the webhook that is down is said with its host alone: its path holds a token
        assert "llmtrain: the start notification to 127.0.0.1 was not sent: " in out, out
        assert "token-123" not in out
        assert fake.lines()[-1]["how"] == "finished"
    finally:
        hanging.close()


def sent(fake, capfd):
    """A stop event posted by its sender process, as the job starts it -> (the sender's exit status, its
    error output, the seconds it took)."""
    began = time.monotonic()
    sender = notify.post(str(fake.run_dir), notify.event_record("stop", "r1", "42", 1, why="stopped on request"),
                         [JOB_PYTHON], fake.env)
    notify.wait([sender])
    return sender.returncode, capfd.readouterr().err, time.monotonic() - began


def test_a_failed_webhook_is_said_by_its_host_and_status_or_error_type_never_its_token(fake, capfd):
    failing = Answering("127.0.0.1", 500)
    closed = socket.socket()
    closed.bind(("127.0.0.2", 0))
    down = "http://%s:%d/services/T000/B000/SECRET-DOWN" % closed.getsockname()
    closed.close()  # nothing listens there now
    try:
        hooks(fake, dict(url=failing.url("/services/T000/B000/SECRET-500"), format="slack"),
              dict(url=down, format="json"),
              dict(url=failing.url("/services/T000/B000/SECRET TOKEN"), format="json"))
        status, err, _took = sent(fake, capfd)
        assert status == 0 and failing.paths == ["/services/T000/B000/SECRET-500"]
        assert "llmtrain: the stop notification to 127.0.0.1 was not sent: HTTP 500\n" in err
        assert "llmtrain: the stop notification to 127.0.0.2 was not sent: ConnectionRefusedError\n" in err
        # a URL with a blank is never posted (http.client's error would quote its path)
        assert "holds entries that are no webhook" in err and "SECRET" not in err
        assert notify.send([dict(url=failing.url("/services/T000/B000/SECRET TOKEN"))], dict(text="x")) == [
            ("127.0.0.1", "InvalidURL")]
    finally:
        failing.close()


def test_hooks_that_hang_are_each_tried_and_each_said_within_the_senders_bound(fake, capfd):
    hanging = [Silent("127.0.0.%d" % n) for n in (1, 2, 3)]
    try:
        hooks(fake, *[dict(url="http://%s/services/T000/B000/SECRET%d" % (h.address, n), format="slack")
                      for n, h in enumerate(hanging)])
        status, err, took = sent(fake, capfd)
        # the sender ended itself, in time, rather than the job's wait or its own alarm ending it unheard
        assert status == 0 and took < notify.SEND_MAX_S, (status, err, took)
        assert [got[0][:5] for got in (h.got for h in hanging)] == [b"POST "] * 3
        for n in (1, 2, 3):
            assert ("llmtrain: the stop notification to 127.0.0.%d was not sent: no answer in %d s\n" % (
                n, notify.REQUEST_TIMEOUT_S)) in err, err
        assert "SECRET" not in err
    finally:
        for h in hanging:
            h.close()


def test_the_sender_says_a_hook_still_unanswered_at_its_limit():
    trickling = Silent("127.0.0.1")
    try:
        began = time.monotonic()
        assert notify.send([dict(url="http://%s/hook" % trickling.address)], dict(text="x"), limit=1) == [
            ("127.0.0.1", "no answer in 1 s")]
        assert time.monotonic() - began < 2
    finally:
        trickling.close()


def test_a_redirect_to_another_host_or_scheme_is_not_followed_and_is_said(fake, capfd):
    elsewhere, ftp = Silent("127.0.0.2"), Silent("127.0.0.1")
    to_host = Answering("127.0.0.1", 302, "http://%s/services/T000/B000/SECRET" % elsewhere.address)
    to_ftp = Answering("127.0.0.3", 302, "ftp://%s/SECRET" % ftp.address)
    try:
        hooks(fake, dict(url=to_host.url("/hook"), format="json"), dict(url=to_ftp.url("/hook"), format="slack"))
        status, err, _took = sent(fake, capfd)
        assert status == 0 and to_host.paths == ["/hook"] and to_ftp.paths == ["/hook"]
        # neither the other host nor the ftp server was reached
        assert elsewhere.connections == [] and ftp.connections == []
        for host in ("127.0.0.1", "127.0.0.3"):
            assert ("llmtrain: the stop notification to %s was not sent: it answered a redirect (HTTP 302), which is "
                    "not followed: give run_notify the URL it redirects to\n" % host) in err, err
        assert "SECRET" not in err
    finally:
        for server in (elsewhere, ftp, to_host, to_ftp):
            server.close()


def test_the_webhooks_file_must_be_the_users_alone_and_without_it_nothing_is_sent(fake, receiver):
    hooks(fake, dict(url=receiver.url(), format="slack"), mode=0o644)
    status, out = fake.run(fake.step("true"))
    assert status == 0 and receiver.posts == []
    assert "notify.json is not a file of yours that only you can read (mode 0600): no notification is sent" in out
    os.unlink(fake.run_dir / run_files.NOTIFY_HOOKS)
    status, out = fake.run(fake.step("true"))
    assert status == 0 and receiver.posts == [] and "notif" not in out


def test_the_rate_holds_back_a_flood_and_says_so_and_never_a_stop_failure_or_end(tmp_path):
    now = 1000000.0
    sent = [notify.rate(str(tmp_path), "requeue", now + i) for i in range(notify.RATE_MAX + 3)]
    assert sent[:notify.RATE_MAX] == [(True, 0)] * notify.RATE_MAX
    assert sent[notify.RATE_MAX:] == [(False, 0)] * 3
    assert notify.rate(str(tmp_path), "failure", now + 20) == (True, 3)
    assert notify.rate(str(tmp_path), "start", now + 21) == (False, 0)
    # once the window has passed
    assert notify.rate(str(tmp_path), "start", now + notify.RATE_WINDOW_S + 30) == (True, 1)
    text = notify.describe(dict(event="stop", run="r", job_id="1", start=1, why="x", held=3))
    assert text == "run r: job 1 start 1 stopped: x (3 event(s) before this one were not sent: more than 10 in 10 minutes)"


def test_usage_adds_each_start_once_and_a_running_start_to_now(tmp_path):
    run = str(tmp_path)
    at = run_files.stamp("2026-12-06T00:00:00Z")
    run_files.add_usage(run, "7", 1, at, at + 3600, 4, 8, 64)
    run_files.add_usage(run, "7", 1, at, at + 3600, 4, 8, 64)  # the same start again: counted once
    run_files.add_usage(run, "7", 2, at + 5400, at + 9000, 3, 8, 48)
    usage = run_files.read_usage(run)
    assert usage == dict(first="2026-12-06T00:00:00Z", starts=2, node_s=7 * 3600.0, gpu_s=56 * 3600.0,
                         cpu_s=112 * 3600.0, gpus_per_node=8, last="7 2", jobs="7", jobs_dropped=0)
    assert run_files.usage_totals(usage, None, at + 9000)["cpu_hours"] == 112.0
    now = at + 4 * 3600
    running = dict(time="2026-12-06T03:00:00Z", node_count=2)
    # a running start's CPUs are not known here: no CPU-hours rather than too few
    assert run_files.usage_totals(usage, running, now) == dict(wall_s=4 * 3600.0, node_hours=9.0, gpu_hours=72.0,
                                                               cpu_hours=None, starts=3)
    assert run_files.usage_totals({}, None, now) is None
    (tmp_path / run_files.USAGE).write_text('{"starts": "3", "node_s": 1e400, "first": 5}')
    assert run_files.read_usage(run) == {}  # none of its fields of its type


def test_usage_keeps_the_newest_training_job_ids_and_counts_those_it_drops(tmp_path, monkeypatch):
    monkeypatch.setattr(run_files, "USAGE_JOBS_KEPT", 2)
    run = str(tmp_path)
    for start, job_id in enumerate(["7", "9", "7", "11"], 1):
        run_files.add_usage(run, job_id, start, 0, 60, 1, 0)
    assert run_files.read_usage(run)["jobs"] == "7 11" and run_files.read_usage(run)["jobs_dropped"] == 1


def test_a_jobs_cpus_are_slurms_per_node_counts_else_the_batch_nodes_on_each():
    assert run_files.job_cpus("2(x3),1", "2", 4) == 7
    assert run_files.job_cpus("64", "64", 1) == 64
    assert run_files.job_cpus(None, "8", 3) == 24
    assert run_files.job_cpus("2(x", "8", 3) == 24  # not Slurm's shape: the batch node's
    assert run_files.job_cpus("", None, 3) == 0


def test_each_starts_use_is_its_nodes_from_its_start_line_to_its_end_line(tmp_path):
    lines = [dict(job_id="7", start=1, nodes="n[1-4]", left="", time="2026-12-06T00:00:00Z", node_count=4),
             dict(event="start", job_id="7", start=1, step=0),
             dict(event="end", job_id="7", start=1, how="requeued", exit_code=0, time="2026-12-06T01:00:00Z"),
             dict(job_id="7", start=2, nodes="n[1-3]", left="n4", time="2026-12-06T01:30:00Z", node_count=3),
             dict(job_id="7", start=3, nodes="n[1-3]", left="", time="2026-12-06T02:30:00Z", node_count=3)]
    used = run_files.usage(lines, run_files.stamp("2026-12-06T03:30:00Z"))
    # start 2 has no end line (its batch node lost): none; start 3 runs to now
    assert [(u["start"], u["node_count"], u["seconds"], u["running"]) for u in used] == [
        (1, 4, 3600.0, False), (2, 3, 0.0, False), (3, 3, 3600.0, True)]


def test_run_notify_entries_are_checked_without_showing_a_url():
    assert notify_errors([dict(url="https://hooks.slack.com/services/T/B/x", format="slack"),
                          dict(url="http://10.0.0.1:8080/hook", format="json")]) == []
    found = notify_errors([dict(url="ftp://h/secret-token"), dict(url="https://h/x", format="teams"),
                           "https://h/y", dict(url="https://h/z", channel="#ml")])
    assert found == [
        "run_notify[0].url must be an http:// or https:// URL on one line (not shown here: it may hold a token).",
        "run_notify[1].format='teams' must be one of slack, json.",
        'run_notify[2] must be a webhook with a url, such as run_notify: [{url: "{{ vault_slack_webhook }}", '
        'format: slack}].',
        "run_notify[3] has channel: a webhook has url and format alone."]
    assert not any("secret-token" in message for message in found)


def test_a_stop_notice_is_told_as_a_preemptions_or_the_time_limits_by_what_slurm_says(fake, receiver):
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    fake.config["signal_lead"] = 300
    marker = fake.run_dir / run_files.PREEMPTED
    soon = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 200))
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3 * 3600))
    said = []
    for shown in ("JobId=42 JobState=RUNNING PreemptTime=%s EndTime=%s" % (later, later),
                  "JobId=42 JobState=RUNNING PreemptTime=None EndTime=%s" % soon,
                  "JobId=42 JobState=RUNNING PreemptTime=None EndTime=%s" % later):
        (fake.slurm / "show_job").write_text(shown)
        receiver.posts.clear()
        status, out = fake.run(fake.step("echo step 9 > %s" % marker))
        assert status == 0, out
        said.append([body["why"] for _path, body, _at in receiver.posts if body["event"] == "requeue"][0].split(":")[0])
    assert said == ["a preemption notice", "its time limit nears", "a stop notice"]


def test_a_check_that_holds_the_job_for_bad_nodes_and_a_failed_check_are_told(fake, receiver):
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    fake.config["checks"] = [["sh", "-c", "exit %d" % code("REQUEUED_HELD")]]
    status, out = fake.run(fake.step("true"))
    assert status == code("REQUEUED_HELD"), out
    held = receiver.posts[-1][1]
    assert held["event"] == "requeue" and held["why"].startswith("a check found bad nodes (bad_nodes.json)")
    fake.config["checks"] = [["sh", "-c", "exit %d" % code("NODE_CHECK_FAILED")]]
    status, out = fake.run(fake.step("true"))
    failed = receiver.posts[-1][1]
    assert failed["event"] == "failure" and failed["why"] == "exit code %d (NODE_CHECK_FAILED: docs/exit-codes.md)" % (
        code("NODE_CHECK_FAILED"))


def test_a_training_that_lost_a_node_is_told_by_the_next_start_not_as_a_failure(fake, receiver):
    """srun ends the step once Slurm declared the node failed; Slurm then requeues the job."""
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    (fake.bin / "sinfo").write_text("#!/bin/sh\necho n2\n")
    (fake.bin / "sinfo").chmod(0o755)
    status, out = fake.run(fake.step("exit 1"))
    assert status == 1, out
    assert [body["event"] for _path, body, _at in receiver.posts] == ["start"]
    (fake.bin / "sinfo").unlink()
    status, out = fake.run(fake.step("true"), restart=1)
    assert [(body["event"], body["start"]) for _path, body, _at in receiver.posts] == [
        ("start", 1), ("requeue", 1), ("start", 2), ("end", 2)]
    assert receiver.posts[1][1]["why"] == "Slurm requeued it"


def test_a_restart_of_the_ranks_inside_the_job_is_told_as_the_trainer_writes_it(fake, receiver):
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    starts = fake.run_dir / run_files.STARTS
    restart = json.dumps(dict(job_id="42", start=1, event="resume", step=10, restart_in_job=1, failed_ranks=[
        dict(rank=3, node="n2", step=12, error="RuntimeError: fault injected")]))
    other = json.dumps(dict(job_id="41", start=1, event="resume", step=5, restart_in_job=1))
    # the training writes the trainer's lines (another job's too, and one half written first) and ends: the
    # watch's last look tells it, before the end
    status, out = fake.run(fake.step('''
        printf '%%s\\n' '%s' >> %s
        printf '%%s' '%s' >> %s
        sleep 1
        printf '\\n' >> %s''' % (other, starts, restart, starts, starts)))
    assert status == 0, out
    told = [body for _path, body, _at in receiver.posts]
    assert [body["event"] for body in told] == ["start", "restart", "end"]
    assert (told[1]["restart"], told[1]["rank"], told[1]["node"], told[1]["step"]) == (1, 3, "n2", 10)
    assert told[1]["text"] == ("run r1: job 42 start 1 restarted its ranks inside the job (restart 1): rank 3 on n2 "
                               "failed (RuntimeError: fault injected); resumed at step 10")


def test_a_job_its_time_limit_or_a_cancel_ends_is_told_as_such(fake, receiver):
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 5))
    later = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3 * 3600))
    said = []
    for shown in ("JobId=42 JobState=RUNNING Reason=None EndTime=%s" % now,
                  "JobId=42 JobState=CANCELLED Reason=None EndTime=%s" % later,
                  "JobId=42 JobState=PENDING Reason=BeginTime EndTime=%s" % later):
        (fake.slurm / "show_job").write_text(shown)
        receiver.posts.clear()
        step_pid = fake.root / "step.pid"
        if step_pid.exists():
            step_pid.unlink()
        # the step leaves the job's output, so that the job's end is not held by it (killed by pid after)
        proc = fake.start(fake.step("echo $$ > %s; exec sleep 30 >/dev/null 2>&1" % step_pid))
        fake.wait_for(step_pid)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0].decode()
        os.kill(int(step_pid.read_text()), signal.SIGKILL)
        said.append([(body["event"], body.get("why", "")[:24]) for _path, body, _at in receiver.posts][1:])
        assert fake.lines()[-1]["how"] == "killed", out
    # the time limit; a cancel; a requeue Slurm makes (the next start tells it)
    assert said == [[("failure", "its time limit ended it ")], [("stop", "cancelled (SIGTERM, scan")], []]


def test_a_failure_slurm_then_requeues_is_followed_by_the_requeue_and_a_requeue_told_is_not_told_again(fake, receiver):
    """The ranks fail on a lost peer before Slurm finds their node down; Slurm requeues the job after."""
    hooks(fake, dict(url=receiver.url("/json"), format="json"))
    status, out = run_logged(fake, fake.step('''
        echo "[rank1]: Traceback (most recent call last):"
        echo "[rank1]:   File \\"train.py\\", line 3, in step"
        echo "[rank1]: RuntimeError: Connection closed by peer [10.0.0.2]:4242"
        exit 1'''))
    assert status == 1
    assert "every traceback is a lost peer's: a process or a node was lost" in receiver.posts[-1][1]["why"]
    status, out = fake.run(fake.step("echo step 3 > %s" % (fake.run_dir / run_files.PREEMPTED)), restart=1)
    status, out = fake.run(fake.step("true"), restart=2)
    told = [(body["event"], body["start"]) for _path, body, _at in receiver.posts]
    # start 2 asked for its requeue itself and told it: start 3 does not tell it again
    assert told == [("start", 1), ("failure", 1), ("requeue", 1), ("start", 2), ("requeue", 2), ("start", 3),
                    ("end", 3)], told
