"""slurm_job_info with a faked run_command (helpers from test_sbatch)."""

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils import slurm
from ansible_collections.llmtrain.slurm.plugins.modules import slurm_job_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import (
    SQUEUE, Slurm, fixture, job_text, run, scontrol_job, squeue_rows)


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
        (["/usr/bin/sacct", "-X", "--noheader", "--parsable2", "--delimiter=" + slurm.FIELD_SEP,
          "--format=" + ",".join(slurm.SACCT_FIELDS), "--jobs=3"], (1, "", fixture("sacct_disabled.txt"))),
    ], bins=("scontrol", "squeue", "sacct"))
    result = run(slurm_job_info.main, dict(job_id=["3"]), capsys)
    s.done()
    assert result["jobs"][0]["state"] == "UNKNOWN" and result["jobs"][0]["known"] is False
    assert result["finished"]


class Clock:
    """time.monotonic/time.sleep for the module: sleeping moves the clock, nothing waits."""

    def __init__(self, monkeypatch):
        self.now, self.sleeps = 1000.0, []
        monkeypatch.setattr(slurm_job_info.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(slurm_job_info.time, "sleep", self.sleep)

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_seconds_returns_at_the_check_that_sees_the_end(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))] * 3
              + [(scontrol_job(18), (0, job_text("completed", 18), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"], wait_seconds=10), capsys)
    s.done()
    assert result["finished"] and result["checks"] == 4 and result["jobs"][0]["state"] == "COMPLETED"
    assert clock.sleeps == [1.0, 1.0, 1.0]  # one check a second, none after the end


def test_wait_seconds_gives_up_after_its_time_a_second_after_the_last_check(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))] * 3)
    result = run(slurm_job_info.main, dict(job_id=["18"], wait_seconds=2.5), capsys)
    s.done()
    assert not result["finished"] and result["checks"] == 3
    assert clock.now == 1003.0  # the next retry's first check comes at least a second after this one's last


def test_without_wait_seconds_it_checks_once(monkeypatch, capsys):
    clock = Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(18), (0, fixture("scontrol_job_running.txt"), ""))])
    result = run(slurm_job_info.main, dict(job_id=["18"]), capsys)
    s.done()
    assert result["checks"] == 1 and clock.sleeps == []
