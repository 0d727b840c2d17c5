"""run_status: the state of every run of a workspace from its files and the user's jobs, and the
job's own record of its end (node/job_end.py)."""

import json
import os
import time

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_status
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.log_progress import DEFAULT_PATTERNS, compile_patterns
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import job_end, run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import QUEUE_FIELDS, parse_dependency, parse_squeue

PATTERNS = compile_patterns(DEFAULT_PATTERNS)


def lines(path, *records):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def make_run(workspace, name, job_id=None, done_state="PENDING", starts=(), ends=(), metrics=(), stop=None,
             checkpoints=(), bad=None):
    run = workspace / name
    (run / "scripts").mkdir(parents=True)
    (run / "scripts" / "pretrain.sbatch").write_text("#!/bin/bash\n")
    os.chmod(run, 0o755)
    if job_id:
        (run / "train.done.json").write_text(json.dumps(dict(fingerprint="ab" * 8, job_id=job_id, state=done_state)))
    for start in starts:
        lines(run / "starts.jsonl", dict(job_id=start[0], start=start[1], nodes="n[1-2]", left="", time="T%d" % start[1]))
    for end in ends:
        lines(run / "starts.jsonl", dict(dict(event="end", job_id=end[0], start=end[1], how=end[2], exit_code=end[3], time="E"),
                                         **(dict(signal=end[4]) if len(end) > 4 else {})))
    lines(run / "metrics.jsonl", *metrics) if metrics else None
    if stop:
        (run / "STOP").write_text(stop + "\n")
    for name_ in checkpoints:
        (run / "checkpoints").mkdir(exist_ok=True)
        (run / "checkpoints" / name_).write_text("")
    if bad:
        (run / "bad_nodes.json").write_text(json.dumps(bad))
    return run


def job(job_id, state, name, reason=None, nodelist=None, num_nodes=None):
    return dict(job_id=job_id, state=state, name=name, reason=reason, nodelist=nodelist, num_nodes=num_nodes,
                start_time=None)


def row(workspace, name, queue=()):
    return run_status.run_row(str(workspace), name, [j for j in queue if j["name"] == "llmtrain-" + name],
                              "llmtrain-", "logs/%x-%j.out", PATTERNS)


def test_every_state_a_run_can_be_in(tmp_path):
    ws = tmp_path
    loss = dict(step=40, total_steps=100, loss=2.5, tokens_per_s=1234.0, eta_s=90)
    make_run(ws, "queued", "11")
    make_run(ws, "requeued", "12", starts=[("12", 1)], ends=[("12", 1, "requeued", 0)])
    make_run(ws, "running", "13", starts=[("13", 1)], metrics=[loss])
    make_run(ws, "stopping", "14", starts=[("14", 1)], stop="14")
    make_run(ws, "finished", "15", done_state="COMPLETED", starts=[("15", 1)], ends=[("15", 1, "finished", 0)])
    make_run(ws, "failed", "16", starts=[("16", 1)], ends=[("16", 1, "failed", 1)])
    make_run(ws, "stopped", "17", starts=[("17", 1)], ends=[("17", 1, "stopped", 81)], stop="17",
             checkpoints=["step_000040.pt", "step_000020.pt", "step_000040.pt.bad"])
    make_run(ws, "unwatched", "18", starts=[("18", 1)], ends=[("18", 1, "finished", 0)])
    make_run(ws, "cancelled", "19", starts=[("19", 1)], stop="19")
    make_run(ws, "killed", "21", starts=[("21", 1)], ends=[("21", 1, "killed", 0)], stop="21")
    make_run(ws, "hung", "22", starts=[("22", 1)], ends=[("22", 1, "hang", 80)])
    make_run(ws, "signalled", "23", starts=[("23", 1)], ends=[("23", 1, "killed", 143, "SIGTERM")])
    make_run(ws, "forgotten", "20", starts=[("20", 1)])
    make_run(ws, "prepared")
    queue = [job("11", "PENDING", "llmtrain-queued", "Resources"), job("12", "PENDING", "llmtrain-requeued", "BeginTime"),
             job("13", "RUNNING", "llmtrain-running", None, "n[1-2]", 2), job("14", "RUNNING", "llmtrain-stopping"),
             job("16", "FAILED", "llmtrain-failed")]
    states = {name: (r["state"], r["why"]) for name, r in
              ((name, row(ws, name, queue)) for name in run_status.run_names(str(ws), os.getuid()))}
    assert states == {
        "queued": ("queued", "Resources"), "requeued": ("requeued", "BeginTime"), "running": ("running", None),
        "stopping": ("stopping", None), "finished": ("finished", None), "failed": ("failed", "exit 1 (FAILED)"),
        "stopped": ("stopped", None), "unwatched": ("finished", None),
        "cancelled": ("stopped", "cancelled after the stop request"),
        "killed": ("stopped", "killed after the stop request, exit 0"), "hung": ("failed", "hang, exit 80 (HANG)"),
        "signalled": ("failed", "killed by SIGTERM, exit 143"),
        "forgotten": ("failed", "no end line, and Slurm forgot the job (cancelled, or its batch node lost)"),
        "prepared": ("not submitted", "no training job yet: run playbooks/pretrain.yml")}
    running = row(ws, "running", queue)
    assert (running["step"], running["total_steps"], running["loss"], running["eta_s"], running["nodes"]) == (40, 100, 2.5, 90, "n[1-2]")
    stopped = row(ws, "stopped", queue)
    assert (stopped["checkpoint"], stopped["checkpoint_step"], stopped["exit_code"]) == ("step_000040.pt", 40, 81)


def test_the_last_job_is_the_newest_of_slurms_the_records_and_the_start_lines(tmp_path):
    # the done record names the job submitted last; a later job seen by Slurm wins, and an end line
    # of an earlier job says nothing of it
    make_run(tmp_path, "r", "30", starts=[("30", 1)], ends=[("30", 1, "failed", 1)])
    queue = [job("29", "COMPLETED", "llmtrain-r"), job("31", "PENDING", "llmtrain-r", "Priority")]
    found = row(tmp_path, "r", queue)
    assert (found["job_id"], found["state"], found["why"]) == ("31", "queued", "Priority")
    # a stop request for an earlier job does not stop this one
    (tmp_path / "r" / "STOP").write_text("30\n")
    queue[1].update(state="RUNNING")
    assert row(tmp_path, "r", queue)["state"] == "running"


def test_runs_others_own_or_may_write_to_are_not_read(tmp_path):
    mine = make_run(tmp_path, "mine", "1", done_state="COMPLETED")
    (tmp_path / "not-a-run").mkdir()
    os.symlink(str(mine), str(tmp_path / "link"))
    assert run_status.run_names(str(tmp_path), os.getuid()) == ["mine"]
    assert run_status.run_names(str(tmp_path), os.getuid() + 1) == []
    os.chmod(mine, 0o775)
    found = row(tmp_path, "mine")
    assert found["state"] == "untrusted" and "%s is writable by its group (mode 0775)" % mine in found["why"]


def test_your_scripts_progress_comes_from_its_log(tmp_path):
    run = make_run(tmp_path, "own", "7", starts=[("7", 1)])
    (run / "logs").mkdir()
    (run / "logs" / "llmtrain-own-7.out").write_text("iter 10: loss 3.02, time 1ms\niter 20: loss 2.5, time 1ms\n")
    found = row(tmp_path, "own", [job("7", "RUNNING", "llmtrain-own")])
    assert (found["step"], found["loss"], found["stdout_path"]) == (20, 2.5, str(run / "logs" / "llmtrain-own-7.out"))


def test_your_scripts_event_files_come_before_its_log(tmp_path):
    """Lightning 2.6.6's own event file in the run's lightning_logs/version_7/ (its deployed source)."""
    run = make_run(tmp_path, "own", "7", starts=[("7", 1)])
    (run / "logs").mkdir()
    (run / "logs" / "llmtrain-own-7.out").write_text("iter 10: loss 3.02, time 1ms\n")
    events = run / "src" / "lightning_logs" / "version_7"
    events.mkdir(parents=True)
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers", "lightning_2.6.6.tfevents")
    with open(fixture, "rb") as handle:
        (events / "events.out.tfevents.1796465968.vm.23609.0").write_bytes(handle.read())
    found = row(tmp_path, "own", [job("7", "RUNNING", "llmtrain-own")])
    assert found["step"] == 29 and found["loss"] > 0
    # a tag that none of its scalars has: its log lines
    found = run_status.run_row(str(tmp_path), "own", [job("7", "RUNNING", "llmtrain-own")], "llmtrain-",
                               "logs/%x-%j.out", PATTERNS, tag="loss/objective")
    assert (found["step"], found["loss"]) == (10, 3.02)


def test_the_table_and_the_detail_say_what_a_user_checks(tmp_path):
    make_run(tmp_path, "a", "13", starts=[("13", 1)],
             metrics=[dict(step=40, total_steps=100, loss=2.51234, tokens_per_s=1234.4, eta_s=3700)],
             bad={"n3": "gpu", "n4": "gpu", "n5": "gpu", "n6": "gpu"})
    make_run(tmp_path, "b", "16", starts=[("16", 1)], ends=[("16", 1, "failed", 1)])
    # a's hours: a start of 2 nodes x 8 GPUs that ended after an hour (usage.json), and the running
    # start's line, of 2 nodes, begun half an hour ago
    began = time.time() - 5400
    run_files.add_usage(str(tmp_path / "a"), "12", 1, began, began + 3600, 2, 8)
    lines(tmp_path / "a" / "starts.jsonl", dict(job_id="13", start=1, nodes="n[1-2]", left="", node_count=2,
                                                time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began + 3600))))
    rows = [row(tmp_path, "a", [job("13", "RUNNING", "llmtrain-a", None, "n[1-2]", 2)]), row(tmp_path, "b")]
    table = run_status.table(rows)
    assert table[0].split() == ["run", "state", "job", "nodes", "step", "loss", "tokens/s", "ETA", "GPU-h", "last", "event",
                                "bad", "nodes"]
    assert " 24.0 " in table[2] and " - " in table[3]  # (2 x 1 h + 2 x 0.5 h) x 8 GPUs; b used none recorded
    assert ("  used: 24.00 GPU-hours, 3.00 node-hours over 2 start(s) (usage.json and the running start, from the "
            "run's start and end lines)") in run_status.detail(rows[0], None)
    assert "running" in table[2] and "40/100" in table[2] and "2.512" in table[2] and "1:01:40" in table[2]
    assert "2: n[1-2]" in table[2] and "n3, n4, n5 and 1 more" in table[2]
    assert "failed (exit 1)" in table[3] and "start 1 ended failed at E" in table[3]
    log = dict(path="/x.out", tail=["a", "b"], traceback=["Traceback (most recent call last):", "ValueError: boom"],
               failed_rank=3, node="n2")
    text = run_status.detail(rows[1], log)
    assert text[0] == "Run b: failed (exit 1 (FAILED))"
    assert "The first traceback (rank 3 on n2):" in text and "  ValueError: boom" in text
    assert text[-3:] == ["Last 2 lines of /x.out:", "  a", "  b"]


def test_every_runs_hours_come_from_one_sacct_call_where_slurm_keeps_accounting(tmp_path):
    make_run(tmp_path, "a", "13", done_state="COMPLETED", starts=[("13", 1)], ends=[("13", 1, "finished", 0)])
    make_run(tmp_path, "b", "16", starts=[("16", 1)], ends=[("16", 1, "failed", 1)])
    make_run(tmp_path, "c", "17", starts=[("17", 1)], ends=[("17", 1, "failed", 1)])
    (tmp_path / "a" / "data").mkdir()
    (tmp_path / "a" / "data" / "prepare.done.json").write_text(json.dumps(dict(job_id="11")))
    began = time.time() - 7200
    run_files.add_usage(str(tmp_path / "a"), "12", 1, began, began + 3000, 2, 8, 16)  # an earlier job of a
    run_files.add_usage(str(tmp_path / "a"), "13", 1, began + 3600, began + 7200, 2, 8, 16)
    run_files.add_usage(str(tmp_path / "b"), "16", 1, began, began + 3600, 1, 8, 8)
    rows = [row(tmp_path, name) for name in "abc"]
    asked = []
    allocation = dict(nodes=2, cpus=16, gpus=16, array_id=None, state="COMPLETED")

    def sacct_usage(job_ids):
        asked.append(list(job_ids))
        return [dict(allocation, job_id="12", start="2026-12-06T01:00:00", seconds=3060),
                dict(allocation, job_id="13", start="2026-12-06T02:00:00", seconds=3610),
                dict(allocation, job_id="11", start="2026-12-06T00:50:00", seconds=360, nodes=1, cpus=2, gpus=0),
                dict(allocation, job_id="17", start="2026-12-06T00:50:00", seconds=36)]

    run_status.add_ledgers(rows, sacct_usage)
    assert asked == [["13", "12", "11", "16", "17"]]  # once, every run's jobs
    a, b, c = rows
    assert (a["usage"]["source"], a["usage"]["starts"], round(a["usage"]["gpu_hours"], 3)) == ("sacct", 2, 29.644)
    assert a["others"] == [dict(kind="data", job_id="11", starts=1, node_hours=0.1, cpu_hours=0.2, gpu_hours=0.0)]
    detail = run_status.detail(a, None)
    assert "  used: 29.64 GPU-hours, 3.71 node-hours, 29.64 CPU-hours over 2 start(s) (sacct: allocated TRES x elapsed)" in detail
    assert "  data job 11: 0.00 GPU-hours, 0.10 node-hours, 0.20 CPU-hours (sacct)" in detail
    # b's job is not in the accounting: its own lines; c has no usage.json, and sacct's figure
    assert (b["usage"]["source"], b["usage"]["gpu_hours"], b["usage"]["cpu_hours"]) == ("usage.json", 8.0, 8.0)
    assert (c["usage"]["source"], c["usage"]["starts"], round(c["usage"]["node_hours"] * 3600)) == ("sacct", 1, 72)
    assert " 29.6 " in run_status.table(rows)[2]
    # a job that has not started yet (sacct's pending line) has used nothing: "-"
    make_run(tmp_path, "q", "18")
    queued = [row(tmp_path, "q")]
    run_status.add_ledgers(queued, lambda job_ids: [dict(allocation, job_id="18", start=None, seconds=0, state="PENDING")])
    assert queued[0]["usage"] is None and " - " in run_status.table(queued)[2]
    # no accounting: the run's own lines, and no call again
    rows = [row(tmp_path, name) for name in "ab"]
    run_status.add_ledgers(rows, lambda job_ids: None)
    assert [r["usage"]["source"] for r in rows] == ["usage.json", "usage.json"] and rows[0]["others"] == []


def test_a_job_that_finished_marks_its_done_record(tmp_path):
    done = tmp_path / "train.done.json"
    assert "no %s" % done in job_end.mark(str(done), "5")
    done.write_text(json.dumps(dict(fingerprint="ab" * 8, job_id="5", state="PENDING", stdout_path="/l")))
    assert job_end.mark(str(done), "4") == "%s names another job than 4: left as it is" % done
    assert json.loads(done.read_text())["state"] == "PENDING"
    assert job_end.mark(str(done), "5", now="T") is None
    assert json.loads(done.read_text()) == dict(fingerprint="ab" * 8, job_id="5", state="COMPLETED", stdout_path="/l",
                                                exit_code="0:0", end_time="T")
    done.write_text("{half")
    assert "cannot read" in job_end.mark(str(done), "5")


def recorded_dependency(release):
    """The queue Slurm answered, recorded (fixtures/slurm/dependency.json): a training job behind a data
    job and a venv job, while they run and once the data job failed; each queue as the status reads it."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm", "dependency.json")) as handle:
        recorded = json.load(handle)["releases"][release]
    return dict((key, parse_squeue(recorded[key], QUEUE_FIELDS)) for key in ("waiting", "never"))


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_a_training_job_queued_behind_the_data_job_says_which_and_why_it_never_starts(tmp_path, release):
    queues = recorded_dependency(release)
    make_run(tmp_path, "probe")
    # the run's training job has no start line yet: queued behind the data and venv jobs
    for key in ("waiting", "never"):
        jobs = dict((j["job_id"], j) for j in queues[key])
        training = next(j for j in queues[key] if j["name"] == "llmtrain-probe")
        (tmp_path / "probe" / "train.done.json").write_text(json.dumps(dict(fingerprint="ab" * 8, job_id=training["job_id"],
                                                                            state="PENDING")))
        found = run_status.run_row(str(tmp_path), "probe", [training], "llmtrain-", "logs/%x-%j.out", PATTERNS, jobs=jobs)
        data = next(j["job_id"] for j in queues[key] if j["name"] == "llmtrain-prepare-probe")
        venv = next(j["job_id"] for j in queues[key] if j["name"] == "llmtrain-venv")
        if key == "waiting":
            assert found["state"] == "queued"
            assert found["why"] == "waiting for the data job %s and the venv job %s" % (data, venv)
            assert [(w["kind"], w["job_id"], w["state"], w["failed"]) for w in found["waits_for"]] == [
                ("data job", data, "RUNNING", False), ("venv job", venv, "RUNNING", False)]
        else:
            # Slurm drops the venv job it no longer waits for, and says the data job failed
            assert found["why"] == "data job %s failed: never starts" % data
            assert [(w["kind"], w["state"], w["failed"]) for w in found["waits_for"]] == [("data job", "FAILED", True)]
            table = "\n".join(run_status.table([found]))
            assert "queued (data job %s failed: never starts)" % data in table
            text = run_status.detail(found, None, [dict(kind="data job", path="/w/probe/logs/d.out",
                                                        tail=["Traceback (most recent call last):", "\x1b[31mOSError: no such file"])])
            assert "  waits for the data job %s (FAILED): it failed, so this job never starts. Fix what its log says, then run " \
                   "playbooks/pretrain.yml again: it submits the data job again and puts this job behind it" % data in text
            assert text[-3:] == ["Last 2 lines of the data job's log, /w/probe/logs/d.out:", "  Traceback (most recent call last):",
                                 "  OSError: no such file"]  # the escape sequence stripped


def test_dependencies_as_slurm_writes_them():
    assert parse_dependency("afterok:108(unfulfilled),afterok:109(failed)") == [
        dict(type="afterok", job_id="108", status="unfulfilled"), dict(type="afterok", job_id="109", status="failed")]
    # an array's and a delayed one's, one of any, singleton; nothing of a job without any
    assert parse_dependency("afterok:12_*(unfulfilled)?after:13+5(unfulfilled),singleton(unfulfilled)") == [
        dict(type="afterok", job_id="12", status="unfulfilled"), dict(type="after", job_id="13", status="unfulfilled"),
        dict(type="singleton", job_id=None, status="unfulfilled")]
    assert parse_dependency(None) == [] and parse_dependency("(null)") == [] and parse_dependency("afterok:x;rm") == []


def test_a_job_behind_another_waits_for_it_whatever_reason_slurm_gives():
    """26.05 was seen (test_operate) to give Reason=Resources of a training job whose data job had not
    run: afterok:47(unfulfilled). The table still names the data job it waits for."""
    training = dict(job_id="48", state="PENDING", name="llmtrain-r", reason="Resources", nodelist=None, num_nodes=1,
                    start_time=None, dependency="afterok:47(unfulfilled)")
    data = dict(job_id="47", state="PENDING", name="llmtrain-prepare-r", reason="Resources", dependency=None)
    waits = run_status.waits_for(training, {"47": data, "48": training}, "r", "llmtrain-")
    assert [(w["kind"], w["job_id"], w["state"], w["failed"]) for w in waits] == [("data job", "47", "PENDING", False)]
    assert run_status.waiting_text(waits, False) == "waiting for the data job 47"
    assert run_status.waits_for(dict(training, dependency=None), {}, "r", "llmtrain-") == []


def test_the_detail_gives_the_newest_evaluation_of_the_export_job(tmp_path):
    run = make_run(tmp_path, "a", "13", done_state="COMPLETED", starts=[("13", 1)], ends=[("13", 1, "completed", 0)])
    assert run_status.newest_evaluation(str(run)) is None  # nothing evaluated yet
    (run / "eval").mkdir()
    for step, loss in ((200, 2.5), (800, 1.8178), (1000, "x")):
        (run / "eval" / ("step_%06d.json" % step)).write_text(json.dumps(dict(
            loss=loss, perplexity=6.158, tokens=1000000, model="/ws/a/export/step_%06d" % step,
            text="the validation split of /ws/a/data")))
    # the newest has no number for its loss: it is not shown, and an older one is not taken for it
    assert run_status.newest_evaluation(str(run)) is None
    (run / "eval" / "step_001000.json").unlink()
    (run / "eval" / "step_000900.json").symlink_to(run / "eval" / "step_000200.json")
    assert run_status.newest_evaluation(str(run)) is None  # a link is not followed
    (run / "eval" / "step_000900.json").unlink()
    (run / "eval" / ".step_000900.rank-0.json").write_text("{}")  # a rank's part, not a result
    rows = [row(tmp_path, "a")]
    rows[0]["evaluation"] = run_status.newest_evaluation(str(run))
    assert ("  model: /ws/a/export/step_000800; held-out loss 1.8178 (perplexity 6.16) over 1000000 tokens of the "
            "validation split of /ws/a/data") in run_status.detail(rows[0], None)


def test_a_sweep_member_is_read_from_the_last_records_of_its_metrics_and_the_workspace_listed_once(tmp_path):
    member = make_run(tmp_path, "lr-a", metrics=[dict(step=step, loss=10.0 - step / 1000.0) for step in range(10, 3001, 10)]
                      + [dict(event="checkpoint", step=3000), dict(event="done", step=3000)])
    assert run_status.member_progress(str(member))["step"] == 3000 and run_status.member_progress(str(member))["loss"] == 7.0
    # more events after the last loss record than the few records read: the last 16, as a run's row reads them
    lines(member / "metrics.jsonl", *[dict(event="slow_node", step=3000)] * 6)
    assert run_status.member_progress(str(member))["loss"] == 7.0
    assert run_status.member_progress(str(tmp_path / "missing")) == {}
    # a link is not followed
    (member / "metrics.jsonl").rename(tmp_path / "elsewhere.jsonl")
    (member / "metrics.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    assert run_status.member_progress(str(member)) == {}
    (tmp_path / "lr").mkdir()
    (tmp_path / "lr" / "sweep.json").write_text("{}")
    (tmp_path / "other").mkdir()
    os.symlink(str(tmp_path / "lr"), str(tmp_path / "lr-link"))
    assert run_status.workspace_dirs(str(tmp_path), os.getuid()) == (["lr-a"], ["lr"])
    assert run_status.workspace_dirs(str(tmp_path), os.getuid())[0] == run_status.run_names(str(tmp_path), os.getuid())
    assert run_status.workspace_dirs(str(tmp_path), os.getuid() + 1) == ([], [])
