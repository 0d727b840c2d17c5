"""sbatch with a faked run_command (fake_slurm): each test lists the exact argument vectors
the module must run, and Slurm's recorded answers to them."""

import pytest
from ansible.module_utils import basic

from ansible_collections.llmtrain.slurm.plugins.module_utils import slurm
from ansible_collections.llmtrain.slurm.plugins.modules import sbatch
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import (
    SQUEUE, Slurm, fixture, job_text, run, scontrol_job, squeue_rows)

SCRIPT = "#!/bin/bash\necho hello\n"


def fp_of(name="train", content=SCRIPT, options=None, env=None, chdir=None):
    return slurm.fingerprint(name, content, options or {}, env or {}, chdir)


def submit_argv(name="train", fp=None, extra=(), script=None):
    argv = ["/usr/bin/sbatch", "--parsable", "--job-name=" + name, "--comment=llmtrain:" + (fp or fp_of(name))]
    return argv + list(extra) + ([script] if script else [])


def test_submits_content_on_stdin(monkeypatch, capsys):
    fp = fp_of()
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "COMPLETED", "other", "(null)"]), "")),
        (submit_argv(fp=fp), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("pending", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert result["changed"] and result["submitted"] and result["job_id"] == "16"
    assert result["state"] == "PENDING" and result["fingerprint"] == fp
    assert result["cmd"] == submit_argv(fp=fp)
    assert s.kwargs[1]["data"] == SCRIPT and s.kwargs[1]["binary_data"] is True


def test_same_job_pending_is_not_submitted_again(monkeypatch, capsys):
    fp = fp_of()
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["12", "FAILED", "train", "llmtrain:" + fp],
                                 ["21", "PENDING", "train", "llmtrain:" + fp],
                                 ["22", "PENDING", "train", "llmtrain:0000000000000000"]), "")),
        (scontrol_job(21), (0, fixture("scontrol_job_pending.txt"), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert not result["changed"] and result["job_id"] == "21" and result["cmd"] is None


def test_completed_job_counts_unless_force(monkeypatch, capsys):
    fp = fp_of()
    rows = squeue_rows(["16", "COMPLETED", "train", "llmtrain:" + fp])
    s = Slurm(monkeypatch, [(SQUEUE, (0, rows, "")), (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), ""))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert not result["changed"] and result["state"] == "COMPLETED" and result["exit_code"] == 0

    s = Slurm(monkeypatch, [
        (SQUEUE, (0, rows, "")),
        (submit_argv(fp=fp), (0, "30\n", "")),
        (scontrol_job(30), (0, job_text("pending", 30), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, force=True), capsys)
    s.done()
    assert result["changed"] and result["job_id"] == "30"


def test_check_mode_submits_nothing(monkeypatch, capsys):
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", ""))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys, check_mode=True)
    s.done()
    assert result["changed"] and result["job_id"] is None and result["cmd"] == submit_argv()


def test_script_file_options_env_and_chdir(monkeypatch, capsys, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    env = {"NCCL_DEBUG": "INFO", "WEIRD": "a,b 'c' \"d\" $(touch x) `id`\nline2;"}
    options = {"nodes": 2, "exclusive": True, "partition": "debug"}
    fp = fp_of(options=options, env=env, chdir=str(tmp_path))
    argv = submit_argv(fp=fp, extra=["--chdir=" + str(tmp_path), "--exclusive", "--nodes=2", "--partition=debug",
                                     "--export=ALL"], script=str(script))
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (argv, (0, "31\n", "")),
        (scontrol_job(31), (0, job_text("running", 31), "")),
    ])
    result = run(sbatch.main, dict(name="train", script=str(script), chdir=str(tmp_path), options=options, env=env), capsys)
    s.done()
    assert result["changed"] and result["fingerprint"] == fp
    assert s.kwargs[1]["environ_update"] == env and s.kwargs[1]["data"] is None


def test_export_none_passes_names_only(monkeypatch, capsys):
    env = {"A": "1,2"}
    options = {"export": "NONE"}
    fp = fp_of(options=options, env=env)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(fp=fp, extra=["--export=A"]), (0, "32\n", "")),
        (scontrol_job(32), (0, job_text("pending", 32), "")),
    ])
    run(sbatch.main, dict(name="train", content=SCRIPT, options=options, env=env), capsys)
    s.done()


def test_metacharacters_in_name_are_one_argument(monkeypatch, capsys):
    name = 'we,ird\nna"me $(touch /tmp/MARK) `id`; rm -rf /'
    fp = fp_of(name=name)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(name=name, fp=fp), (0, "23\n", "")),
        (scontrol_job(23), (0, fixture("scontrol_job_metachar_name.txt"), "")),
    ])
    result = run(sbatch.main, dict(name=name, content=SCRIPT), capsys)
    s.done()
    assert result["cmd"][2] == "--job-name=" + name


@pytest.mark.parametrize("options, message", [
    ({"bogus": 1}, "invalid options: bogus is not an sbatch option"),
    ({"nodes; touch x": 1}, "is not an option name"),
    ({"job-name": "x"}, "set the job name with the name option"),
])
def test_invalid_options_run_nothing(monkeypatch, capsys, options, message):
    s = Slurm(monkeypatch, [])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, options=options), capsys)
    s.done()
    assert result["failed"] and message in result["msg"]


def test_missing_script_file(monkeypatch, capsys, tmp_path):
    s = Slurm(monkeypatch, [])
    result = run(sbatch.main, dict(name="train", script=str(tmp_path / "nope.sh")), capsys)
    s.done()
    assert result["failed"] and "nope.sh cannot be read: No such file or directory" in result["msg"]


def test_missing_slurm_commands(monkeypatch, capsys):
    s = Slurm(monkeypatch, [], bins=())
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert result["failed"] and result["msg"].startswith("sbatch not found on PATH")


def test_controller_unreachable(monkeypatch, capsys):
    s = Slurm(monkeypatch, [(SQUEUE, (1, "", fixture("squeue_no_config.txt")))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert result["failed"] and "squeue --noheader" in result["msg"]
    assert "failed (rc 1)" in result["msg"] and "Could not establish a configuration source" in result["msg"]


def test_sbatch_rejection_is_shown_verbatim(monkeypatch, capsys):
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(extra=[]), (1, "", fixture("sbatch_invalid_partition.txt"))),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert result["failed"] and result["msg"] == "sbatch rejected the job: " + fixture("sbatch_invalid_partition.txt").strip()


def test_wait_for_a_failing_job_returns_its_log_tail(monkeypatch, capsys, tmp_path):
    log = tmp_path / "slurm-17.out"
    log.write_text("".join("line %d\n" % i for i in range(10)))
    failed = fixture("scontrol_job_failed.txt").replace("/tmp/fx/slurm-17.out", str(log))
    running = job_text("running", 17)
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "17\n", "")),
        (scontrol_job(17), (0, running, "")),
        (scontrol_job(17), (0, running, "")),
        (scontrol_job(17), (0, failed, "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, wait=True, log_tail_lines=3), capsys)
    s.done()
    assert result["failed"] and result["state"] == "FAILED" and result["exit_code"] == 3
    assert result["msg"] == "job 17 (fx-failed) ended FAILED, exit code 3, reason: NonZeroExitCode"
    assert result["log_tail"] == ["line 7", "line 8", "line 9"]


def test_wait_timeout_cancels(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(slurm.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(slurm.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    running = job_text("running", 40)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "40\n", "")),
        (scontrol_job(40), (0, running, "")),
        (scontrol_job(40), (0, running, "")),
        (scontrol_job(40), (0, running, "")),
        (scontrol_job(40), (0, running, "")),
        (["/usr/bin/scancel", "40"], (0, "", "")),
        (scontrol_job(40), (0, job_text("cancelled", 40), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, wait=True, wait_timeout=2), capsys)
    s.done()
    assert result["failed"] and result["cancelled"] == ["40"] and result["state"] == "CANCELLED"
    assert result["msg"] == "job 40 still RUNNING after 2s (wait_timeout); cancelled it"


def test_wait_on_a_forgotten_job_warns(monkeypatch, capsys):
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, msg: warned.append(msg))
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "50\n", "")),
        (scontrol_job(50), (0, job_text("running", 50), "")),
        (scontrol_job(50), (1, "", "slurm_load_jobs error: Invalid job id specified\n")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, wait=True), capsys)
    s.done()
    assert not result.get("failed") and result["state"] == "UNKNOWN"
    assert warned == ["job 50 finished and the controller has forgotten it; its outcome is unknown"]


def test_absent_cancels_active_jobs_of_the_name(monkeypatch, capsys):
    rows = squeue_rows(["7", "COMPLETED", "train", "(null)"], ["8", "RUNNING", "train", "(null)"],
                       ["9", "PENDING", "train", "llmtrain:abc"], ["10", "RUNNING", "other", "(null)"])
    s = Slurm(monkeypatch, [(SQUEUE, (0, rows, "")), (["/usr/bin/scancel", "8", "9"], (0, "", ""))])
    result = run(sbatch.main, dict(name="train", state="absent"), capsys)
    s.done()
    assert result["changed"] and result["cancelled"] == ["8", "9"]

    s = Slurm(monkeypatch, [(SQUEUE, (0, squeue_rows(["7", "COMPLETED", "train", "(null)"]), ""))])
    result = run(sbatch.main, dict(name="train", state="absent"), capsys)
    s.done()
    assert not result["changed"] and result["cancelled"] == []


def test_absent_in_check_mode_cancels_nothing(monkeypatch, capsys):
    s = Slurm(monkeypatch, [(SQUEUE, (0, squeue_rows(["8", "RUNNING", "train", "(null)"]), ""))])
    result = run(sbatch.main, dict(name="train", state="absent"), capsys, check_mode=True)
    s.done()
    assert result["changed"] and result["cancelled"] == ["8"]


def test_completed_job_found_in_accounting(monkeypatch, capsys):
    fp = fp_of()
    row = slurm.FIELD_SEP.join(["9", "train", "COMPLETED", "0:0", "00:00:05", "n1", "2026-01-01T00:00:00",
                                "2026-01-01T00:00:01", "2026-01-01T00:00:06", "debug", "llmtrain:" + fp, "None"])
    sacct = ["/usr/bin/sacct", "-X", "--noheader", "--parsable2", "--delimiter=" + slurm.FIELD_SEP,
             "--format=" + ",".join(slurm.SACCT_FIELDS)]
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (sacct + ["--user=alice", "--name=train", "--starttime=now-30days"], (0, row + "\n", "")),
    ], bins=("sbatch", "scontrol", "squeue", "sacct"))
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert not result["changed"] and result["job_id"] == "9" and result["state"] == "COMPLETED"
