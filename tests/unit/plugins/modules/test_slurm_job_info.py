"""slurm_job_info with a faked run_command (helpers from test_sbatch)."""

import json
import os
import re

from ansible.module_utils import basic
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv, waiter
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP, SACCT_FIELDS
from ansible_collections.llmtrain.slurm.plugins.modules import sbatch, slurm_job_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import (
    SQUEUE, Slurm, fixture, job_text, run, scontrol_job, squeue_rows)
from ansible_collections.llmtrain.slurm.tests.unit.plugins.module_utils.test_log_progress import (
    ADVERSARIAL, CATASTROPHIC, overrun)


def test_job_info_by_ids_with_metrics(monkeypatch, capsys, tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps(dict(step=10, total_steps=40, loss=2.5, tokens_per_s=100.0, eta_s=30)) + "\n")
    s = Slurm(monkeypatch, [
        (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), "")),
        (scontrol_job(18), (0, fixture("scontrol_job_running.txt"), "")),
    ])
    result = run(slurm_job_info.main, dict(job_id=["16", "18"], metrics_file=str(metrics)), capsys)
    s.done()
    assert [j["state"] for j in result["jobs"]] == ["COMPLETED", "RUNNING"]
    assert not result["finished"] and result["job_id"] == "18" and result["state"] == "RUNNING"
    assert result["progress"]["step"] == 10 and result["progress"]["percent"] == 25.0


def test_your_scripts_progress_comes_from_its_log_until_it_writes_metrics(monkeypatch, capsys, tmp_path):
    log = tmp_path / "llmtrain-mine-18.out"
    log.write_text("config tiny: world size 3\niter 0: loss 5.68, time 1ms\niter 10: loss 3.02, time 1ms\n")
    running = re.sub(r"StdOut=\S+", "StdOut=%s" % log, fixture("scontrol_job_running.txt"))
    metrics = tmp_path / "metrics.jsonl"
    args = dict(job_id=["18"], metrics_file=str(metrics), progress_from_log=True)
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    progress = run(slurm_job_info.main, args, capsys)["progress"]
    assert (progress["step"], progress["loss"], progress["source"]) == (10, 3.02, "log")
    # its own pattern
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    progress = run(slurm_job_info.main, dict(args, progress_regex=[r"iter (?P<step>\d+): loss (?P<loss>\S+), time"]),
                   capsys)["progress"]
    assert (progress["step"], progress["loss"]) == (10, 3.02)
    # a metrics file that it writes wins
    metrics.write_text(json.dumps(dict(step=12, total_steps=20, loss=2.9)) + "\n")
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    progress = run(slurm_job_info.main, args, capsys)["progress"]
    assert (progress["step"], progress["percent"], progress["source"]) == (12, 60.0, "metrics")
    # the reference trainer's watch does not read the log
    metrics.unlink()
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    assert run(slurm_job_info.main, dict(args, progress_from_log=False), capsys)["progress"] is None
    # a pattern without a loss is refused before Slurm is asked
    Slurm(monkeypatch, [])
    result = run(slurm_job_info.main, dict(args, progress_regex=[r"iter (?P<step>\d+)"]), capsys)
    assert result["failed"] and "has no (?P<loss>...) group" in result["msg"]


def test_a_progress_pattern_that_backtracks_is_named_in_the_result_and_the_others_read(monkeypatch, capsys, tmp_path):
    log = tmp_path / "llmtrain-mine-18.out"
    # the poll's 200 lines: 198 on which the built-in patterns of 0.1.0 backtracked for minutes
    log.write_text("\n".join(["iter 10: loss 3.02, time 1ms"] + ADVERSARIAL[:198] + ["1" * 28]) + "\n")
    running = re.sub(r"StdOut=\S+", "StdOut=%s" % log, fixture("scontrol_job_running.txt"))
    args = dict(job_id=["18"], progress_from_log=True)
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    result = run(slurm_job_info.main, args, capsys)
    assert (result["progress"]["step"], result["progress"]["loss"]) == (10, 3.02) and "progress_warnings" not in result
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    mine = [CATASTROPHIC, r"^iter (?P<step>\d+): loss (?P<loss>\S+),"]
    result = run(slurm_job_info.main, dict(args, progress_regex=mine), capsys)
    assert (result["progress"]["step"], result["progress"]["loss"]) == (10, 3.02)
    assert result["progress_warnings"] == {CATASTROPHIC: overrun(CATASTROPHIC, "line 1 from the end")}


def test_job_info_by_name_and_forgotten_jobs(monkeypatch, capsys, tmp_path):
    rows = squeue_rows(["19", "CANCELLED", "train", "(null)"], ["5", "COMPLETED", "other", "(null)"])
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, rows, "")),
        (scontrol_job(19), (0, fixture("scontrol_job_cancelled.txt"), "")),
    ])
    result = run(slurm_job_info.main, dict(name="train", metrics_file=str(tmp_path / "none.jsonl")), capsys)
    s.done()
    assert [j["job_id"] for j in result["jobs"]] == ["19"] and result["finished"] and result["progress"] is None

    s = Slurm(monkeypatch, [
        (scontrol_job(3), (1, "", fixture("scontrol_job_invalid.txt"))),
        (["/usr/bin/sacct", "-X", "--noheader", "--parsable2", "--delimiter=" + FIELD_SEP,
          "--format=" + ",".join(SACCT_FIELDS), "--jobs=3"], (1, "", fixture("sacct_disabled.txt"))),
    ], bins=("scontrol", "squeue", "sacct"))
    result = run(slurm_job_info.main, dict(job_id=["3"]), capsys)
    s.done()
    assert result["jobs"][0]["state"] == "UNKNOWN" and result["jobs"][0]["known"] is False
    assert result["finished"]


class Clock:
    """time.monotonic/time.sleep for the module: sleeping moves the clock, nothing waits."""

    def __init__(self, monkeypatch):
        self.now, self.sleeps = 1000.0, []
        monkeypatch.setattr(waiter.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(waiter.time, "sleep", self.sleep)

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_timeout_returns_at_the_check_that_sees_the_end(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))] * 3
              + [(scontrol_job(18), (0, job_text("completed", 18), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], wait_timeout=10), capsys)
    s.done()
    assert result["finished"] and result["checks"] == 4 and result["jobs"][0]["state"] == "COMPLETED"
    assert clock.sleeps == [1.0, 1.0, 1.0]  # one check a second, none after the end


def test_wait_timeout_gives_up_after_its_time_a_second_after_the_last_check(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))] * 3)
    result = run(slurm_job_info.main, dict(job_id=["18"], wait_timeout=2.5), capsys)
    s.done()
    assert not result["finished"] and result["checks"] == 3
    assert clock.now == 1003.0  # the next retry's first check comes at least a second after this one's last


def test_without_wait_timeout_it_checks_once(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"]), capsys)
    s.done()
    assert result["checks"] == 1 and clock.sleeps == []


# ---------------------------------------------------------------- a controller that does not answer

UNREACHABLE = (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")


def test_it_rides_out_a_controller_that_does_not_answer_for_a_while(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), UNREACHABLE)] * 2
              + [(scontrol_job(18), (0, job_text("completed", 18), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], unreachable_timeout=5), capsys)
    s.done()
    assert not result.get("failed") and result["finished"] and result["state"] == "COMPLETED"
    assert result["checks"] == 1 and clock.sleeps == [1.0, 1.0]  # a retry a second


def test_it_gives_up_on_the_controller_after_unreachable_timeout(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))]
              + [(scontrol_job(18), UNREACHABLE)] * 4)
    result = run(slurm_job_info.main, dict(job_id=["18"], wait_timeout=60, unreachable_timeout=2.5), capsys)
    s.done()  # unanswered at 0, 1, 2 and 3 s after the first: 3 >= 2.5
    assert result["failed"] and result["controller_unreachable"] is True and result["checks"] == 1
    assert "has not answered for 3 s" in result["msg"] and "re-attaches" in result["msg"]
    assert "Unable to contact slurm controller" in result["msg"] and "keep running" in result["msg"]
    assert clock.now == 1004.0


def test_unreachable_timeout_0_fails_at_the_first_unanswered_query(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), UNREACHABLE)])
    result = run(slurm_job_info.main, dict(job_id=["18"], wait_timeout=10), capsys)
    s.done()
    assert result["failed"] and result["controller_unreachable"] and "has not answered for 0 s" in result["msg"]
    assert clock.sleeps == []


def test_a_controller_down_while_looking_jobs_up_by_name_is_ridden_out_too(monkeypatch, capsys):
    Clock(monkeypatch)
    rows = squeue_rows(["19", "CANCELLED", "train", "(null)"])
    s = Slurm(monkeypatch, [(SQUEUE, (1, "", "squeue: error: Unable to contact slurm controller (connect failure)\n")),
                            (SQUEUE, (0, rows, "")),
                            (scontrol_job(19), (0, fixture("scontrol_job_cancelled.txt"), ""))])
    result = run(slurm_job_info.main, dict(name="train", unreachable_timeout=10), capsys)
    s.done()
    assert result["finished"] and result["job_id"] == "19"


def test_other_slurm_errors_fail_at_once(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (1, "", "scontrol: error: Access/permission denied\n"))])
    result = run(slurm_job_info.main, dict(job_id=["18"], unreachable_timeout=600), capsys)
    s.done()
    assert result["failed"] and "Access/permission denied" in result["msg"]
    assert "controller_unreachable" not in result and clock.sleeps == []


# ---------------------------------------------------------------- the log of a failed job

def job_with_output(name, job_id, path):
    return re.sub(r"StdOut=\S+", "StdOut=" + str(path), job_text(name, job_id))


def test_log_lines_reads_the_output_of_a_finished_job(monkeypatch, capsys, tmp_path):
    log = tmp_path / "slurm-17.out"
    log.write_text("step 1/10 loss 5.0\n[rank1]: Traceback (most recent call last):\n"
                   '[rank1]:   File "train.py", line 9, in <module>\n[rank1]: RuntimeError: boom\n'
                   "srun: error: slurm-worker-0: task 1: Exited with exit code 1\n")
    s = Slurm(monkeypatch, [(scontrol_job(17), (0, job_with_output("failed", 17, log), ""))])
    result = run(slurm_job_info.main, dict(job_id=["17"], log_lines=2), capsys)
    s.done()
    assert result["finished"] and result["log"]["path"] == str(log)
    assert result["log"]["failed_rank"] == "1"
    assert result["log"]["traceback"] == [
        "Traceback (most recent call last):", '  File "train.py", line 9, in <module>', "RuntimeError: boom"]
    assert result["log"]["tail"] == ["[rank1]: RuntimeError: boom",
                                     "srun: error: slurm-worker-0: task 1: Exited with exit code 1"]


def test_log_lines_reads_nothing_while_the_job_runs_or_when_not_asked(monkeypatch, capsys, tmp_path):
    log = tmp_path / "slurm-18.out"
    log.write_text("[rank0]: Traceback (most recent call last):\n[rank0]: RuntimeError: not yet\n")
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, job_with_output("running", 18, log), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], log_lines=30), capsys)
    s.done()
    assert not result["finished"] and "log" not in result

    s = Slurm(monkeypatch, [(scontrol_job(17), (0, job_with_output("failed", 17, log), ""))])
    result = run(slurm_job_info.main, dict(job_id=["17"]), capsys)
    s.done()
    assert result["finished"] and "log" not in result


def test_log_lines_with_an_unreadable_output_file_warns(monkeypatch, capsys, tmp_path):
    warned = []  # (where ansible-core puts warnings depends on what else this process loaded)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, warning, **kwargs: warned.append(warning))
    s = Slurm(monkeypatch, [(scontrol_job(17), (0, job_with_output("failed", 17, tmp_path / "gone.out"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["17"], log_lines=5), capsys)
    s.done()
    assert result["finished"] and result["log"] is None
    assert len(warned) == 1 and warned[0].startswith("cannot read %s: [Errno 2]" % (tmp_path / "gone.out"))


# ---------------------------------------------------------------- a job that waits for lost nodes

SCONTROL_NODES = ["/usr/bin/scontrol", "show", "node", "-o"]
SINFO_DEBUG = ["/usr/bin/sinfo", "--partition=debug", "--noheader", "--format=%D %T"]
WITH_SINFO = ("scontrol", "squeue", "scancel", "sinfo")


def requeued_job(job_id, reason="BeginTime", restarts=1, num_nodes=3, stdout="/tmp/fx/fx-pending-21.out"):
    """The recorded pending job, requeued after a node failure, asking for num_nodes nodes."""
    text = job_text("pending", job_id)
    for key, value in (("Reason", reason), ("Restarts", restarts), ("NumNodes", num_nodes), ("StdOut", stdout)):
        text = re.sub(r"\b%s=\S+" % key, "%s=%s" % (key, value), text)
    return text


def nodes_with(states):
    """The recorded nodes (all in partition debug) in these states."""
    lines = fixture("scontrol_show_node.txt").splitlines()
    return "".join(line.replace("State=IDLE", "State=" + state) + "\n" for line, state in zip(lines, states))


def counted(*lines):
    """sinfo's answer for partition debug: its nodes counted per state (recorded: sinfo_states.txt)."""
    return "".join(line + "\n" for line in lines)


def test_a_requeued_job_the_partition_cannot_hold_waits_for_nodes(monkeypatch, capsys, tmp_path):
    clock = Clock(monkeypatch)
    log = tmp_path / "pending.out"
    log.write_text("[rank4]: RuntimeError: [c10d] Connection closed by peer\n")
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, requeued_job(21, stdout=log), "")),
                            (SINFO_DEBUG, (0, counted("2 idle", "1 down*"), ""))], bins=WITH_SINFO)
    result = run(slurm_job_info.main, dict(job_id=["21"], wait_timeout=60, log_lines=5), capsys)
    s.done()
    job = result["jobs"][0]
    assert (job["state"], job["reason"], job["restarts"], job["num_nodes"]) == ("PENDING", "BeginTime", 1, 3)
    assert job["waits_for_nodes"] is True and not result["finished"]
    assert result["checks"] == 1 and clock.sleeps == []  # returns at once, not after wait_timeout
    assert result["log"]["tail"] == ["[rank4]: RuntimeError: [c10d] Connection closed by peer"]


def test_a_requeued_job_with_enough_nodes_is_just_pending(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, requeued_job(21), "")),
                            (SINFO_DEBUG, (0, counted("1 allocated", "1 idle", "1 mixed"), ""))] * 3, bins=WITH_SINFO)
    result = run(slurm_job_info.main, dict(job_id=["21"], wait_timeout=2.5, log_lines=5), capsys)
    s.done()
    assert result["jobs"][0]["waits_for_nodes"] is False and result["checks"] == 3 and clock.sleeps == [1.0, 1.0, 1.0]
    assert "log" not in result


def test_drained_nodes_do_not_count_for_a_requeued_job(monkeypatch, capsys):
    Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, requeued_job(21, num_nodes=2), "")),
                            (SINFO_DEBUG, (0, fixture("sinfo_states.txt"), ""))], bins=WITH_SINFO)
    result = run(slurm_job_info.main, dict(job_id=["21"], wait_timeout=60), capsys)
    s.done()
    assert result["jobs"][0]["waits_for_nodes"] is True


def test_a_pending_job_that_was_never_requeued_does_not_look_at_the_nodes(monkeypatch, capsys):
    Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, requeued_job(21, reason="Resources", restarts=0), ""))])
    result = run(slurm_job_info.main, dict(job_id=["21"]), capsys)
    s.done()  # no sinfo, no scontrol show node
    assert result["jobs"][0]["waits_for_nodes"] is False


def test_a_job_pending_for_down_nodes_returns_at_once(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    job = requeued_job(21, reason="ReqNodeNotAvail,_UnavailableNodes:n1", restarts=0)
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, job, ""))])
    result = run(slurm_job_info.main, dict(job_id=["21"], wait_timeout=60), capsys)
    s.done()
    assert result["jobs"][0]["waits_for_nodes"] is True and result["checks"] == 1 and clock.sleeps == []


# ---------------------------------------------------------------- a job its node check held
# settled by the module that submitted it, watching it (sbatch state=watched); slurm_job_info only reads

SCONTROL = "/usr/bin/scontrol"
NO_IB = "no network interface ib0 on slurm-worker-1 (it has eth0, lo): set nccl_env_socket_ifname"


def bad_nodes_file(path, **reasons):
    path.write_text(json.dumps(dict((node.replace("_", "-"), dict(reason=reason, job_id="21", time="2026-11-30T10:00:00Z"))
                                    for node, reason in reasons.items())))
    return str(path)


def held_job(job_id, num_nodes=2, excluded="(null)"):
    text = requeued_job(job_id, reason="job_requeued_in_held_state", num_nodes=num_nodes)
    return re.sub(r"\bExcNodeList=\S+", "ExcNodeList=" + excluded, text)


def released_job(job_id, excluded):
    return re.sub(r"\bExcNodeList=\S+", "ExcNodeList=" + excluded, requeued_job(job_id, num_nodes=2))


def watched(**args):
    return dict(dict(name="train", content="#!/bin/bash\nsrun true\n", state="watched", job_id="21"), **args)


def test_a_held_job_is_released_without_its_bad_nodes(monkeypatch, capsys, tmp_path):
    Clock(monkeypatch)
    path = bad_nodes_file(tmp_path / "bad_nodes.json", slurm_worker_1=NO_IB)
    s = Slurm(monkeypatch, [
        (scontrol_job(21), (0, held_job(21), "")),
        (SINFO_DEBUG, (0, counted("1 mixed", "2 idle"), "")),  # look_up: a requeued job
        (SCONTROL_NODES, (0, nodes_with(["IDLE", "IDLE", "MIXED"]), "")),  # settle: which nodes are left
        ([SCONTROL, "update", "JobId=21", "ExcNodeList=slurm-worker-1"], (0, "", "")),
        ([SCONTROL, "update", "JobId=21", "StartTime=2026-11-29T21:44:31"], (0, "", "")),  # SubmitTime + 2 s
        ([SCONTROL, "release", "21"], (0, "", "")),
        (scontrol_job(21), (0, released_job(21, "slurm-worker-1"), "")),
    ], bins=WITH_SINFO)
    result = run(sbatch.main, watched(bad_nodes_file=path, wait_timeout=0), capsys)
    s.done()
    assert not result.get("failed") and result["changed"] is True and result["submitted"] is False
    assert result["jobs"][0]["reason"] == "BeginTime" and result["jobs"][0]["excluded_nodes"] == ["slurm-worker-1"]
    assert result["excluded"] == [dict(
        job_id="21", restarts=1, excluded=["slurm-worker-1"], bad={"slurm-worker-1": NO_IB},
        message="job 21: node check excluded slurm-worker-1 (%s); requeued without it" % NO_IB)]


def test_a_held_job_the_partition_cannot_hold_without_its_bad_nodes_is_cancelled(monkeypatch, capsys, tmp_path):
    Clock(monkeypatch)
    path = bad_nodes_file(tmp_path / "bad_nodes.json", slurm_worker_1=NO_IB)
    s = Slurm(monkeypatch, [
        (scontrol_job(21), (0, held_job(21), "")),
        (SINFO_DEBUG, (0, counted("1 drained", "2 idle"), "")),
        (SCONTROL_NODES, (0, nodes_with(["IDLE", "IDLE", "IDLE+DRAIN"]), "")),
        (["/usr/bin/scancel", "21"], (0, "", "")),
        (scontrol_job(21), (0, job_text("cancelled", 21), "")),
    ], bins=WITH_SINFO)
    result = run(sbatch.main, watched(bad_nodes_file=path, wait_timeout=60), capsys)
    s.done()
    assert result["failed"] and result["cancelled"] == ["21"] and result["state"] == "CANCELLED"
    assert result["bad_nodes"] == {"slurm-worker-1": NO_IB} and result["excluded"] == []
    assert result["msg"].splitlines()[:2] == [
        "Job 21 (fx-pending) needs 2 node(s), and partition debug has 1 usable node(s) besides the bad ones "
        "(slurm-worker-0). The job is cancelled; nothing of this run is left queued. Bad nodes:",
        "  slurm-worker-1: " + NO_IB]
    assert path in result["msg"].splitlines()[2]


def test_check_mode_or_no_bad_nodes_file_leaves_a_held_job_alone(monkeypatch, capsys, tmp_path):
    Clock(monkeypatch)
    path = bad_nodes_file(tmp_path / "bad_nodes.json", slurm_worker_1=NO_IB)
    for args, check_mode in ((dict(bad_nodes_file=path), True), (dict(), False)):
        s = Slurm(monkeypatch, [(scontrol_job(21), (0, held_job(21), "")),
                                (SINFO_DEBUG, (0, counted("3 idle"), ""))], bins=WITH_SINFO)
        result = run(sbatch.main, watched(wait_timeout=0, **args), capsys, check_mode=check_mode)
        s.done()  # no scontrol update, release or scancel
        assert not result["changed"] and result["excluded"] == []
        assert result["jobs"][0]["reason"] == "job_requeued_in_held_state"


def test_slurm_job_info_only_reads(monkeypatch, capsys, tmp_path):
    """It leaves a held job alone, reports no change, and takes no bad-nodes file to act on."""
    Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, held_job(21), "")),
                            (SINFO_DEBUG, (0, counted("3 idle"), ""))], bins=WITH_SINFO)
    result = run(slurm_job_info.main, dict(job_id=["21"]), capsys)
    s.done()
    assert result["changed"] is False and "excluded" not in result
    assert result["jobs"][0]["reason"] == "job_requeued_in_held_state"
    path = bad_nodes_file(tmp_path / "bad_nodes.json", slurm_worker_1=NO_IB)
    refused = run(slurm_job_info.main, dict(job_id=["21"], bad_nodes_file=path), capsys)
    assert refused["failed"] and "bad_nodes_file" in refused["msg"]


def test_a_watched_job_that_completed_is_recorded_only_when_it_is_this_tasks_job(monkeypatch, capsys, tmp_path):
    """sbatch state=watched writes done_file for the job it watched once it completed, when that job
    carries this task's fingerprint; a job re-attached to by name that runs another script is not it."""
    Clock(monkeypatch)
    args = watched(done_file=str(tmp_path / "train.done.json"), wait_timeout=0)
    fp = sbatch_argv.fingerprint("train", args["content"], {}, {}, None)
    for comment, recorded in (("llmtrain:0123456789abcdef", False), ("llmtrain:" + fp, True)):
        done = job_text("completed", 21).replace("Comment=llmtrain:aaaa", "Comment=" + comment)
        s = Slurm(monkeypatch, [(scontrol_job(21), (0, done, ""))])
        result = run(sbatch.main, args, capsys)
        s.done()
        assert result["finished"] and result["jobs"][0]["state"] == "COMPLETED" and result["done"] is recorded
        assert os.path.exists(args["done_file"]) is recorded
        if recorded:
            record = json.load(open(args["done_file"]))
            assert record["fingerprint"] == fp and record["job_id"] == "21" and record["state"] == "COMPLETED"


def test_node_check_file_of_a_few_nodes_is_returned_with_its_whole_table(monkeypatch, capsys, tmp_path):
    check = dict(job_id="18", restart=0, time="2026-11-30T10:00:00Z", table=["NODE  VERDICT", "n1    ok"],
                 bad={}, nodes=[dict(node="n1", ok=True)])
    path = tmp_path / "node_check.json"
    path.write_text(json.dumps(check))
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], node_check_file=str(path)), capsys)
    s.done()
    assert result["node_check"] == dict(job_id="18", restart=0, time="2026-11-30T10:00:00Z", file=str(path),
                                        checked=1, bad_count=0, bad={}, table=["NODE  VERDICT", "n1    ok"])

    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], node_check_file=str(tmp_path / "not_yet.json")), capsys)
    s.done()
    assert "node_check" not in result  # the job has not checked its nodes yet


def test_an_unreadable_node_check_file_warns(monkeypatch, capsys, tmp_path):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, warning, **kwargs: warned.append(warning))
    path = tmp_path / "node_check.json"
    path.write_text('{"job_id": "18", "tab')  # caught half-written
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], node_check_file=str(path)), capsys)
    s.done()
    assert result["node_check"] is None and not result.get("failed")
    assert len(warned) == 1 and warned[0].startswith("cannot read %s: " % path)


# ---------------------------------------------------------------- a metrics file with lines that are no record

def test_lines_of_the_metrics_file_that_are_no_record_are_counted_and_said(monkeypatch, capsys, tmp_path):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, warning, **kwargs: warned.append(warning))
    metrics = tmp_path / "metrics.jsonl"
    long_record = dict(step=10, total_steps=40, loss=2.5,
                       nodes=dict(("node-%03d" % i, dict(work_ms=200.0, wait_ms=9.0)) for i in range(110)))
    metrics.write_text(json.dumps(long_record) + "\nstep 11 loss 2.4\n")
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], metrics_file=str(metrics)), capsys)
    s.done()
    assert len(json.dumps(long_record)) > 5000 and result["progress"]["step"] == 10
    assert result["unreadable_records"] == 1
    assert len(warned) == 1 and warned[0].startswith("%s: 1 of its last lines hold no complete JSON object" % metrics)
    assert result["progress_warnings"] == {str(metrics): warned[0]}

    metrics.write_text(json.dumps(long_record) + "\n")
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], metrics_file=str(metrics)), capsys)
    assert result["unreadable_records"] == 0 and "progress_warnings" not in result and len(warned) == 1


def test_your_scripts_progress_comes_from_its_event_files_before_its_log(monkeypatch, capsys, tmp_path):
    """Lightning 2.6.6's own event file (tests/unit/fixtures/trainers) in lightning_logs/version_<job>/
    under the script's working directory: its step and loss, before any log line; a total of your own."""
    log = tmp_path / "llmtrain-mine-18.out"
    log.write_text("iter 0: loss 5.68, time 1ms\n")
    running = re.sub(r"StdOut=\S+", "StdOut=%s" % log, fixture("scontrol_job_running.txt"))
    events = tmp_path / "src" / "lightning_logs" / "version_18"
    events.mkdir(parents=True)
    fixtures = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers")
    with open(os.path.join(fixtures, "lightning_2.6.6.tfevents"), "rb") as handle:
        (events / "events.out.tfevents.1796465968.vm.23609.0").write_bytes(handle.read())
    args = dict(job_id=["18"], metrics_file=str(tmp_path / "metrics.jsonl"), progress_from_log=True,
                event_dirs=[str(tmp_path / "src"), str(tmp_path)], total_steps=30)
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    result = run(slurm_job_info.main, args, capsys)
    progress = result["progress"]
    assert (progress["step"], progress["total_steps"], progress["percent"], progress["source"]) == (29, 30, 96.7, "events")
    assert progress["lr"] == 0.1 and progress["loss"] > 0
    assert result["progress_from"] == dict(tag="train_loss", file=str(events / "events.out.tfevents.1796465968.vm.23609.0"))
    # a tag that is not in them: the log lines, and a warning that names the scalars they hold
    Slurm(monkeypatch, [(scontrol_job(18), (0, running, ""))])
    result = run(slurm_job_info.main, dict(args, progress_tag="loss/objective"), capsys)
    assert (result["progress"]["step"], result["progress"]["source"]) == (0, "log")
    warning = [w for w in result["progress_warnings"].values() if "pretrain_progress_tag" in w]
    assert warning and "'train_loss'" in warning[0] and "'val_loss'" in warning[0]


# ---------------------------------------------------------------- sbatch state=present with watch

def test_present_with_watch_submits_then_watches_the_job_in_the_same_call(monkeypatch, capsys):
    Clock(monkeypatch)
    content = "#!/bin/bash\nsrun true\n"
    fp = sbatch_argv.fingerprint("train", content, {}, {}, None)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (["/usr/bin/sbatch", "--parsable", "--job-name=train", "--comment=llmtrain:" + fp], (0, "21\n", "")),
        (scontrol_job(21), (0, job_text("pending", 21), "")),
        (scontrol_job(21), (0, job_text("running", 21), "")),  # the watch's look
    ])
    result = run(sbatch.main, dict(name="train", content=content, attach=True, watch=True, wait_timeout=0), capsys)
    s.done()
    assert result["submitted"] and result["changed"] and result["watched"] and not result["attached"]
    assert result["job_id"] == "21" and result["jobs"][0]["state"] == "RUNNING" and result["state"] == "RUNNING"
    assert result["fingerprint"] == fp and not result["done"]


def test_present_with_watch_watches_nothing_the_record_says_is_done_nor_a_job_check_mode_did_not_submit(
        monkeypatch, capsys, tmp_path):
    content = "#!/bin/bash\nsrun true\n"
    fp = sbatch_argv.fingerprint("train", content, {}, {}, None)
    done_file = tmp_path / "train.done.json"
    done_file.write_text(json.dumps(dict(fingerprint=fp, name="train", job_id="16", state="COMPLETED", exit_code=0,
                                         end_time="t", stdout_path="/o/16.out")))
    s = Slurm(monkeypatch, [], bins=())
    result = run(sbatch.main, dict(name="train", content=content, watch=True, done_file=str(done_file)), capsys)
    s.done()  # Slurm asked nothing
    assert result["done"] and result["from_record"] and not result["watched"] and "jobs" not in result
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", ""))])
    result = run(sbatch.main, dict(name="train", content=content, attach=True, watch=True), capsys, check_mode=True)
    s.done()
    assert result["submitted"] and result["job_id"] is None and not result["watched"]


def test_watch_and_wait_are_refused_together(monkeypatch, capsys):
    result = run(sbatch.main, dict(name="train", content="x", watch=True, wait=True), capsys)
    assert result["failed"] and "mutually exclusive" in result["msg"]
