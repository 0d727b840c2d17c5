import json
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record

JOB = dict(job_id="16", name="train", state="COMPLETED", exit_code=0, end_time="2026-11-29T21:44:47",
           stdout_path="/o/16.out", nodelist="n1", signal=0)


def test_record_of_a_job_keeps_what_a_rerun_returns():
    assert done_record.of_job(JOB, "aaaa") == dict(fingerprint="aaaa", name="train", job_id="16", state="COMPLETED",
                                                   exit_code=0, end_time="2026-11-29T21:44:47", stdout_path="/o/16.out")


def test_write_then_read(tmp_path):
    path = str(tmp_path / "done.json")
    done_record.write(path, done_record.of_job(JOB, "aaaa"))
    assert done_record.read(path, "aaaa") == (done_record.of_job(JOB, "aaaa"), None)
    assert done_record.read(path, "bbbb") == (None, None)
    assert os.stat(path).st_mode & 0o777 == 0o644

    done_record.write(path, done_record.of_job(JOB, "bbbb"))  # replaces the old record
    assert json.loads((tmp_path / "done.json").read_text())["fingerprint"] == "bbbb"
    assert os.listdir(str(tmp_path)) == ["done.json"]


def test_missing_and_unreadable_records(tmp_path):
    assert done_record.read(str(tmp_path / "none.json"), "aaaa") == (None, None)
    (tmp_path / "bad.json").write_text("{")
    record, why = done_record.read(str(tmp_path / "bad.json"), "aaaa")
    assert record is None and why.startswith("done_file %s holds no readable record" % (tmp_path / "bad.json"))
    assert why.endswith("the job counts as not done")


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "done.json"
    try:
        done_record.write(str(path), dict(bad=object()))
    except TypeError:
        pass
    assert os.listdir(str(tmp_path)) == []


def test_a_record_that_names_a_job_in_other_digits_names_no_job_to_wait_for(tmp_path):
    """sbatch queues a job behind the pending job a record names (--dependency=afterok:ID): only an id
    of the digits 0-9 is one; Arabic-Indic 42 and fullwidth 12 are not."""
    path = str(tmp_path / "data.done.json")
    for job_id in ("\u0664\u0662", "\uff11\uff12", "4\u00b2"):
        done_record.write(path, dict(fingerprint="aaaa", job_id=job_id, state="PENDING"))
        assert done_record.pending_job(path) is None and done_record.job_of(path) == dict(state="PENDING")
        record, why = done_record.read(path, "aaaa")
        assert record is None and "names no Slurm job" in why
    done_record.write(path, dict(fingerprint="aaaa", job_id="42", state="PENDING"))
    assert done_record.pending_job(path) == "42"
