"""runfiles: the Slurm start and the restart inside the job that the trainer's lines name, read from
the environment in ASCII digits."""

import json

import pytest
from trainer import runfiles


@pytest.mark.parametrize("count, start", [
    ("0", 1), ("2", 3), ("", 1),
    # other scripts' digits, which isdigit() takes and int() reads ('\u0662' is 2), '1_0', no number
    ("\u0662", 1), ("\uff12", 1), ("\u00b2", 1), ("1_0", 1), ("-1", 1), ("x", 1), ("9" * 19, 1),
])
def test_a_start_is_counted_from_an_ascii_restart_count(monkeypatch, count, start):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", count)
    assert runfiles.slurm_start() == {"job_id": "42", "start": start}


def test_outside_slurm_there_is_no_start(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert runfiles.slurm_start() == {}


def test_a_failure_line_names_its_restart_in_the_job_in_ascii_digits_only(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "\u0661")
    path = tmp_path / runfiles.RANK_FAILURES_FILE
    for count in ("3", "\u0663", "x"):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", count)
        runfiles.record_failure(str(path), 1, "n2", 7, RuntimeError("boom"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["restart_in_job"], line["start"], line["error"]) for line in lines] == [
        (3, 1, "RuntimeError: boom"), (0, 1, "RuntimeError: boom"), (0, 1, "RuntimeError: boom")]
