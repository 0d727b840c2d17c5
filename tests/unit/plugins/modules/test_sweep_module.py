"""The sweep module with a faked run_command (fake_slurm): the members' run directories made from
the sweep's (its scripts, code and env files, their modes kept; links and caches left), one
array per shape for the members neither done nor active, nothing for those, a failed member tried
again while it has tries left, and why each try ended kept in the record."""

import json
import os
import re
import shutil

import pytest

from ansible_collections.llmtrain.slurm.plugins.modules import sweep
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import sweep as sweep_job
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import state as sweep_state
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import (
    SQUEUE, Slurm, job_text, run, scontrol_job, squeue_rows)

CONFIG = (["/usr/bin/scontrol", "show", "config"], (0, "MaxArrayAge = 0\nMaxArraySize            = 1001\n", ""))
OPTIONS = {"nodes": 1, "partition": "debug", "output": "logs/%x-%j.out", "requeue": True}


@pytest.mark.parametrize("job_id, expected", [
    ("340_1", ("340", [1])), ("340_[2-5,7%2]", ("340", [2, 3, 4, 5, 7])), ("340_[0]", ("340", [0])),
    ("340", (None, [])), ("x_1", (None, [])), ("340_[1-2]junk", (None, []))])
def test_array_tasks_as_squeue_names_them(job_id, expected):
    assert sweep_state.tasks_of(job_id) == expected


@pytest.fixture
def sweep_dir(tmp_path):
    os.umask(0o022)
    base = tmp_path / "ws" / "lr"
    for rel, text, mode in (("scripts/node_check.sh", "check", 0o644), ("scripts/trainer/train.py", "train", 0o644),
                            ("scripts/llmtrain_node/job.py", "job", 0o644), ("scripts/prepare.sbatch", "own", 0o755),
                            ("scripts/node_check.conf", "conf", 0o644), ("env/cluster.env", "X=1", 0o644),
                            ("env/secrets.env", "TOKEN=s", 0o600), ("scripts/__pycache__/x.pyc", "c", 0o644)):
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
    (base / "scripts" / "link.py").symlink_to("/etc/passwd")
    os.chmod(str(base / "env"), 0o700)
    return base


def members(base, *names, shape=0):
    return [dict(name=name, run_dir=str(base.parent / name), done_file=str(base.parent / name / "train.done.json"),
                 shape=shape, files={"scripts/pretrain.sbatch": "#!/bin/bash\necho %s\n" % name,
                                     "scripts/node_check.conf": "conf of %s\n" % name})
            for name in names]


def args(base, found, **extra):
    return dict(dict(name="llmtrain-sweep-lr", sweep="lr", base_dir=str(base), members=found, parallel=2,
                     shapes=[OPTIONS, dict(OPTIONS, nodes=2)]), **extra)


def array_argv(base, found, indices, **more):
    content = sweep_job.array_script("lr", [(i, found[i]["name"], found[i]["run_dir"]) for i in indices], str(base / "data"))
    options = dict(sweep_job.array_options(OPTIONS, indices, 2), **more)
    fp = sbatch_argv.fingerprint("llmtrain-sweep-lr", content, options, {}, str(base))
    return ["/usr/bin/sbatch", "--parsable", "--job-name=llmtrain-sweep-lr", "--comment=llmtrain:" + fp,
            "--chdir=" + str(base)] + sbatch_argv.option_argv(options), content


def test_new_members_get_the_sweeps_files_and_one_array(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a", "lr-b")
    argv, content = array_argv(sweep_dir, found, [0, 1])
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), CONFIG, (argv, (0, "90\n", ""))])
    result = run(sweep.main, args(sweep_dir, found), capsys)
    s.done()
    assert result["changed"] and [a["job_id"] for a in result["submitted"]] == ["90"]
    assert s.kwargs[2]["data"] == content
    assert [(m["state"], m["job_id"]) for m in result["members"]] == [("pending", "90_0"), ("pending", "90_1")]
    member = sweep_dir.parent / "lr-b"
    assert (member / "scripts" / "trainer" / "train.py").read_text() == "train"
    # the sweep's own file, linked: no room taken, nothing read
    assert os.stat(str(member / "scripts" / "trainer" / "train.py")).st_ino == os.stat(
        str(sweep_dir / "scripts" / "trainer" / "train.py")).st_ino
    assert (member / "scripts" / "pretrain.sbatch").read_text() == "#!/bin/bash\necho lr-b\n"
    assert (member / "scripts" / "node_check.conf").read_text() == "conf of lr-b\n"
    # the sweep's own job scripts, caches and links are not a member's
    assert not (member / "scripts" / "prepare.sbatch").exists() and not (member / "scripts" / "__pycache__").exists()
    assert not os.path.lexists(str(member / "scripts" / "link.py"))
    assert oct(os.stat(str(member / "env" / "secrets.env")).st_mode & 0o777) == "0o600"
    assert oct(os.stat(str(member / "env")).st_mode & 0o777) == "0o700"
    # the record keeps the array (each task writes its member's done record as it starts)
    assert json.load(open(str(sweep_dir / "sweep.json")))["arrays"] == [{"job_id": "90", "tasks": {"0": "lr-a", "1": "lr-b"},
                                                                        "scripts": {"0": sweep.digest("#!/bin/bash\necho lr-a\n"),
                                                                                    "1": sweep.digest("#!/bin/bash\necho lr-b\n")}}]
    # made again (status: nothing to submit), nothing is written
    s = Slurm(monkeypatch, [(SQUEUE, (0, squeue_rows(["90_[0-1%2]", "PENDING", "llmtrain-sweep-lr", "(null)"]), ""))])
    again = run(sweep.main, args(sweep_dir, found), capsys)
    s.done()
    assert not again["changed"] and again["submitted"] == []


def test_members_done_or_active_are_not_submitted(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a", "lr-b", "lr-c")
    (sweep_dir / "sweep.json").write_text(json.dumps({"arrays": [{"job_id": "90", "tasks": {"0": "lr-a", "1": "lr-b", "2": "lr-c"}}]}))
    os.makedirs(found[0]["run_dir"])
    with open(found[0]["done_file"], "w") as handle:
        json.dump({"job_id": "90_0", "state": "COMPLETED", "fingerprint": "f"}, handle)
    queue = squeue_rows(["90_1", "RUNNING", "llmtrain-sweep-lr", "(null)"], ["90_[2%2]", "PENDING", "llmtrain-sweep-lr", "(null)"])
    s = Slurm(monkeypatch, [(SQUEUE, (0, queue, ""))])
    result = run(sweep.main, args(sweep_dir, found), capsys)
    s.done()
    assert result["submitted"] == [] and result["counts"] == dict(done=1, running=1, pending=1, stopped=0, failed=0, new=0, changed=0)
    assert [m["job_id"] for m in result["members"]] == ["90_0", "90_1", "90_2"]


def test_other_shapes_are_arrays_of_their_own(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a") + members(sweep_dir, "lr-b", shape=1)
    one, _content = array_argv(sweep_dir, found, [0])
    two, _content = array_argv(sweep_dir, found, [1], nodes=2)
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), CONFIG, (one, (0, "91\n", "")), (two, (0, "92\n", ""))])
    result = run(sweep.main, args(sweep_dir, found), capsys)
    s.done()
    assert [(a["job_id"], a["tasks"]) for a in result["submitted"]] == [("91", {"0": "lr-a"}), ("92", {"1": "lr-b"})]


def test_a_failed_member_is_tried_again_while_it_has_tries_left_and_why_each_ended_is_kept(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a", "lr-b")
    (sweep_dir / "sweep.json").write_text(json.dumps({"arrays": [{"job_id": "90", "tasks": {"0": "lr-a", "1": "lr-b"}}]}))
    for member in found:
        os.makedirs(member["run_dir"])
    argv, _content = array_argv(sweep_dir, found, [1])
    s = Slurm(monkeypatch, [(SQUEUE, (0, squeue_rows(["90_0", "RUNNING", "llmtrain-sweep-lr", "(null)"]), "")),
                            (scontrol_job("90_1"), (0, job_text("failed", 95), "")), CONFIG,
                            (argv, (0, "96\n", ""))])
    result = run(sweep.main, args(sweep_dir, found, state="watch", retries=1), capsys)
    s.done()
    assert result["retried"] == ["lr-b"] and result["members"][1]["state"] == "pending"
    assert result["members"][1]["ended"][0].startswith("90_1 FAILED, exit code")
    assert result["members"][1]["ended"][0].endswith("/lr-b/logs/llmtrain-lr-b-95.out")
    # its second try failed too: no third, both ends said
    s = Slurm(monkeypatch, [(SQUEUE, (0, squeue_rows(["90_0", "RUNNING", "llmtrain-sweep-lr", "(null)"]), "")),
                            (scontrol_job("96_1"), (0, job_text("failed", 97), ""))])
    result = run(sweep.main, args(sweep_dir, found, state="watch", retries=1), capsys)
    s.done()
    assert result["retried"] == [] and result["members"][1]["state"] == "failed" and result["members"][1]["tries"] == 2
    assert len(result["members"][1]["ended"]) == 2
    assert [sorted(a["ended"]) for a in json.load(open(str(sweep_dir / "sweep.json")))["arrays"]] == [["1"], ["1"]]


def test_status_makes_and_submits_nothing(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a")
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", ""))])
    result = run(sweep.main, args(sweep_dir, found, state="status"), capsys)
    s.done()
    assert not result["changed"] and result["members"][0]["state"] == "new"
    assert not os.path.exists(found[0]["run_dir"])


def test_a_pending_data_job_is_waited_for_and_a_failed_one_refused(monkeypatch, capsys, sweep_dir, tmp_path):
    found = members(sweep_dir, "lr-a")
    record = tmp_path / "prepare.done.json"
    record.write_text(json.dumps({"job_id": "80", "state": "PENDING", "fingerprint": "f"}))
    argv, _content = array_argv(sweep_dir, found, [0], dependency="afterok:80")
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), CONFIG,
                            (SQUEUE, (0, squeue_rows(["80", "RUNNING", "llmtrain-prepare-lr", "(null)"]), "")),
                            (argv, (0, "91\n", ""))])
    result = run(sweep.main, args(sweep_dir, found, after_records=[str(record)]), capsys)
    s.done()
    assert result["submitted"][0]["job_id"] == "91"
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), CONFIG, (SQUEUE, (0, "", ""))])
    found = members(sweep_dir, "lr-z")
    result = run(sweep.main, args(sweep_dir, found, after_records=[str(record)]), capsys)
    assert result["failed"] and "the sweep's data job 80 ended without completing" in result["msg"]


def test_a_sweep_beyond_the_clusters_max_array_size_is_refused_before_any_submission(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, *("lr-%d" % index for index in range(5)))
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), (CONFIG[0], (0, "MaxArraySize = 4\n", ""))])
    result = run(sweep.main, args(sweep_dir, found), capsys)
    s.done()
    assert result["failed"] and "MaxArraySize is 4" in result["msg"] and "split it into sweeps of at most 4" in result["msg"]
    assert "set sweep_split: true" in result["msg"] and not os.path.exists(str(sweep_dir / "sweep.json"))


def test_with_split_a_sweep_beyond_max_array_size_is_arrays_of_at_most_that_many_tasks(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, *("lr-%d" % index for index in range(5)))
    first, _content = array_argv(sweep_dir, found, [0, 1, 2, 3])
    content = sweep_job.array_script("lr", [(0, "lr-4", found[4]["run_dir"])], str(sweep_dir / "data"))
    options = sweep_job.array_options(OPTIONS, [0], 2)
    fp = sbatch_argv.fingerprint("llmtrain-sweep-lr", content, options, {}, str(sweep_dir))
    second = first[:3] + ["--comment=llmtrain:" + fp, "--chdir=" + str(sweep_dir)] + sbatch_argv.option_argv(options)
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), (CONFIG[0], (0, "MaxArraySize = 4\n", "")), (first, (0, "90\n", "")),
                            (second, (0, "91\n", ""))])
    result = run(sweep.main, args(sweep_dir, found, split=True), capsys)
    s.done()
    assert [m["job_id"] for m in result["members"]] == ["90_0", "90_1", "90_2", "90_3", "91_0"]
    assert [a["tasks"] for a in json.load(open(str(sweep_dir / "sweep.json")))["arrays"]] == [
        {"0": "lr-0", "1": "lr-1", "2": "lr-2", "3": "lr-3"}, {"0": "lr-4"}]


def test_a_members_history_is_read_from_its_start_bounded_downsampled_and_what_it_cannot_read_is_counted(tmp_path):
    lines = [json.dumps({"event": "start", "step": 0, "params": 70592, "total_steps": 1000})]
    lines += [json.dumps({"step": step, "loss": 5.0 - step / 500.0, "tokens_seen": 1024 * step}) for step in range(10, 1010, 10)]
    lines += ["{not json", json.dumps({"step": 1000, "loss": 3.1, "val_loss": 3.2, "tokens_seen": 1024000}),
              json.dumps({"step": 1005, "loss": float("nan")})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    found = sweep.history(dict(name="m", run_dir=str(tmp_path)))
    assert found["source"] == "metrics" and found["params"] == 70592 and found["tokens"] == 1024000 and found["val_loss"] == 3.2
    assert found["unreadable"] == 1 and not found["truncated"]
    # the last loss is NaN (diverged): no final loss, the best of the others (step 1000's last record: 3.1)
    assert found["final_loss"] is None and found["best_loss"] == 3.02
    assert 50 <= len(found["curve"]) <= sweep.CURVE_POINTS + 1 and found["curve"][0] == [10, 4.98]
    assert found["val_curve"] == [[1000, 3.2]] and found["hours"] is None
    assert sweep.history(dict(name="m", run_dir=str(tmp_path / "none")))["curve"] == []


def test_a_history_longer_than_the_bound_is_read_up_to_it_and_says_so(tmp_path, monkeypatch):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 3.0}) + "\n" for s in range(100)))
    monkeypatch.setattr(sweep, "HISTORY_MAX_BYTES", 200)
    found = sweep.history(dict(name="m", run_dir=str(tmp_path)))
    assert found["truncated"] and len(found["curve"]) < 10


def test_a_done_member_whose_script_changed_trains_again_and_one_unchanged_does_not(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a", "lr-b")
    ran = dict((m["name"], sweep.digest(m["files"]["scripts/pretrain.sbatch"])) for m in found)
    (sweep_dir / "sweep.json").write_text(json.dumps({"arrays": [{"job_id": "90", "tasks": {"0": "lr-a", "1": "lr-b"},
                                                                 "scripts": {"0": ran["lr-a"], "1": ran["lr-b"]}}]}))
    for member in found:
        os.makedirs(os.path.join(member["run_dir"], "scripts"))
        with open(member["done_file"], "w") as handle:
            json.dump({"job_id": "90_0", "state": "COMPLETED", "fingerprint": "f"}, handle)
    found[1]["files"]["scripts/pretrain.sbatch"] += "# pretrain_steps changed\n"
    argv, _content = array_argv(sweep_dir, found, [1])
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", "")), CONFIG, (argv, (0, "91\n", ""))])
    result = run(sweep.main, args(sweep_dir, found), capsys)
    s.done()
    assert [(m["name"], m["state"]) for m in result["members"]] == [("lr-a", "done"), ("lr-b", "pending")]
    assert json.load(open(str(sweep_dir / "sweep.json")))["arrays"][1]["scripts"] == {"1": sweep.digest(
        found[1]["files"]["scripts/pretrain.sbatch"])}


def test_a_sweep_without_its_code_is_refused_naming_the_stages_that_make_it(monkeypatch, capsys, tmp_path):
    base = tmp_path / "ws" / "lr"
    base.mkdir(parents=True)
    s = Slurm(monkeypatch, [])
    result = run(sweep.main, args(base, members(base, "lr-a")), capsys)
    assert result["failed"] and "preflight, nccl_env and deploy stages" in result["msg"]
    s.done()


def test_a_record_from_the_workspace_gives_only_job_ids_and_run_names(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"arrays": [{"job_id": "90", "tasks": {"0": "lr-a", "1": "../../etc", "x": "lr-b", "2": 7}},
                                           {"job_id": "9; rm", "tasks": {"0": "lr-c"}}, "junk"]}))
    assert sweep_state.read_record(str(path)) == [{"job_id": "90", "tasks": {"0": "lr-a"}}]
    path.write_text("{" * 100000)
    assert sweep_state.read_record(str(path)) == []


def test_stopping_a_sweep_asks_its_running_members_for_a_checkpoint_and_cancels_the_pending(monkeypatch, capsys, sweep_dir):
    found = members(sweep_dir, "lr-a", "lr-b", "lr-c")
    (sweep_dir / "sweep.json").write_text(json.dumps({"arrays": [{"job_id": "90", "tasks": {"0": "lr-a", "1": "lr-b", "2": "lr-c"}}]}))
    for member in found:
        os.makedirs(member["run_dir"])
    queue = squeue_rows(["90_0", "RUNNING", "llmtrain-sweep-lr", "(null)"], ["90_[1-2%1]", "PENDING", "llmtrain-sweep-lr", "(null)"])
    s = Slurm(monkeypatch, [(SQUEUE, (0, queue, "")),
                            (["/usr/bin/scancel", "--signal=USR2", "90_0"], (0, "", "")),
                            (["/usr/bin/scancel", "90_1"], (0, "", "")), (["/usr/bin/scancel", "90_2"], (0, "", "")),
                            (SQUEUE, (0, squeue_rows(["90_0", "COMPLETING", "llmtrain-sweep-lr", "(null)"]), "")),
                            (SQUEUE, (0, "", ""))])
    monkeypatch.setattr(sweep.time, "sleep", lambda _s: None)
    result = run(sweep.main, dict(name="llmtrain-sweep-lr", sweep="lr", base_dir=str(sweep_dir), state="stopped"), capsys)
    s.done()
    assert result["signalled"] == ["90_0"] and result["cancelled"] == ["90_1", "90_2"] and result["left"] == []
    assert (sweep_dir.parent / "lr-a" / "STOP").read_text() == "90_0\n" and (sweep_dir.parent / "lr-b" / "STOP").read_text() == "90_1\n"
    # the member stopped is not failed: the watch does not retry it, a rerun trains it on
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", ""))])
    status = run(sweep.main, args(sweep_dir, found, state="watch", retries=1), capsys)
    s.done()
    assert [m["state"] for m in status["members"]] == ["stopped"] * 3 and status["retried"] == []


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers")
OWN = re.compile(r"^iter (?P<step>\d+): loss (?P<loss>[\d.]+)")


def test_a_resumed_members_curve_has_each_step_once_the_last_record_of_it_and_its_hours_from_usage(tmp_path):
    lines = [json.dumps({"step": s, "loss": 4.0 - s / 100.0}) for s in (10, 20, 30)]
    lines += [json.dumps({"event": "resume", "step": 20}), json.dumps({"step": 30, "loss": 3.5}),
              json.dumps({"step": 40, "loss": 3.4, "val_loss": 3.6})]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "usage.json").write_text(json.dumps({"first": "2026-12-07T10:00:00Z", "starts": 2, "node_s": 7200.0,
                                                     "gpu_s": 57600.0, "gpus_per_node": 8}))
    found = sweep.history(dict(name="m", run_dir=str(tmp_path)), nodes=2)
    assert found["curve"] == [[10, 3.9], [20, 3.8], [30, 3.5], [40, 3.4]] and found["final_loss"] == 3.4
    assert found["gpu_hours"] == 16.0 and found["hours"] == 1.0


def own_member(tmp_path, name="own-a"):
    run_dir = tmp_path / name
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "src").mkdir()
    return dict(name=name, run_dir=str(run_dir), chdir=str(run_dir / "src"))


def test_your_scripts_member_compares_from_its_event_files_under_its_working_directory(tmp_path):
    member = own_member(tmp_path)
    runs = os.path.join(member["chdir"], "out", "runs", "Dec07_10-00-00_node1")
    os.makedirs(runs)
    shutil.copy(os.path.join(FIXTURES, "hf_trainer_5.25.0.tfevents"), os.path.join(runs, "events.out.tfevents.1.node1.7.0"))
    found = sweep.history(member, tag=None)
    assert found["source"] == "events" and [step for step, _loss in found["curve"]] == [5, 10]
    assert found["final_loss"] == found["curve"][-1][1] and found["val_loss"] is not None
    progress = sweep.progress(member, None, None)
    assert progress["step"] == 10 and progress["loss"] == found["final_loss"]


def test_your_scripts_member_without_event_files_compares_from_every_tries_log_lines_in_order(tmp_path):
    member = own_member(tmp_path)
    logs = os.path.join(member["run_dir"], "logs")
    with open(os.path.join(logs, "llmtrain-own-a-99.out"), "w") as handle:  # the second try: it resumed from 10
        handle.write("iter 10: loss 2.5\niter 15: loss 2.25\n")
    with open(os.path.join(logs, "llmtrain-own-a-7.out"), "w") as handle:
        handle.write("".join("iter %d: loss %.2f\n" % (step, 3.0 - step / 20.0) for step in (0, 5, 10, 15)))
    with open(os.path.join(logs, "llmtrain-own-b-100.out"), "w") as handle:  # another member's: not read
        handle.write("iter 20: loss 0.1\n")
    patterns = log_progress.compile_patterns([OWN.pattern])
    found = sweep.history(member, patterns)
    assert found["source"] == "log" and found["curve"] == [[0, 3.0], [5, 2.75], [10, 2.5], [15, 2.25]]
    assert sweep.progress(member, patterns)["step"] == 15
    # a try that had nothing left to train prints no progress line: the newest log that has one tells
    with open(os.path.join(logs, "llmtrain-own-a-120.out"), "w") as handle:
        handle.write("resuming from out/ckpt.pt at iter 20\n")
    assert sweep.progress(member, patterns)["step"] == 15
    # the reference trainer's member (no chdir) reads its metrics file alone
    assert sweep.history(dict(member, chdir=None), patterns)["source"] is None


def test_a_member_requeued_or_started_again_is_told_how_from_its_start_and_end_lines(tmp_path):
    def starts(*lines):
        (tmp_path / "starts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    first = {"job_id": "101", "start": 1, "nodes": "n[1-2]", "left": "", "time": "2026-12-07T10:00:00Z"}
    now = 1796642400.0  # 2026-12-07T11:20:00Z
    starts(first)
    assert sweep.recovered(str(tmp_path), "running", now) is None
    starts(first, {"event": "end", "job_id": "101", "start": 1, "how": "preempted", "exit_code": 0, "time": "x"})
    assert sweep.recovered(str(tmp_path), "pending", now) == "to start again: its start ended preempted"
    again = {"job_id": "101", "start": 2, "nodes": "n[2-3]", "left": "n1", "time": "2026-12-07T11:10:00Z"}
    starts(first, {"event": "end", "job_id": "101", "start": 1, "how": "killed", "signal": "SIGTERM", "exit_code": 143,
                   "time": "x"}, again)
    assert sweep.recovered(str(tmp_path), "running", now) == "started again after its start ended killed by SIGTERM, without n1"
    # told for a while after the start began, not for the rest of the member's training
    assert sweep.recovered(str(tmp_path), "running", now + sweep.RECOVERY_TOLD_S) is None
    assert sweep.recovered(str(tmp_path / "none"), "pending", now) is None
