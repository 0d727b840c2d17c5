"""A sweep on the local cluster (playbooks/sweep.yml), from a login shell with umask 002: every
member a full run of its own, their training one Slurm job array, compared in runs/<sweep>/ (the
scaling law once there are three sizes) and one row of status.yml; a rerun submits nothing, a value
added trains only the new member; a member's task cancelled mid-run is submitted again and resumes
from its checkpoint, stop.yml -e sweep=NAME stops it with a checkpoint, and a member that fails is
tried again, then reported failed with why each try ended."""

import json
import os
import re
import shutil

import pytest

from cluster import ROOT, RUNS, WORKSPACE, BackgroundPlaybook, run_playbook, slurm, wait_for, writable_by_others

SWEEP = "ladder"
# short members on one node each, two at a time
BASE = {"slurm_nodes": 1, "pretrain_steps": 40, "pretrain_checkpoint_interval": 20, "sweep_parallel": 2,
        "sweep_poll_interval": 2}


def values(grid, name=SWEEP, **extra):
    return json.dumps(dict(BASE, sweep={"name": name, "grid": grid}, **extra))


def clean(name):
    for top in (WORKSPACE, RUNS):
        for entry in os.listdir(top) if os.path.isdir(top) else []:
            if entry == name or entry.startswith(name + "-"):
                shutil.rmtree(os.path.join(top, entry), ignore_errors=True)


def record(name):
    with open(os.path.join(WORKSPACE, name, "sweep.json")) as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def ladder(local_cluster):
    clean(SWEEP)
    return run_playbook("sweep.yml", "-e", values({"pretrain_model.n_layer": [1, 2]}), umask=0o002)


def test_a_sweep_trains_each_member_as_a_run_of_its_own_in_one_array(ladder):
    arrays = record(SWEEP)["arrays"]
    assert len(arrays) == 1 and sorted(arrays[0]["tasks"].values()) == ["ladder-n_layer1", "ladder-n_layer2"], arrays
    array = arrays[0]["job_id"]
    for index, member in arrays[0]["tasks"].items():
        run_dir = os.path.join(WORKSPACE, member)
        # its own done record, naming its task of the array
        done = json.load(open(os.path.join(run_dir, "train.done.json")))
        assert done["state"] == "COMPLETED" and done["job_id"] == "%s_%s" % (array, index), done
        records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
        assert records[-1]["event"] == "done" and records[-1]["step"] == 40
        # its own job script (kept to read and to submit by hand), trained on the sweep's data
        script = open(os.path.join(run_dir, "scripts", "pretrain.sbatch")).read()
        assert "--n-layer %s " % member[-1] in script and "--data %s/%s/data " % (WORKSPACE, SWEEP) in script
        # its log in its own directory, as its own job's would be: the node check ran there
        logs = os.listdir(os.path.join(run_dir, "logs"))
        assert len(logs) == 1 and re.match(r"llmtrain-%s-\d+\.out$" % member, logs[0]), logs
        assert os.listdir(os.path.join(run_dir, "node_check")) == ["llmtrain-%s.json" % member]
        assert writable_by_others(run_dir) == []
    members = json.load(open(os.path.join(RUNS, SWEEP, "members.json")))
    assert [(m["name"], m["state"], m["progress"]["step"]) for m in members] == [
        ("ladder-n_layer1", "done", 40), ("ladder-n_layer2", "done", 40)]
    table = open(os.path.join(RUNS, SWEEP, "sweep.md")).read()
    assert "| member | pretrain_model.n_layer | state | step | loss |" in table
    assert re.search(r"^\| ladder-n_layer2 \| 2 \| done \| 40 \| \d", table, re.M), table
    assert "Best finished member: **ladder-n_layer" in table and "![loss curves](sweep.png)" in table
    assert open(os.path.join(RUNS, SWEEP, "sweep.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # two sizes: no law is fitted
    assert "## Scaling law" not in table
    assert members[0]["params"] < members[1]["params"] and members[0]["tokens"] == members[1]["tokens"] > 0
    assert re.search(r"sweep ladder: 2 members, .*running", ladder.output), ladder.output[-3000:]


def test_a_rerun_submits_nothing_and_a_value_added_trains_only_the_new_member(ladder):
    again = run_playbook("sweep.yml", "-e", values({"pretrain_model.n_layer": [1, 2]}), umask=0o002)
    assert len(record(SWEEP)["arrays"]) == 1
    assert "sweep ladder: 2 members, 2 done" in again.output
    run_playbook("sweep.yml", "-e", values({"pretrain_model.n_layer": [1, 2, 3]}), umask=0o002)
    arrays = record(SWEEP)["arrays"]
    assert len(arrays) == 2 and list(arrays[1]["tasks"].values()) == ["ladder-n_layer3"], arrays
    members = json.load(open(os.path.join(RUNS, SWEEP, "members.json")))
    assert [m["state"] for m in members] == ["done"] * 3
    # three sizes: the law over them, said not to be trusted (three points fit three parameters exactly)
    table = open(os.path.join(RUNS, SWEEP, "sweep.md")).read()
    assert "## Scaling law" in table and "Against parameters, over 3 sizes" in table, table
    assert "**Not to be trusted:** 3 sizes fit three parameters exactly" in table
    # a member whose nodes exceed the partition is refused by name before anything is made
    refused = run_playbook("sweep.yml", "-e", json.dumps(dict(BASE, sweep={"name": SWEEP, "grid": {
        "pretrain_model.n_layer": [1, 2, 3]}, "list": [{"slurm_nodes": 99}]})), check=False)
    assert refused.rc != 0 and re.search(r"sweep member ladder-nodes99: slurm_nodes=99 but partition \S+ has \d+ usable",
                                         refused.output), refused.output[-3000:]
    assert len(record(SWEEP)["arrays"]) == 2 and not os.path.exists(os.path.join(WORKSPACE, "ladder-nodes99"))
    # status.yml: the sweep is one row, its members counted; -e sweep=NAME lists them
    # (the tests' callback shows a message's lines as one JSON string)
    status = run_playbook("status.yml", "-e", "sweep=" + SWEEP).output.replace("\\n", "\n")
    assert re.search(r"^\s*ladder\s+sweep \(3 members: 3 done\)", status, re.M), status[-3000:]
    assert not re.search(r"^\s*ladder-n_layer1\s+finished", status, re.M)
    assert re.search(r"^\s*ladder-n_layer3\s+done\s+\d+_2\s+40\s", status, re.M), status[-3000:]
    # a member by itself, by its name: exported and evaluated on the sweep's data, its own data/ as hard links
    member = os.path.join(WORKSPACE, "ladder-n_layer1")
    assert os.stat(os.path.join(member, "data", "meta.json")).st_ino == os.stat(
        os.path.join(WORKSPACE, SWEEP, "data", "meta.json")).st_ino
    run_playbook("export.yml", "-e", "run_name=ladder-n_layer1")
    assert os.path.isfile(os.path.join(member, "export", "step_000040", "config.json"))
    assert json.load(open(os.path.join(member, "eval", "step_000040.json")))["loss"] > 0


def test_a_cancelled_member_resumes_from_its_checkpoint_a_failing_one_is_tried_again_and_stop_stops_them(local_cluster):
    """sweep_retries 1: the watch submits each failed member once more; stop.yml -e sweep=NAME stops
    the member running, with a checkpoint, and the watch does not try it again."""
    name = "retries"
    clean(name)
    sweep = {"name": name, "list": [{"pretrain_steps": 3000, "pretrain_checkpoint_interval": 50},
                                    {"pretrain_extra_args": ["--no-such-flag"]}]}
    play = BackgroundPlaybook(dict(BASE, sweep=sweep, sweep_retries=1), playbook="sweep.yml")
    long_run = os.path.join(WORKSPACE, name + "-checkpoint_interval50-steps3000")

    def events(kind):
        path = os.path.join(long_run, "starts.jsonl" if kind != "checkpoint" else "metrics.jsonl")
        lines = open(path).read().splitlines() if os.path.exists(path) else []
        return [json.loads(line) for line in lines if '"event": "%s"' % kind in line]
    wait_for(lambda: events("checkpoint"), 300, "the long member's first checkpoint", play)
    task = json.load(open(os.path.join(long_run, "train.done.json")))["job_id"]
    slurm("scancel", task)
    # the watch submits it again, and it resumes from its checkpoint
    resumed = wait_for(lambda: events("resume"), 300, "the long member's resume", play)
    assert resumed[0]["step"] >= 50 and resumed[0]["job_id"] != events("start")[0]["job_id"]
    stopped = run_playbook("stop.yml", "-e", "sweep=" + name, "-e", "pretrain_signal_lead=60")
    assert re.search(r"Sweep retries: 1 running member\(s\) told to save a checkpoint and stop", stopped.output), stopped.output[-3000:]
    result = play.wait(600)
    assert result.rc != 0, result.output[-3000:]
    # the watch's line told the member's recovery
    assert re.search(r"recovered: %s \((started again|to start again)" % os.path.basename(long_run), result.output), \
        result.output[-3000:]
    ends = [s for s in events("end") if s["job_id"] == resumed[0]["job_id"]]
    assert ends and ends[-1]["how"] == "stopped", ends
    assert json.load(open(os.path.join(long_run, "train.done.json")))["state"] != "COMPLETED"
    # the failing member: tried twice, each try's end kept, and the play fails naming it and why
    members = dict((m["name"], m) for m in json.load(open(os.path.join(RUNS, name, "members.json"))))
    assert members[os.path.basename(long_run)]["state"] == "stopped" and members[os.path.basename(long_run)]["tries"] == 2
    failing = [m for m in members.values() if m["state"] == "failed"]
    assert len(failing) == 1 and failing[0]["tries"] == 2 and len(failing[0]["ended"]) == 2, members
    assert all("FAILED" in why and "/logs/llmtrain-" in why for why in failing[0]["ended"]), failing
    assert "1 member(s) of sweep retries failed: %s (" % failing[0]["name"] in result.output


def test_a_sweep_of_your_own_script_is_compared_from_its_log_lines(local_cluster, tmp_path):
    """Two members of your script that differ in one flag, each giving its parameter count
    (sweep_params): trained from the sweep's deployed source, compared from their log lines (the
    script writes no metrics file and no event file)."""
    name = "ownsweep"
    clean(name)
    source = tmp_path / "nanolm"
    shutil.copytree(os.path.join(ROOT, "tests", "integration", "files", "own_script"), str(source))
    sweep = {"name": name, "list": [{"pretrain_script_args.--n_embd": 16, "sweep_params": 21000},
                                    {"pretrain_script_args.--n_embd": 32, "sweep_params": 46000}]}
    settings = dict(BASE, sweep=sweep, run_source_dir=str(source), run_script="train.py", pretrain_network_check=False,
                    pretrain_script_args=["config/tiny.py", "--log_interval=5"])
    result = run_playbook("sweep.yml", "-e", json.dumps(settings), umask=0o002)
    members = json.load(open(os.path.join(RUNS, name, "members.json")))
    assert [(m["name"], m["state"], m["source"], m["params"]) for m in members] == [
        ("ownsweep-n_embd16", "done", "log", 21000), ("ownsweep-n_embd32", "done", "log", 46000)], members
    for member in members:
        # its flag reached its script, in its own run directory's copy of the sweep's source
        logs = os.path.join(WORKSPACE, member["name"], "logs")
        log = "".join(open(os.path.join(logs, entry)).read() for entry in os.listdir(logs))
        assert re.search(r"^config tiny: world size \d+, cwd %s/%s/src$" % (re.escape(WORKSPACE), member["name"]), log, re.M), log[-3000:]
        assert member["final_loss"] > 0 and (member["progress"] or {}).get("step") == 15, member
    table = open(os.path.join(RUNS, name, "sweep.md")).read()
    assert "Losses from: its log lines (2)." in table and "Best finished member: **ownsweep-n_embd" in table, table
    assert re.search(r"^\| ownsweep-n_embd32 \| 32 \| done \| 15 \| \d[^|]*\| \d[^|]*\|  \| 46k \|", table, re.M), table
    assert open(os.path.join(RUNS, name, "sweep.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert re.search(r"sweep ownsweep: 2 members, 2 done; lowest loss \d", result.output), result.output[-3000:]
