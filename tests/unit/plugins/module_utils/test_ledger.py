# -*- coding: utf-8 -*-
"""The ledger from sacct's text: parsing pinned on real output (tests/unit/fixtures/slurm/sacct_usage.md),
the sums, which jobs it asks about and when it falls back to the run's own lines."""

import json
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import ledger
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def test_sacct_usage_lines_parse_to_each_start_with_its_allocation():
    rows = ledger.parse_usage(fixture("sacct_usage.txt"))
    assert [(r["job_id"], r["state"], r["start"], r["seconds"], r["nodes"], r["cpus"], r["gpus"]) for r in rows] == [
        ("1", "COMPLETED", "2026-12-06T09:11:34", 3, 2, 2, 0),
        ("2", "REQUEUED", "2026-12-06T09:11:34", 1, 1, 1, 0),
        ("2", "COMPLETED", "2026-12-06T09:11:47", 4, 1, 1, 0),
        ("3", "COMPLETED", "2026-12-06T09:11:59", 30, 3, 6, 0),
        ("4", "COMPLETED", "2026-12-06T09:12:29", 1, 1, 2, 0),
        ("5", "REQUEUED", "2026-12-06T09:13:23", 6, 3, 3, 0),
        ("6", "COMPLETED", "2026-12-06T09:13:29", 1, 1, 1, 0),
        ("5", "CANCELLED", None, 0, 0, 0, 0)]  # the start it never had
    pending = ledger.parse_usage(fixture("sacct_usage_requeued.txt"))[-1]
    assert (pending["state"], pending["start"], pending["seconds"], pending["nodes"]) == ("PENDING", None, 0, 0)


def test_gpus_are_gres_gpu_else_the_sum_of_its_types_and_other_gres_are_not_gpus():
    assert ledger.tres("billing=64,cpu=64,gres/gpu=8,gres/gpu:a100=8,mem=500G,node=1") == dict(cpus=64, nodes=1, gpus=8)
    assert ledger.tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=4,node=2") == dict(cpus=8, nodes=2, gpus=6)
    assert ledger.tres("cpu=8,gres/gpumem=80G,gres/shard=4,node=1") == dict(cpus=8, nodes=1, gpus=0)
    assert ledger.tres("") == dict(cpus=0, nodes=0, gpus=0)


def test_lines_of_another_shape_are_not_rows():
    line = FIELD_SEP.join(["7", "7", "COMPLETED", "2026-12-06T09:11:34", "3600", "cpu=4,node=2"])
    text = "\n".join(["sacct: error: something", FIELD_SEP.join(["x;rm", "x;rm", "COMPLETED", "", "1", ""]), line,
                      line + FIELD_SEP + "extra"])
    assert [r["job_id"] for r in ledger.parse_usage(text)] == ["7"]


def test_numbers_and_job_ids_of_other_digits_are_none_and_raise_nothing():
    """ElapsedRaw of a superscript 2 made int() raise; Arabic-Indic digits were read as numbers."""
    lines = [FIELD_SEP.join(["7", "7", "COMPLETED", "2026-12-06T09:11:34", "\u00b2", "cpu=\u0664,gres/gpu=\u00b2,node=2"]),
             FIELD_SEP.join(["8", "8", "COMPLETED", "2026-12-06T09:11:34", "\u0663\u0666\u0660\u0660", "cpu=4,node=\uff12"]),
             FIELD_SEP.join(["\u0669", "\u0669", "COMPLETED", "2026-12-06T09:11:34", "60", "cpu=4,node=1"])]
    rows = ledger.parse_usage("\n".join(lines))
    assert [(r["job_id"], r["seconds"], r["cpus"], r["nodes"], r["gpus"]) for r in rows] == [
        ("7", 0, 0, 2, 0), ("8", 0, 4, 0, 0)]


def test_the_training_jobs_starts_are_summed_apart_from_the_other_jobs():
    rows = ledger.parse_usage(fixture("sacct_usage.txt"))
    kinds = {"5": "train", "2": "train", "1": "data", "4": "samples", "6": "venv"}
    result = ledger.ledger(rows, kinds)
    assert result["source"] == "sacct" and result["missing"] == []
    train = result["train"]
    # 2: 1 s + 4 s on 1 node of 1 CPU; 5: 6 s on 3 nodes of 1 CPU; its cancelled pending start counts none
    assert train["count"] == 3
    assert [(s["job_id"], s["state"], s["seconds"]) for s in train["starts"]] == [
        ("2", "REQUEUED", 1), ("2", "COMPLETED", 4), ("5", "REQUEUED", 6)]
    assert train["node_hours"] * 3600 == 23 and train["cpu_hours"] * 3600 == 23 and train["gpu_hours"] == 0
    assert [(o["kind"], o["job_id"], o["starts"], round(o["node_hours"] * 3600), round(o["cpu_hours"] * 3600))
            for o in result["others"]] == [("data", "1", 1, 6, 6), ("samples", "4", 1, 1, 2), ("venv", "6", 1, 1, 1)]


def test_gpu_hours_are_the_allocations_gpus_times_elapsed():
    line = FIELD_SEP.join(["9", "9", "COMPLETED", "2026-12-06T00:00:00", "7200", "cpu=128,gres/gpu:h100=16,mem=1T,node=2"])
    result = ledger.ledger(ledger.parse_usage(line), {"9": "train"})
    assert (result["train"]["gpu_hours"], result["train"]["node_hours"], result["train"]["cpu_hours"]) == (32.0, 4.0, 256.0)


def test_without_accounting_or_a_training_job_sacct_does_not_know_the_runs_lines_say_it():
    usage = dict(starts=2, node_hours=1.5, gpu_hours=12.0, cpu_hours=None, wall_s=9000.0)
    kinds = {"5": "train", "8": "train", "1": "data"}
    rows = ledger.parse_usage(fixture("sacct_usage.txt"))
    assert ledger.ledger(None, kinds, usage) == dict(
        source="usage.json", others=[], missing=[],
        train=dict(starts=[], count=2, node_hours=1.5, cpu_hours=None, gpu_hours=12.0))
    known = ledger.ledger(rows, kinds, usage)  # 8 is not in the accounting: the run's lines, and sacct's data job
    assert known["source"] == "usage.json" and known["missing"] == ["8"] and known["train"]["node_hours"] == 1.5
    assert [o["kind"] for o in known["others"]] == ["data"]
    assert ledger.ledger(rows, kinds, usage, complete=False)["source"] == "usage.json"
    assert ledger.ledger(None, {}, None)["train"] is None


def test_the_newest_starts_are_kept_and_every_start_is_counted(monkeypatch):
    monkeypatch.setattr(ledger, "STARTS_KEPT", 2)
    line = FIELD_SEP.join(["9", "9", "REQUEUED", "2026-12-06T00:00:%02d", "60", "cpu=2,node=1"])
    rows = ledger.parse_usage("\n".join(line % second for second in range(5)))
    train = ledger.ledger(rows, {"9": "train"})["train"]
    assert train["count"] == 5 and train["node_hours"] * 60 == 5
    assert [s["start"] for s in train["starts"]] == ["2026-12-06T00:00:03", "2026-12-06T00:00:04"]


def test_the_runs_job_ids_come_from_its_records_read_as_untrusted(tmp_path):
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    venv = tmp_path / "venv"
    venv.mkdir()
    (run / "train.done.json").write_text(json.dumps(dict(job_id="12", state="COMPLETED")))
    (run / "data" / "prepare.done.json").write_text(json.dumps(dict(job_id=10)))
    (run / "generate.done.json").write_text(json.dumps(dict(job_id="13;rm -rf /")))  # names no job
    (venv / ".llmtrain-venv.json").write_text("x" * (1 << 20))  # too large: read as none
    run_files.add_usage(str(run), "11", 1, 0, 60, 1, 0)
    run_files.add_usage(str(run), "12", 1, 100, 160, 1, 0)
    kinds, complete = ledger.job_ids(str(run), train=["14", "$(x)"], venv_dir=str(venv))
    assert kinds == {"14": "train", "12": "train", "11": "train", "10": "data"} and complete
    (tmp_path / "elsewhere.json").write_text(json.dumps(dict(job_id="99")))
    (run / "generate.done.json").unlink()
    os.symlink(str(tmp_path / "elsewhere.json"), str(run / "generate.done.json"))  # a link is not followed
    assert ledger.job_ids(str(run))[0] == {"12": "train", "11": "train", "10": "data"}


def test_sacct_is_asked_once_for_the_runs_jobs_each_start_apart():
    assert ledger.argv("/usr/bin/sacct", ["12", "10"]) == [
        "/usr/bin/sacct", "-X", "--duplicates", "--noheader", "--parsable2", "--delimiter=" + FIELD_SEP,
        "--format=JobID,JobIDRaw,State,Start,ElapsedRaw,AllocTRES", "--jobs=12,10"]
