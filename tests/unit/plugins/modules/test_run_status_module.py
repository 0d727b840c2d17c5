"""run_status with a faked run_command: one squeue query for every run, scontrol for the run in
detail, and the detail's log tail and traceback from the job's log."""

import json
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import ledger
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import slurm_client
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import QUEUE_FORMAT
from ansible_collections.llmtrain.slurm.plugins.modules import run_status
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, fixture, job_text, run, scontrol_job, squeue_rows

QUEUE = ["/usr/bin/squeue", "--noheader", "--states=all", "--user=alice", "--format=" + QUEUE_FORMAT]


def make_run(workspace, name, job_id, *lines):
    run_dir = workspace / name
    (run_dir / "scripts").mkdir(parents=True)
    (run_dir / "scripts" / "pretrain.sbatch").write_text("#!/bin/bash\n")
    os.chmod(run_dir, 0o755)
    (run_dir / "train.done.json").write_text(json.dumps(dict(fingerprint="ab" * 8, job_id=job_id, state="PENDING")))
    (run_dir / "starts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_dir


def test_one_query_for_every_run_and_the_failed_one_in_detail(monkeypatch, capsys, tmp_path):
    make_run(tmp_path, "a", "7")
    failed = make_run(tmp_path, "b", "8", dict(job_id="8", start=1, nodes="n1", left="", time="T"),
                      dict(event="end", job_id="8", start=1, how="failed", exit_code=1, time="E"))
    (failed / "logs").mkdir()
    (failed / "logs" / "llmtrain-b-8.out").write_text(
        "llmtrain: job 8 start 1 on n1, master n1:20008\n[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 3, in <module>\n[rank1]: ValueError: boom\nlast line\n')
    queue = squeue_rows(["7", "PENDING", "llmtrain-a", "Resources", "2", "", "N/A", "(null)"],
                        ["5", "RUNNING", "other-job", "None", "1", "n3", "2026-12-05T00:00:00", "(null)"])
    s = Slurm(monkeypatch, [(QUEUE, (0, queue, "")), (scontrol_job(8), (1, "", "slurm_load_jobs error: Invalid job id specified"))],
              bins=("squeue", "scontrol", "sacct"))
    monkeypatch.setattr(slurm_client.Slurm, "sacct_available", lambda self: False)
    result = run(run_status.main, dict(workspace=str(tmp_path), run="b", log_lines=3), capsys)
    s.done()
    assert [(r["run"], r["state"], r["why"]) for r in result["runs"]] == [
        ("a", "queued", "Resources"), ("b", "failed", "exit 1 (FAILED)")]
    assert result["table"][2].split()[:4] == ["a", "queued", "(Resources)", "7"]
    assert "The first traceback (rank 1):" in result["detail"] and "  ValueError: boom" in result["detail"]
    assert result["detail"][-1] == "  last line"
    # Slurm forgot the job: what the run directory tells of it, for the collect step
    job = result["job"]
    assert (job["job_id"], job["state"], job["exit_code"], job["stdout_path"]) == (
        "8", "FAILED", 1, str(failed / "logs" / "llmtrain-b-8.out"))


def test_a_run_that_is_not_there_is_said_and_a_workspace_that_is_not_fails(monkeypatch, capsys, tmp_path):
    Slurm(monkeypatch, [(QUEUE, (0, "", ""))])
    result = run(run_status.main, dict(workspace=str(tmp_path), run="nope"), capsys)
    assert result["run"] is None and result["runs"] == [] and "job" not in result
    assert result["detail"] == ["No run nope of this user in %s: the table lists those there." % tmp_path]
    Slurm(monkeypatch, [])
    result = run(run_status.main, dict(workspace=str(tmp_path / "missing")), capsys)
    assert result["failed"] and "set slurm_workspace" in result["msg"]


def test_a_running_jobs_log_is_read_from_its_end(monkeypatch, capsys, tmp_path):
    running = make_run(tmp_path, "r", "9", dict(job_id="9", start=1, nodes="n1", left="", time="T"))
    (running / "logs").mkdir()
    # a week of log lines: only the end is read (1 MiB at most), and its first line is cut
    (running / "logs" / "llmtrain-r-9.out").write_text("".join("iter %d: loss 2.5, time 1ms\n" % i for i in range(200000)))
    queue = squeue_rows(["9", "RUNNING", "llmtrain-r", "None", "1", "n1", "2026-12-05T00:00:00", "(null)"])
    Slurm(monkeypatch, [(QUEUE, (0, queue, "")), (scontrol_job(9), (0, job_text("running", 9), ""))])
    result = run(run_status.main, dict(workspace=str(tmp_path), run="r", log_lines=2), capsys)
    assert result["runs"][0]["state"] == "running" and result["runs"][0]["step"] == 199999
    assert result["detail"][-3:] == ["Last 2 lines of %s:" % (running / "logs" / "llmtrain-r-9.out"),
                                     "  iter 199998: loss 2.5, time 1ms", "  iter 199999: loss 2.5, time 1ms"]
    assert result["job"]["state"] == "RUNNING" and result["job"]["job_id"] == "9"


def test_one_run_whose_files_cannot_be_read_is_a_row_that_says_so(monkeypatch, capsys, tmp_path):
    make_run(tmp_path, "a", "7")
    make_run(tmp_path, "b", "8", dict(job_id="8", start=1, nodes="n1", left="", time="T"))
    real = run_status.run_status.progress

    def progress(run_dir, job_log, patterns, tag=None):
        if run_dir.endswith("/b"):
            raise OverflowError("cannot convert float infinity to integer")  # what a record once raised
        return real(run_dir, job_log, patterns, tag)
    monkeypatch.setattr(run_status.run_status, "progress", progress)
    Slurm(monkeypatch, [(QUEUE, (0, squeue_rows(["8", "RUNNING", "llmtrain-b", "None", "1", "n1", "T", "(null)"]), ""))])
    result = run(run_status.main, dict(workspace=str(tmp_path)), capsys)
    assert [r["run"] for r in result["runs"]] == ["a", "b"] and result["runs"][0]["state"] != "unreadable"
    assert result["runs"][1]["state"] == "unreadable"
    assert "OverflowError: cannot convert float infinity to integer" in result["runs"][1]["why"]
    assert result["table"][3].split()[:2] == ["b", "unreadable"] and len(result["table"]) == 4


def test_a_workspace_others_can_replace_runs_is_untrusted_and_nothing_is_read_or_collected(monkeypatch, capsys, tmp_path):
    workspace = tmp_path / "shared"
    make_run(workspace, "r", "9", dict(job_id="9", start=1, nodes="n1", left="", time="T"))
    os.chmod(workspace, 0o777)
    Slurm(monkeypatch, [(QUEUE, (0, squeue_rows(["9", "RUNNING", "llmtrain-r", "None", "1", "n1", "T", "(null)"]), ""))])
    result = run(run_status.main, dict(workspace=str(workspace), run="r", log_lines=5), capsys)
    row = result["runs"][0]
    assert (row["state"], row["job_id"], row["stdout_path"]) == ("untrusted", None, None)
    assert "without the sticky bit" in row["why"] and "job" not in result  # so the status playbook collects nothing
    assert result["detail"][0].startswith("Run r: untrusted (its files are not read: %s is writable" % workspace)


def test_the_hours_of_every_run_are_one_sacct_call_on_real_sacct_output(monkeypatch, capsys, tmp_path):
    make_run(tmp_path, "a", "2", dict(job_id="2", start=1, nodes="n1", left="", time="T"),
             dict(event="end", job_id="2", start=1, how="finished", exit_code=0, time="E"))
    make_run(tmp_path, "b", "3")
    sacct = ledger.argv("/usr/bin/sacct", ["2", "3"])
    s = Slurm(monkeypatch, [(QUEUE, (0, "", "")), (sacct, (0, fixture("sacct_usage.txt"), ""))],
              bins=("squeue", "scontrol", "sacct"))
    result = run(run_status.main, dict(workspace=str(tmp_path)), capsys)
    s.done()
    # the recorded jobs 2 (a start requeued after 1 s, then 4 s, on 1 node of 1 CPU) and 3 (30 s, 3 nodes x 2 CPUs)
    assert [(r["run"], r["usage"]["source"], r["usage"]["starts"], round(r["usage"]["node_hours"] * 3600),
             round(r["usage"]["cpu_hours"] * 3600)) for r in result["runs"]] == [("a", "sacct", 2, 5, 5), ("b", "sacct", 1, 90, 180)]


def test_a_sweep_is_one_row_counting_its_members_and_sweep_lists_them(monkeypatch, capsys, tmp_path):
    """1,000 members would be 1,000 rows: a sweep is one, its members counted; -e sweep=NAME lists them."""
    make_run(tmp_path, "solo", "7")
    base = tmp_path / "lr"
    base.mkdir()
    (base / "sweep.json").write_text(json.dumps({"arrays": [{"job_id": "90", "tasks": {"0": "lr-a", "1": "lr-b", "2": "lr-c"}}]}))
    for name, state, loss in (("lr-a", "COMPLETED", 2.5), ("lr-b", "PENDING", 2.1), ("lr-c", "PENDING", None)):
        run_dir = make_run(tmp_path, name, "90_%s" % name[-1])
        (run_dir / "train.done.json").write_text(json.dumps(dict(fingerprint="f", job_id="90_0", state=state)))
        if loss:
            (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 40, "loss": loss}) + "\n")
    queue = squeue_rows(["90_1", "RUNNING", "llmtrain-sweep-lr", "None", "1", "n1", "N/A", "(null)"],
                        ["90_[2]", "PENDING", "llmtrain-sweep-lr", "JobArrayTaskLimit", "1", "", "N/A", "(null)"],
                        ["7", "PENDING", "llmtrain-solo", "Resources", "2", "", "N/A", "(null)"])
    s = Slurm(monkeypatch, [(QUEUE, (0, queue, ""))], bins=("squeue", "scontrol", "sacct"))
    monkeypatch.setattr(slurm_client.Slurm, "sacct_available", lambda self: False)
    result = run(run_status.main, dict(workspace=str(tmp_path), sweep="lr"), capsys)
    s.done()
    assert [(r["run"], r["state"]) for r in result["runs"]] == [("lr", "sweep"), ("solo", "queued")]
    sweep = result["runs"][0]
    assert sweep["why"] == "3 members: 1 done, 1 running, 1 pending" and sweep["loss"] == 2.1
    assert sweep["last_event"] == "lowest loss: lr-b"
    assert result["table"][2].startswith("lr    sweep (3 members: 1 done, 1 running, 1 pending)")
    assert [(m["member"], m["state"], m["job_id"]) for m in result["sweep"]["members"]] == [
        ("lr-a", "done", "90_0"), ("lr-b", "running", "90_1"), ("lr-c", "pending", "90_2")]
    assert result["sweep"]["table"][0].split() == ["member", "state", "job", "step", "loss"]
