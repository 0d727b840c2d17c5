"""run_ledger with a faked run_command: one sacct call for the run's job ids (its done records,
usage.json's and the caller's), on real sacct output; usage.json's figures without accounting."""

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import ledger
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files
from ansible_collections.llmtrain.slurm.plugins.modules import run_ledger
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, fixture, run


def make_run(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "data").mkdir(parents=True)
    (run_dir / "data" / "prepare.done.json").write_text(json.dumps(dict(job_id="1")))
    (run_dir / "generate.done.json").write_text(json.dumps(dict(job_id="4")))
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".llmtrain-venv.json").write_text(json.dumps(dict(job_id="6")))
    run_files.add_usage(str(run_dir), "2", 1, 0, 4, 1, 0, 1)
    return run_dir


def test_one_sacct_call_for_the_runs_jobs_its_training_starts_and_the_other_jobs_apart(monkeypatch, capsys, tmp_path):
    run_dir = make_run(tmp_path)
    s = Slurm(monkeypatch, [(ledger.argv("/usr/bin/sacct", ["5", "2", "1", "4", "6"]), (0, fixture("sacct_usage.txt"), ""))],
              bins=("sacct",))
    result = run(run_ledger.main, dict(run_dir=str(run_dir), job_ids=["5"], venv_dir=str(tmp_path / "venv")), capsys)
    s.done()
    used = result["ledger"]
    assert used["source"] == "sacct" and used["train"]["count"] == 3 and round(used["train"]["node_hours"] * 3600) == 23
    assert [(o["kind"], o["job_id"]) for o in used["others"]] == [("data", "1"), ("samples", "4"), ("venv", "6")]


def test_without_accounting_the_runs_own_lines(monkeypatch, capsys, tmp_path):
    run_dir = make_run(tmp_path)
    s = Slurm(monkeypatch, [(ledger.argv("/usr/bin/sacct", ["2", "1", "4"]), (1, "", fixture("sacct_disabled.txt")))],
              bins=("sacct",))
    used = run(run_ledger.main, dict(run_dir=str(run_dir)), capsys)["ledger"]
    s.done()
    assert used["source"] == "usage.json" and used["others"] == [] and used["train"]["count"] == 1
    assert round(used["train"]["node_hours"] * 3600) == 4 and round(used["train"]["cpu_hours"] * 3600) == 4
