"""recovery (module_utils) and the callbacks' lines of it: a job's recoveries as the watch tells them,
from the run's starts.jsonl, the trainer's events and Slurm's view of the nodes a requeued job's
last start had. Here, not beside module_utils' tests: ansible-test gives those no callback."""

import json
import os

from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import event_lines
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import recovery

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")
# `scontrol show node -o` of the local cluster's node 1 (recorded idle in scontrol_show_node.txt) with
# the state and reason Slurm 22.05 gives a node once SlurmdTimeout passed without an answer from it
DOWN = open(os.path.join(FIXTURES, "scontrol_show_node.txt")).read().splitlines()[1].replace(
    "State=IDLE", "State=DOWN+NOT_RESPONDING").rstrip() + " Reason=Not responding [slurm@2026-12-04T22:10:31]"


class Client:
    """The Slurm client as recovery uses it: scontrol show node of a host list."""

    def __init__(self, out="", rc=0):
        self.out, self.rc, self.calls = out, rc, []

    def bin(self, name):
        return "/usr/bin/" + name

    def run(self, argv, ok_rcs=(0,)):
        self.calls.append(argv)
        assert self.rc in ok_rcs
        return self.rc, self.out, ""


def starts_file(tmp_path, *lines):
    path = tmp_path / "starts.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def start(job_id, number, nodes, left=""):
    return dict(job_id=job_id, start=number, nodes=nodes, left=left, time="2026-12-04T22:00:0%dZ" % number)


def job(state="RUNNING", restarts=0, job_id="45"):
    return dict(job_id=job_id, state=state, restarts=restarts)


def test_a_requeued_job_names_the_nodes_of_its_last_start_that_slurm_has_out_of_service(tmp_path):
    path = starts_file(tmp_path, start("44", 1, "w[0-2]"), start("45", 1, "w[0-2]"))
    client = Client(DOWN)
    found = recovery.recovery(client, job("PENDING", 1), path, [])
    assert client.calls == [["/usr/bin/scontrol", "show", "node", "-o", "w[0-2]"]]
    assert found["requeued"] and found["start"] == 2 and found["nodes"] is None
    assert found["previous"] == dict(job_id="45", start=1, nodes="w[0-2]", how=None)
    assert found["lost"] == {"slurm-worker-1": "down+not_responding: Not responding [slurm@2026-12-04T22:10:31]"}
    assert found["lost_count"] == 1
    seen = set()
    lines = event_lines("ctl", dict(recovery=found), seen)
    assert lines == ["[ctl] job 45: start 1 on w[0-2] ended and the job is requeued (start 2 next): lost slurm-worker-1 "
                     "(down+not_responding: Not responding [slurm@2026-12-04T22:10:31])"]
    assert event_lines("ctl", dict(recovery=found), seen) == []  # said once


def test_the_requeue_line_names_the_start_that_ended_though_the_next_one_has_begun_before_the_watch_looks(tmp_path):
    """Slurm said PENDING (requeued once), and by the time starts.jsonl was read the next start had
    written its line: the line is built from the ended start's own lines, start 1 and its end."""
    path = starts_file(tmp_path, start("45", 1, "w[0-2]"),
                       dict(event="end", job_id="45", start=1, how="requeued", exit_code=0, time="E"),
                       start("45", 2, "w[0,2-3]", left="w1"))
    client = Client(DOWN)
    found = recovery.recovery(client, job("PENDING", 1), path, [])
    assert client.calls == [["/usr/bin/scontrol", "show", "node", "-o", "w[0-2]"]]
    assert found["previous"] == dict(job_id="45", start=1, nodes="w[0-2]", how="requeued") and found["nodes"] is None
    assert event_lines("ctl", dict(recovery=found), set()) == [
        "[ctl] job 45: start 1 on w[0-2] ended and the job is requeued (start 2 next): lost slurm-worker-1 "
        "(down+not_responding: Not responding [slurm@2026-12-04T22:10:31])"]
    # a start whose own line is not among those read is not named
    path = starts_file(tmp_path, start("45", 2, "w[0,2-3]", left="w1"))
    assert recovery.recovery(Client(DOWN), job("PENDING", 1), path, [])["previous"] is None


def test_a_running_job_asks_slurm_nothing_and_its_next_start_names_the_nodes_it_lacks(tmp_path):
    path = starts_file(tmp_path, start("45", 1, "w[0-2]"), start("45", 2, "w[0,2-3]", left="w1"))
    client = Client()
    resume = {"event": "resume", "step": 40, "checkpoint": "/ws/run/checkpoints/step_000040.pt", "job_id": "45",
              "start": 2, "discarded_records": 2, "steps_lost": 2}
    found = recovery.recovery(client, job("RUNNING", 1), path, [{"step": 41, "loss": 3.0}, resume])
    assert client.calls == [] and not found["requeued"] and found["lost"] == {}
    assert found["start"] == 2 and found["nodes"] == "w[0,2-3]" and found["left"] == "w1"
    assert found["resumed"]["step"] == 40 and found["resumed"]["discarded_records"] == 2
    resumed = "[ctl] job 45 start 2 resumed at step 40 from step_000040.pt (steps 41 to 42, recorded past it, train again)"
    # the watch saw the job wait requeued and said so: now the start that followed
    seen = set()
    event_lines("ctl", dict(recovery=recovery.recovery(Client(DOWN), job("PENDING", 1), starts_file(
        tmp_path, start("45", 1, "w[0-2]")), [])), seen)
    assert event_lines("ctl", dict(recovery=found), seen) == [
        "[ctl] job 45 start 2 on w[0,2-3]: without w1, which start 1 had", resumed]
    # it did not (start 2 began before it looked): the requeue is told with the start, once
    seen = set()
    assert event_lines("ctl", dict(recovery=found), seen) == [
        "[ctl] job 45: start 1 on w[0-2] ended and the job was requeued; start 2 began on w[0,2-3] before the watch "
        "looked: without w1, which start 1 had", resumed]
    assert event_lines("ctl", dict(recovery=found), seen) == []


def test_where_a_start_resumed_is_found_in_the_starts_file_long_after_the_metrics_tail_passed_it(tmp_path):
    """The trainer adds its start and resume events to starts.jsonl too: a watch that begins after
    thousands of records (a rerun re-attaching) still says where the start resumed."""
    resume = {"event": "resume", "step": 40, "checkpoint": "/ws/run/checkpoints/step_000040.pt", "job_id": "45",
              "start": 2}
    # (and the job script's end line of each start, which the status playbook reads: not a bad line)
    path = starts_file(tmp_path, start("45", 1, "w[0-2]"), {"event": "start", "step": 0, "job_id": "45", "start": 1},
                       {"event": "end", "job_id": "45", "start": 1, "how": "requeued", "exit_code": 0, "time": "E"},
                       start("45", 2, "w[0-2]"), resume)
    found = recovery.recovery(Client(), job("RUNNING", 1), path, [{"step": 4000, "loss": 2.0}] * 16)
    assert found["unreadable_starts"] == 0 and found["previous"]["start"] == 1
    assert event_lines("ctl", dict(recovery=found), set()) == [
        "[ctl] job 45: start 1 on w[0-2] ended and the job was requeued; start 2 began on w[0-2] before the watch "
        "looked: every node start 1 had",
        "[ctl] job 45 start 2 resumed at step 40 from step_000040.pt"]


def test_a_new_job_of_the_run_is_told_against_the_last_start_of_the_job_before(tmp_path):
    path = starts_file(tmp_path, start("45", 1, "w[0-2]"), start("47", 1, "w[0-2]"))
    found = recovery.recovery(Client(), job("RUNNING", 0, job_id="47"), path, [
        {"event": "resume", "step": 10, "checkpoint": "/ws/c/step_000010.pt", "job_id": "47", "start": 1}])
    assert event_lines("ctl", dict(recovery=found), set()) == [
        "[ctl] job 47 start 1 on w[0-2]: every node start 1 of job 45 had",
        "[ctl] job 47 start 1 resumed at step 10 from step_000010.pt"]


def test_a_restart_inside_the_job_names_the_rank_that_failed(tmp_path):
    path = starts_file(tmp_path, start("45", 1, "w[0-2]"))
    failed = [{"rank": 3, "node": "w1", "step": 12, "error": "RuntimeError: CUDA error: an illegal memory access"},
              {"rank": 0, "node": "w0", "step": 12, "error": "RuntimeError: Connection closed by peer"}]
    restarted = {"event": "resume", "step": 10, "checkpoint": "/ws/c/step_000010.pt", "job_id": "45", "start": 1,
                 "restart_in_job": 1, "failed_ranks": failed}
    found = recovery.recovery(Client(), job(), path, [{"event": "start", "step": 0, "job_id": "45", "start": 1},
                                                      restarted])
    assert found["previous"] is None and found["resumed"]["restart_in_job"] == 1
    assert event_lines("ctl", dict(recovery=found), set()) == [
        "[ctl] job 45 start 1: rank 3 on w1 failed after step 12 (RuntimeError: CUDA error: an illegal memory access), "
        "and 1 more rank(s) after it; torch.distributed.run restarted every rank on the same nodes (restart 1 in the "
        "job); resumed at step 10 from step_000010.pt"]
    # the first start of a run is no recovery
    first = recovery.recovery(Client(), job(), path, [{"event": "start", "step": 0, "job_id": "45", "start": 1}])
    assert event_lines("ctl", dict(recovery=first), set()) == []


def test_lines_that_are_no_start_record_are_counted_and_the_others_read(tmp_path):
    path = starts_file(tmp_path, "{not json", start("45", 1, "w[0-2]"), json.dumps(["a list"]),
                       dict(job_id="45", start="2", nodes="w0"))
    found = recovery.recovery(Client(), job(), path, [])
    assert found["unreadable_starts"] == 3 and found["nodes"] == "w[0-2]"
    assert "3 of its last lines are not a start record" in recovery.unreadable_starts_message(path, 3)


def test_no_start_of_the_job_recorded_yet(tmp_path):
    assert recovery.recovery(Client(), job(), str(tmp_path / "missing.jsonl"), []) is None
    path = starts_file(tmp_path, start("44", 1, "w[0-2]"))
    assert recovery.recovery(Client(), job(), path, []) is None


def test_slurm_that_does_not_say_leaves_the_lost_nodes_unnamed(tmp_path):
    path = starts_file(tmp_path, start("45", 1, "w[0-2]"))
    found = recovery.recovery(Client("", rc=1), job("PENDING", 1), path, [])
    assert found["lost"] == {} and found["requeued"]
    assert event_lines("ctl", dict(recovery=found), set()) == [
        "[ctl] job 45: start 1 on w[0-2] ended and the job is requeued (start 2 next): none of its nodes is out of "
        "service"]


def test_the_read_is_the_files_end_whatever_its_length(tmp_path):
    many = [start("%d" % (100 + i), 1, "w[0-2]") for i in range(5000)] + [start("45", 1, "w[0-2]")]
    found = recovery.recovery(Client(), job(), starts_file(tmp_path, *many), [])
    assert found["previous"] == dict(job_id="5099", start=1, nodes="w[0-2]", how=None)


def test_a_node_list_that_is_no_host_list_is_not_handed_to_scontrol(tmp_path):
    """starts.jsonl lies in the run directory, which others may write: an option is no host list."""
    for planted in ("--cluster=other", "w[0-2] x", "w0;rm"):
        client = Client(DOWN)
        found = recovery.recovery(client, job("PENDING", 1), starts_file(tmp_path, start("45", 1, planted)), [])
        assert client.calls == [] and found["lost"] == {} and found["requeued"]
