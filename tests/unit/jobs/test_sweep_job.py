"""A sweep's training as job arrays (plugins/module_utils/jobs/sweep.py): each member's job is the
training job a run with its settings would submit, in its own run directory, on the sweep's data;
members of one shape share an array; the array's task N runs member N's script in that member's
directory, its output in the member's log, under the name its own job would have."""

import json
import os
import subprocess

import golden
import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import sweep
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import Train
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import job_end
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members

KNOWN = sorted(golden.defaults()) + ["slurm_nodes", "slurm_workspace"]


def made(grid, case="ours"):
    values = dict(golden.variables(case), run_name="lr")
    found, errors = members({"name": "lr", "grid": grid}, KNOWN, values)
    assert errors == []
    return sweep.Sweep(values, found, parallel=2)


def test_each_member_is_the_training_job_of_its_settings_in_its_own_run_directory_on_the_sweeps_data():
    entries, shapes = made({"pretrain_learning_rate": [3e-4, 1e-3]}).entries()
    assert [e["name"] for e in entries] == ["lr-learning_rate0.0003", "lr-learning_rate0.001"]
    for entry, rate in zip(entries, ("0.0003", "0.001")):
        assert entry["run_dir"] == "/shared/llm work/" + entry["name"]
        assert entry["done_file"] == entry["run_dir"] + "/train.done.json"
        script = entry["files"]["scripts/pretrain.sbatch"]
        assert "--learning-rate %s " % rate in script
        # the sweep's data, prepared once; its own checkpoints and records
        assert "--data '/shared/llm work/lr/data' --out '/shared/llm work/%s'" % entry["name"] in script
        assert "#SBATCH --job-name=llmtrain-%s" % entry["name"] in script
        assert entry["files"]["scripts/node_check.conf"].startswith('# The node check settings of run "%s"' % entry["name"])
    # one shape: one array
    assert [e["shape"] for e in entries] == [0, 0] and len(shapes) == 1 and shapes[0]["nodes"] == 3


def test_a_run_that_is_no_member_keeps_its_own_data():
    values = golden.variables("ours")
    assert "--data '/shared/llm work/golden-ours/data'" in Train(values).script()


def test_members_of_other_node_counts_are_arrays_of_their_own():
    entries, shapes = made({"slurm_nodes": [1, 2], "pretrain_learning_rate": [1e-3]}).entries()
    assert [shapes[e["shape"]]["nodes"] for e in entries] == [1, 2]
    # a poll makes no scripts
    assert made({"slurm_nodes": [1, 2]}).entries(files=False)[0][0]["files"] == {}


def test_the_array_asks_for_its_members_tasks_and_how_many_run_at_once():
    options = sweep.array_options({"nodes": 1, "output": "logs/%x-%j.out"}, [0, 2, 5], 2)
    assert options == {"nodes": 1, "array": "0,2,5%2", "output": "logs/%x-%A_%a.out"}
    assert sweep.array_options({}, [3], 0)["array"] == "3"


def test_a_task_runs_its_members_script_in_its_directory_logging_there(tmp_path):
    dirs = []
    for name in ("a-lr1", "b-lr2"):
        run_dir = tmp_path / "work 'space' $HOME" / name  # a workspace with metacharacters
        (run_dir / "scripts").mkdir(parents=True)
        (run_dir / "logs").mkdir()
        (run_dir / "scripts" / "pretrain.sbatch").write_text('echo "ran in $(pwd) as ${SLURM_JOB_NAME}"\n')
        dirs.append(str(run_dir))
    data = tmp_path / "work 'space' $HOME" / "s" / "data"
    (data / "shards").mkdir(parents=True)
    for name in ("meta.json", "train.bin", "shards/val.bin"):
        (data / name).write_text(name)
    script = sweep.array_script("s", [(0, "a-lr1", dirs[0]), (4, "b-lr2", dirs[1])], str(data))
    path = tmp_path / "array.sbatch"
    path.write_text(script)
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="4", SLURM_ARRAY_JOB_ID="70", SLURM_JOB_ID="77")
    assert subprocess.run(["bash", str(path)], env=env, check=False).returncode == 0
    log = os.path.join(dirs[1], "logs", "llmtrain-b-lr2-77.out")
    assert open(log).read() == "ran in %s as llmtrain-b-lr2\n" % dirs[1]
    # the member's done record names the task, which marks it completed at its end (node/job.py)
    record = json.load(open(os.path.join(dirs[1], "train.done.json")))
    assert record == {"fingerprint": "llmtrain-sweep:70", "job_id": "70_4", "name": "llmtrain-b-lr2", "state": "RUNNING"}
    assert job_end.completed(record, "70_4", "now")["state"] == "COMPLETED"
    # the sweep's data as the member's own, hard links: its export and evaluation find it where a run's is
    own = os.path.join(dirs[1], "data", "shards", "val.bin")
    assert os.stat(own).st_ino == os.stat(str(data / "shards" / "val.bin")).st_ino
    assert sorted(os.listdir(dirs[1])) == ["data", "logs", "scripts", "train.done.json"]
    # a task of no member says so and ends with the settings' exit code
    env["SLURM_ARRAY_TASK_ID"] = "1"
    done = subprocess.run(["bash", str(path)], env=env, check=False, stderr=subprocess.PIPE, universal_newlines=True)
    assert done.returncode == 2 and "array task 1 runs no member of this sweep" in done.stderr


def test_a_member_name_that_is_no_run_name_never_reaches_the_script():
    with pytest.raises(ValueError, match="letters, digits"):
        sweep.array_script("s", [(0, "a'; rm -rf ~", "/w/a")])


def test_your_scripts_members_say_where_their_processes_run_for_their_event_files_and_the_sweep_its_patterns():
    values = dict(golden.variables("own-script"), run_name="own", pretrain_progress_regex=[r"^it (?P<step>\d+) (?P<loss>\S+)"])
    found, errors = members({"name": "own", "grid": {"pretrain_script_args.--lr": [1e-3, 3e-3]}}, KNOWN, values)
    assert errors == []
    args = sweep.Sweep(values, found).module_args(files=False)
    workspace = values["slurm_workspace"]
    assert [m["chdir"] for m in args["members"]] == ["%s/%s/scripts/work dir" % (workspace, m["name"]) for m in found]
    assert args["progress_regex"] == [r"^it (?P<step>\d+) (?P<loss>\S+)"] and args["progress_tag"] == values["pretrain_progress_tag"]
    assert "chdir" not in made({"pretrain_learning_rate": [1e-3]}).module_args(files=False)["members"][0]
