"""exclusion: a job its node check held is released without its bad nodes, or cancelled."""

import datetime
import json

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import exclusion

BAD_NODES = {"n2": dict(reason="no network interface ib0 on n2 (it has eth0, lo)", job_id="42",
                        time="2026-11-30T10:00:00Z"),
             "n4": dict(reason="n4 did not answer the node check within 60 s", job_id="42",
                        time="2026-11-30T10:00:00Z")}


def held(**fields):
    """A job as show_job gives it, held by `scontrol requeuehold` after its node check."""
    job = dict(job_id="42", name="gpt2-pretrain", state="PENDING", reason="job_requeued_in_held_state",
               partition="gpu", num_nodes=2, excluded_nodes=[], restarts=1, active=True,
               submit_time="2026-11-30T10:00:05")
    job.update(fields)
    return job


def node(name, state="idle", flags=(), partitions=("gpu",)):
    return dict(name=name, state=state, state_flags=list(flags), partitions=list(partitions))


@pytest.mark.parametrize("fields, answer", [
    (dict(), True),
    (dict(reason="job_requeued_in_held_state_by_user"), True),
    (dict(state="RUNNING"), False),
    (dict(reason="JobHeldUser"), False),
    (dict(reason="BeginTime"), False),
    (dict(reason=None), False),
])
def test_held_after_check(fields, answer):
    assert exclusion.held_after_check(held(**fields)) is answer


def test_read_bad_nodes(tmp_path):
    path = tmp_path / "bad_nodes.json"
    assert exclusion.read_bad_nodes(str(path)) == {}  # missing
    path.write_text("{not json")
    assert exclusion.read_bad_nodes(str(path)) == {}
    path.write_text("[\"n1\"]")
    assert exclusion.read_bad_nodes(str(path)) == {}  # not a mapping
    path.write_text(json.dumps(dict(BAD_NODES, n7="edited by hand", n8={})))
    assert exclusion.read_bad_nodes(str(path)) == {
        "n2": "no network interface ib0 on n2 (it has eth0, lo)",
        "n4": "n4 did not answer the node check within 60 s",
        "n7": "edited by hand", "n8": "bad"}


def test_load_bad_nodes(tmp_path):
    path = tmp_path / "bad_nodes.json"
    assert exclusion.load_bad_nodes(str(path)) == ({}, None)  # missing: no bad nodes
    path.write_text(json.dumps(BAD_NODES))
    assert exclusion.load_bad_nodes(str(path)) == (BAD_NODES, None)


@pytest.mark.parametrize("content, why", [
    ("{not json", "not valid JSON: it is no JSON ("),
    ("[\"n1\"]", "not a JSON object of nodes"),
    (b"{\"n\xff\": {}}", "not UTF-8 text"),
])
def test_load_bad_nodes_that_cannot_be_used_names_the_file_and_the_fix(tmp_path, content, why):
    path = tmp_path / "bad_nodes.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    record, warning = exclusion.load_bad_nodes(str(path))
    assert record == {}
    assert warning.startswith("The run's bad-nodes file %s cannot be used (%s" % (path, why))
    assert "keeps no node off" in warning and "Fix it" in warning and "delete it" in warning


def test_load_bad_nodes_follows_no_link_and_reads_a_bounded_size(tmp_path, monkeypatch):
    target, link = tmp_path / "elsewhere.json", tmp_path / "bad_nodes.json"
    target.write_text(json.dumps(BAD_NODES))
    link.symlink_to(target)
    record, warning = exclusion.load_bad_nodes(str(link))
    assert record == {} and "(a link, not followed)" in warning
    assert exclusion.read_bad_nodes(str(link)) == {}
    monkeypatch.setattr(exclusion, "BAD_NODES_MAX_BYTES", 10)
    record, warning = exclusion.load_bad_nodes(str(target))
    assert record == {} and "more than" in warning and str(target) in warning


def test_plan_excludes_the_bad_nodes_and_those_the_job_kept_off_already():
    nodes = [node("n1"), node("n2"), node("n3", state="allocated"), node("n4", state="mixed"),
             node("n5", flags=["drain"]), node("n6", state="down"), node("n7", partitions=["cpu"]),
             node("n8", state="idle")]
    exclude, left = exclusion.plan(held(excluded_nodes=["n8"]), {"n2": "r", "n4": "r"}, nodes)
    assert exclude == ["n2", "n4", "n8"]
    # busy nodes still count (the job waits for them); drained, down and other partitions' do not
    assert left == ["n1", "n3"]
    assert exclusion.plan(held(excluded_nodes=None), {}, nodes) == ([], ["n1", "n2", "n3", "n4", "n8"])


class Client:
    """The slurm_client.Slurm methods settle() uses; records what it was asked to run."""

    def __init__(self, nodes, after=None):
        self._nodes, self.after = nodes, after
        self.ran, self.cancelled, self.shown = [], [], []

    def nodes(self):
        return self._nodes

    def bin(self, name):
        return "/usr/bin/" + name

    def run(self, argv, ok_rcs=(0,)):
        self.ran.append((argv, tuple(ok_rcs)))
        return 0, "", ""

    def cancel(self, job_ids):
        self.cancelled.append(list(job_ids))

    def show_job(self, job_id):
        self.shown.append(job_id)
        return self.after or held(job_id=job_id, reason="BeginTime")


def bad_nodes_file(tmp_path, entries=None):
    path = tmp_path / "bad_nodes.json"
    path.write_text(json.dumps(BAD_NODES if entries is None else entries))
    return str(path)


FOUR = [node("n1"), node("n2"), node("n3"), node("n4")]


def at(text):
    """A clock stopped at text (scontrol's local time), and the sleeps settle() asks for."""
    slept = []
    return (lambda: datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f")), slept.append, slept


def test_settle_excludes_releases_and_starts_the_job_two_seconds_after_its_requeue(tmp_path):
    client = Client(FOUR)
    now, sleep, slept = at("2026-11-30T10:00:05.250")  # the watcher saw the held job 0.25 s after the requeue
    event, message = exclusion.settle(client, held(excluded_nodes=["n9"]), bad_nodes_file(tmp_path),
                                      sleep=sleep, now=now)
    assert message is None and client.cancelled == []
    # its nodes refuse a relaunch in the second of the requeue ("Job credential revoked"), so the
    # watcher waits out the rest of those two seconds before it releases the job
    assert slept == [1.75]
    assert client.ran == [
        (["/usr/bin/scontrol", "update", "JobId=42", "ExcNodeList=n2,n4,n9"], (0,)),
        (["/usr/bin/scontrol", "update", "JobId=42", "StartTime=2026-11-30T10:00:07"], (0, 1)),  # a site may forbid it
        (["/usr/bin/scontrol", "release", "42"], (0,)),
    ]
    assert event == dict(
        job_id="42", restarts=1, excluded=["n2", "n4", "n9"], bad={n: e["reason"] for n, e in BAD_NODES.items()},
        message="job 42: node check excluded n2 (no network interface ib0 on n2 (it has eth0, lo)); "
                "n4 (n4 did not answer the node check within 60 s); requeued without them")


@pytest.mark.parametrize("submit_time, clock, start, slept", [
    ("2026-11-30T10:00:05", "2026-11-30T10:00:09.000", "2026-11-30T10:00:07", []),  # seen late: no wait
    ("2026-11-30T10:00:05", "2026-11-30T09:58:00.000", "2026-11-30T10:00:07", [3]),  # this clock behind: 3 s at most
    ("Unknown", "2026-11-30T10:00:05.000", "now+3", []),
    (None, "2026-11-30T10:00:05.000", "now+3", []),
])
def test_settle_starts_the_job_after_the_requeue_whatever_the_clocks(tmp_path, submit_time, clock, start, slept):
    client = Client(FOUR)
    now, sleep, waited = at(clock)
    exclusion.settle(client, held(submit_time=submit_time), bad_nodes_file(tmp_path), sleep=sleep, now=now)
    assert client.ran[1] == (["/usr/bin/scontrol", "update", "JobId=42", "StartTime=" + start], (0, 1))
    assert waited == slept


def test_settle_names_only_the_nodes_it_newly_excludes(tmp_path):
    client = Client(FOUR)
    event, _message = exclusion.settle(client, held(excluded_nodes=["n4"]), bad_nodes_file(tmp_path))
    assert event["message"] == ("job 42: node check excluded n2 (no network interface ib0 on n2 (it has eth0, lo)); "
                                "requeued without it")
    assert event["bad"] == {"n2": BAD_NODES["n2"]["reason"]} and event["excluded"] == ["n2", "n4"]


def test_settle_cancels_when_too_few_nodes_remain(tmp_path):
    client = Client([node("n1"), node("n2"), node("n3", flags=["drain"]), node("n4")])
    path = bad_nodes_file(tmp_path)
    event, message = exclusion.settle(client, held(), path)
    assert event is None and client.cancelled == [["42"]] and client.ran == []
    assert message == "\n".join([
        "Job 42 (gpt2-pretrain) needs 2 node(s), and partition gpu has 1 usable node(s) besides the bad ones (n1). "
        "The job is cancelled; nothing of this run is left queued. Bad nodes:",
        "  n2: no network interface ib0 on n2 (it has eth0, lo)",
        "  n4: n4 did not answer the node check within 60 s",
        "Fix: repair those nodes (or ask the cluster's administrators), then remove them from %s and run the "
        "playbook again; or lower slurm_nodes, or pick another slurm_partition." % path])


def test_settle_with_no_usable_node_left(tmp_path):
    client = Client([node("n2"), node("n4")])
    _event, message = exclusion.settle(client, held(num_nodes=1), bad_nodes_file(tmp_path))
    assert "needs 1 node(s), and partition gpu has 0 usable node(s) besides the bad ones. The job" in message


def test_settler_releases_held_jobs_and_passes_the_others_through(tmp_path):
    client = Client(FOUR)
    settler = exclusion.Settler(client, bad_nodes_file(tmp_path))
    running = held(job_id="41", state="RUNNING", reason="None")
    jobs = settler([running, held()])
    assert jobs[0] is running
    assert jobs[1]["reason"] == "BeginTime" and client.shown == ["42"]  # looked up again after the release
    assert [e["job_id"] for e in settler.events] == ["42"] and settler.failure is None and settler.cancelled == []
    assert ["/usr/bin/scontrol", "release", "42"] in [argv for argv, _opts in client.ran]


def test_settler_keeps_the_first_failure_and_every_cancelled_job(tmp_path):
    client = Client([node("n1"), node("n2"), node("n4")], after=held(state="CANCELLED", active=False))
    settler = exclusion.Settler(client, bad_nodes_file(tmp_path))
    jobs = settler([held(job_id="42"), held(job_id="43", name="other")])
    assert settler.cancelled == ["42", "43"] and client.cancelled == [["42"], ["43"]]
    assert settler.failure.startswith("Job 42 (gpt2-pretrain) needs 2 node(s)") and settler.events == []
    assert [j["state"] for j in jobs] == ["CANCELLED", "CANCELLED"]


@pytest.mark.parametrize("path, check_mode", [(None, False), ("", False), ("set", True)])
def test_settler_does_nothing_in_check_mode_or_without_a_bad_nodes_file(tmp_path, path, check_mode):
    client = Client(FOUR)
    settler = exclusion.Settler(client, bad_nodes_file(tmp_path) if path == "set" else path, check_mode)
    job = held()
    assert settler([job]) == [job]
    assert client.ran == client.cancelled == client.shown == [] and settler.events == [] and settler.failure is None


def test_the_requeue_delay_of_a_job_slurm_requeued_is_lifted_once(tmp_path):
    """After a lost node, or the job's own requeue after a stop notice: PENDING (BeginTime), its
    StartTime Slurm's delay (two minutes; the local cluster's cred_expire 20 s) past the requeue."""
    now, _sleep, _slept = at("2026-11-30T10:00:06.000")
    client = Client(FOUR)
    waiting = held(reason="BeginTime", submit_time="2026-11-30T10:00:05", start_time="2026-11-30T10:02:05")
    settler = exclusion.Settler(client, bad_nodes_file(tmp_path), now=now)
    settler([waiting])
    assert client.ran == [(["/usr/bin/scontrol", "update", "JobId=42", "StartTime=2026-11-30T10:00:07"], (0, 1))]
    assert settler.events == [dict(job_id="42", restarts=1, excluded=[], bad={},
                                   message="job 42: requeued (start 2 begins); Slurm's requeue delay lifted, it "
                                           "starts at 2026-11-30T10:00:07")]
    # lifted already, waiting for nodes, never requeued, or no times to go by: left alone
    for job in (dict(waiting, start_time="2026-11-30T10:00:07"), dict(waiting, waits_for_nodes=True),
                dict(waiting, restarts=0), dict(waiting, start_time="Unknown"), dict(waiting, submit_time=None),
                dict(waiting, reason="Resources"), dict(waiting, state="RUNNING")):
        assert not exclusion.requeue_delayed(job, now), job
