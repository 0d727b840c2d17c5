"""sbatch with a faked run_command (fake_slurm): each test lists the exact argument vectors
the module must run, and Slurm's recorded answers to them."""

import json
import os
import re

import pytest
from ansible.module_utils import basic

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv, waiter
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP, SACCT_FIELDS
from ansible_collections.llmtrain.slurm.plugins.modules import sbatch
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import (
    SQUEUE, Slurm, fixture, job_text, run, scontrol_job, squeue_rows)

SCRIPT = "#!/bin/bash\necho hello\n"
# what keep_script keeps of it: the job's name as an #SBATCH line after its first line
KEPT = "#!/bin/bash\n%s\n#SBATCH --job-name=train\necho hello\n" % "\n".join(sbatch_argv.kept_script("", "x", None, []).splitlines()[:2])


def fp_of(name="train", content=SCRIPT, options=None, env=None, chdir=None):
    return sbatch_argv.fingerprint(name, content, options or {}, env or {}, chdir)


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


def test_completed_job_is_not_submitted_again(monkeypatch, capsys):
    fp = fp_of()
    rows = squeue_rows(["16", "COMPLETED", "train", "llmtrain:" + fp])
    s = Slurm(monkeypatch, [(SQUEUE, (0, rows, "")), (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), ""))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert not result["changed"] and not result["submitted"] and result["done"] is True
    assert result["state"] == "COMPLETED" and result["exit_code"] == 0


# ---------------------------------------------------------------- done_file

def record(path, **fields):
    path.write_text(json.dumps(dict(dict(fingerprint=fp_of(), name="train", job_id="16", state="COMPLETED",
                                         exit_code=0, end_time="2026-11-29T21:44:47", stdout_path="/o/16.out"),
                                    **fields)))


@pytest.mark.parametrize("check_mode", [False, True])
def test_done_file_of_this_job_asks_slurm_nothing(monkeypatch, capsys, tmp_path, check_mode):
    done_file = tmp_path / "done.json"
    record(done_file)
    s = Slurm(monkeypatch, [], bins=())
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file), wait=True), capsys,
                 check_mode=check_mode)
    s.done()
    assert not result["changed"] and not result["submitted"] and result["done"] is True and result["cmd"] is None
    assert (result["job_id"], result["state"], result["exit_code"]) == ("16", "COMPLETED", 0)
    assert result["stdout_path"] == "/o/16.out" and result["fingerprint"] == fp_of()


def test_active_job_is_re_attached_and_not_recorded(monkeypatch, capsys, tmp_path):
    fp = fp_of()
    done_file = tmp_path / "done.json"
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["21", "PENDING", "train", "llmtrain:" + fp]), "")),
        (scontrol_job(21), (0, fixture("scontrol_job_pending.txt"), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys)
    s.done()
    assert not result["changed"] and result["job_id"] == "21" and result["done"] is False
    assert not done_file.exists()


def test_completed_job_known_to_slurm_is_recorded(monkeypatch, capsys, tmp_path):
    fp = fp_of()
    done_file = tmp_path / "done.json"
    record(done_file, state="PENDING", exit_code=None, end_time=None)  # written when it was submitted
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "COMPLETED", "train", "llmtrain:" + fp]), "")),
        (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys)
    s.done()
    assert not result["changed"] and not result["submitted"] and result["done"] is True
    assert json.loads(done_file.read_text()) == dict(
        fingerprint=fp, name="train", job_id="16", state="COMPLETED", exit_code=0,
        end_time="2026-11-29T21:44:31", stdout_path=result["stdout_path"])
    assert done_file.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["done.json"]  # no temporary file left

    # the next call returns from the record
    s = Slurm(monkeypatch, [], bins=())
    assert run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys)["done"]
    s.done()


def test_completed_job_in_check_mode_writes_no_record(monkeypatch, capsys, tmp_path):
    fp = fp_of()
    done_file = tmp_path / "done.json"
    record(done_file, state="PENDING", exit_code=None, end_time=None)
    before = done_file.read_text()
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "COMPLETED", "train", "llmtrain:" + fp]), "")),
        (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys, check_mode=True)
    s.done()
    assert result["done"] is True and done_file.read_text() == before


def test_waited_job_that_completes_is_recorded(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(waiter.time, "sleep", lambda s: None)
    done_file = tmp_path / "done.json"
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("running", 16), "")),
        (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file), wait=True), capsys)
    s.done()
    assert result["changed"] and result["submitted"] and result["done"] is True
    saved = json.loads(done_file.read_text())
    assert (saved["fingerprint"], saved["job_id"], saved["state"], saved["exit_code"]) == (fp_of(), "16", "COMPLETED", 0)


def test_submitted_job_without_wait_is_not_done(monkeypatch, capsys, tmp_path):
    done_file = tmp_path / "done.json"
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("running", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys)
    s.done()
    assert result["submitted"] and result["done"] is False
    # the record names the job just submitted, not yet done
    assert json.loads(done_file.read_text())["job_id"] == "16" and json.loads(done_file.read_text())["state"] == "RUNNING"


def test_removing_done_file_runs_the_job_again_though_slurm_knows_it_completed(monkeypatch, capsys, tmp_path):
    fp = fp_of()
    done_file = tmp_path / "done.json"
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "COMPLETED", "train", "llmtrain:" + fp]), "")),
        (submit_argv(), (0, "17\n", "")),
        (scontrol_job(17), (0, job_text("running", 17), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys)
    s.done()
    assert result["submitted"] and result["job_id"] == "17" and result["done"] is False


@pytest.mark.parametrize("content, warning", [
    (None, None),  # a record of another job
    ("{not json", "holds no readable record"),
    ("[1, 2]", "holds no record (a JSON object)"),
])
def test_other_or_unreadable_record_means_not_done(monkeypatch, capsys, tmp_path, content, warning):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, msg: warned.append(msg))
    done_file = tmp_path / "done.json"
    if content is None:
        record(done_file, fingerprint="0000000000000000")
    else:
        done_file.write_text(content)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "30\n", "")),
        (scontrol_job(30), (0, job_text("pending", 30), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file)), capsys)
    s.done()
    assert result["submitted"] and result["done"] is False
    if warning:
        assert len(warned) == 1 and warning in warned[0] and str(done_file) in warned[0]
    else:
        assert warned == []


# ---------------------------------------------------------------- keep_script

def active(fp):
    """Slurm's answers for a pending job of this fingerprint, which the task re-attaches to."""
    return [(SQUEUE, (0, squeue_rows(["21", "PENDING", "train", "llmtrain:" + fp]), "")),
            (scontrol_job(21), (0, fixture("scontrol_job_pending.txt"), ""))]


def kept(path):
    info = os.lstat(str(path))
    return path.read_text(), info.st_mode & 0o7777, info.st_ino, info.st_mtime_ns


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_keep_script_writes_the_submitted_text_with_mode_0755(monkeypatch, capsys, tmp_path, umask):
    script = tmp_path / "pretrain.sbatch"
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("pending", 16), "")),
    ])
    old = os.umask(umask)
    try:
        result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys)
    finally:
        os.umask(old)
    s.done()
    assert result["changed"] and result["submitted"] and result["script_kept"] == str(script)
    assert s.kwargs[1]["data"] == SCRIPT and script.read_text() == KEPT
    assert script.stat().st_mode & 0o7777 == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["pretrain.sbatch"]  # no temporary file left


def test_keep_script_holding_the_text_is_not_rewritten(monkeypatch, capsys, tmp_path):
    """A no-op rerun: the job is re-attached to and the kept file is left as it is (changed=false)."""
    script = tmp_path / "pretrain.sbatch"
    script.write_text(KEPT)
    script.chmod(0o755)
    before = kept(script)
    s = Slurm(monkeypatch, active(fp_of()))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys)
    s.done()
    assert not result["changed"] and not result["submitted"] and result["job_id"] == "21"
    assert result["script_kept"] == str(script) and kept(script) == before


@pytest.mark.parametrize("text, mode", [("#!/bin/bash\necho older\n", 0o755), (KEPT, 0o644), (KEPT, 0o775)])
def test_keep_script_of_the_job_re_attached_to_is_written(monkeypatch, capsys, tmp_path, text, mode):
    """The job's identity holds its script, so the job re-attached to runs this text."""
    script = tmp_path / "pretrain.sbatch"
    script.write_text(text)
    script.chmod(mode)
    s = Slurm(monkeypatch, active(fp_of()))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys)
    s.done()
    assert result["changed"] and not result["submitted"] and result["job_id"] == "21" and result["cmd"] is None
    assert kept(script)[:2] == (KEPT, 0o755)


def test_keep_script_is_written_when_missing_on_re_attach(monkeypatch, capsys, tmp_path):
    script = tmp_path / "pretrain.sbatch"
    s = Slurm(monkeypatch, active(fp_of()))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys)
    s.done()
    assert result["changed"] and not result["submitted"] and kept(script)[:2] == (KEPT, 0o755)


def test_keep_script_of_a_job_done_by_its_record(monkeypatch, capsys, tmp_path):
    done_file, script = tmp_path / "done.json", tmp_path / "pretrain.sbatch"
    record(done_file)
    s = Slurm(monkeypatch, [], bins=())
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file), keep_script=str(script)),
                 capsys)
    s.done()
    assert result["done"] and result["changed"] and kept(script)[:2] == (KEPT, 0o755)
    before = kept(script)
    result = run(sbatch.main, dict(name="train", content=SCRIPT, done_file=str(done_file), keep_script=str(script)),
                 capsys)
    assert result["done"] and not result["changed"] and kept(script) == before


@pytest.mark.parametrize("reattach", [False, True])
def test_keep_script_in_check_mode_writes_nothing(monkeypatch, capsys, tmp_path, reattach):
    script = tmp_path / "scripts" / "pretrain.sbatch"  # check mode: its directory is not made yet
    s = Slurm(monkeypatch, active(fp_of()) if reattach else [(SQUEUE, (0, "", ""))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys, check_mode=True)
    s.done()
    assert result["changed"] and result["submitted"] is not reattach and result["script_kept"] == str(script)
    assert list(tmp_path.iterdir()) == []


def test_keep_script_replaces_a_link_without_following_it(monkeypatch, capsys, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    script = tmp_path / "pretrain.sbatch"
    script.symlink_to(target)
    s = Slurm(monkeypatch, active(fp_of()))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys)
    s.done()
    assert result["changed"] and not script.is_symlink() and kept(script)[:2] == (KEPT, 0o755)
    assert target.read_text() == "untouched\n"


def test_keep_script_that_cannot_be_written_fails_before_the_job_is_submitted(monkeypatch, capsys, tmp_path):
    script = tmp_path / "missing" / "pretrain.sbatch"
    s = Slurm(monkeypatch, [])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, keep_script=str(script)), capsys)
    s.done()
    assert result["failed"] and result["msg"].startswith("cannot write keep_script %s: " % script)
    assert not result["submitted"]


def test_keep_script_of_a_script_file(monkeypatch, capsys, tmp_path):
    source, script = tmp_path / "job.sh", tmp_path / "kept.sbatch"
    source.write_bytes(b"#!/bin/bash\necho \xff\n")  # not UTF-8: kept byte for byte
    fp = sbatch_argv.fingerprint("train", b"#!/bin/bash\necho \xff\n".decode("utf-8", "surrogateescape"), {}, {}, None)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(fp=fp, script=str(source)), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("pending", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", script=str(source), keep_script=str(script)), capsys)
    s.done()
    assert result["changed"] and script.read_bytes() == KEPT.replace("echo hello", "echo \udcff").encode(
        "utf-8", "surrogateescape")


def test_check_mode_submits_nothing(monkeypatch, capsys):
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", ""))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys, check_mode=True)
    s.done()
    assert result["changed"] and result["job_id"] is None and result["cmd"] == submit_argv()
    assert result["submitted"] and result["done"] is False


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
    assert s.kwargs[1]["environ_update"] == dict(env, SLURM_UMASK="0022") and s.kwargs[1]["data"] is None


@pytest.mark.parametrize("login_umask, job_umask", [(0o002, "0022"), (0o022, "0022"), (0o077, "0077"), (0o007, "0027")])
def test_the_job_gets_the_login_umask_less_group_and_other_write(monkeypatch, capsys, login_umask, job_umask):
    """Slurm gives the job the umask of sbatch (SLURM_UMASK): under a login shell's 002 what the job
    makes in the run directory would be group-writable, and the next run would refuse it."""
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "31\n", "")),
        (scontrol_job(31), (0, job_text("running", 31), "")),
    ])
    old = os.umask(login_umask)
    try:
        run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    finally:
        os.umask(old)
    s.done()
    assert s.kwargs[1]["environ_update"] == {"SLURM_UMASK": job_umask}


def test_short_env_values_are_not_masked_in_the_result(monkeypatch, capsys):
    # env is not no_log: masking "1" would turn job 31 into "3********"
    env = {"PYTHONUNBUFFERED": "1"}
    fp = fp_of(env=env)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(fp=fp, extra=["--export=ALL"]), (0, "31\n", "")),
        (scontrol_job(31), (0, job_text("running", 31), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, env=env), capsys)
    s.done()
    assert result["job_id"] == "31"


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
    monkeypatch.setattr(waiter.time, "sleep", lambda s: None)
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
    monkeypatch.setattr(waiter.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(waiter.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
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
    monkeypatch.setattr(waiter.time, "sleep", lambda s: None)
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
    row = FIELD_SEP.join(["9", "train", "COMPLETED", "0:0", "00:00:05", "n1", "2026-01-01T00:00:00",
                          "2026-01-01T00:00:01", "2026-01-01T00:00:06", "debug", "llmtrain:" + fp, "None"])
    sacct = ["/usr/bin/sacct", "-X", "--noheader", "--parsable2", "--delimiter=" + FIELD_SEP,
             "--format=" + ",".join(SACCT_FIELDS)]
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (sacct + ["--user=alice", "--name=train", "--starttime=now-30days"], (0, row + "\n", "")),
    ], bins=("sbatch", "scontrol", "squeue", "sacct"))
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert not result["changed"] and result["job_id"] == "9" and result["state"] == "COMPLETED"


# ---------------------------------------------------------------- exclude, bad_nodes_file

SCONTROL = "/usr/bin/scontrol"
SCONTROL_NODES = [SCONTROL, "show", "node", "-o"]
NO_IB = "no network interface ib0 on slurm-worker-1 (it has eth0, lo): set nccl_env_socket_ifname"


def bad_nodes(path, **reasons):
    path.write_text(json.dumps(dict((node.replace("_", "-"), dict(reason=reason, job_id="15", time="2026-11-30T10:00:00Z"))
                                    for node, reason in reasons.items())))
    return str(path)


def held_job(job_id, excluded="(null)", num_nodes=2):
    """The recorded pending job as `scontrol requeuehold` leaves it after its node check."""
    text = job_text("pending", job_id)
    for key, value in (("Reason", "job_requeued_in_held_state"), ("Restarts", 1), ("NumNodes", num_nodes),
                       ("ExcNodeList", excluded)):
        text = re.sub(r"\b%s=\S+" % key, "%s=%s" % (key, value), text)
    return text


def nodes_in(*states):
    """The recorded nodes slurm-worker-0..2 (partition debug) in these states."""
    lines = fixture("scontrol_show_node.txt").splitlines()
    return "".join(line.replace("State=IDLE", "State=" + state) + "\n" for line, state in zip(lines, states))


def when_run(monkeypatch, argv, action):
    """Calls action() right after the faked run_command answers argv (what a job does meanwhile)."""
    answer = basic.AnsibleModule.run_command

    def run_command(module, args, **kwargs):
        result = answer(module, args, **kwargs)
        if args == argv:
            action()
        return result

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)


def test_exclude_and_bad_nodes_file_are_passed_to_sbatch(monkeypatch, capsys, tmp_path):
    path = bad_nodes(tmp_path / "bad_nodes.json", n2="no network interface ib0 on n2", n4="no answer")
    argv = submit_argv(fp=fp_of(options={"nodes": 2}), extra=["--nodes=2", "--exclude=gpu-07,gpu-[10-12],n2,n4"])
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (argv, (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("pending", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, options={"nodes": 2},
                                   exclude=["gpu-07", " gpu-[10-12], n2"], bad_nodes_file=path), capsys)
    s.done()
    assert result["submitted"] and result["cmd"] == argv
    # the job's identity is the same with or without the nodes it keeps off
    assert result["fingerprint"] == fp_of(options={"nodes": 2})


def test_a_missing_bad_nodes_file_excludes_nothing(monkeypatch, capsys, tmp_path):
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("pending", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, bad_nodes_file=str(tmp_path / "none.json")), capsys)
    s.done()
    assert result["cmd"] == submit_argv()


def test_check_mode_shows_the_exclude(monkeypatch, capsys, tmp_path):
    path = bad_nodes(tmp_path / "bad_nodes.json", n3="bad")
    s = Slurm(monkeypatch, [(SQUEUE, (0, "", ""))])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, exclude=["n1"], bad_nodes_file=path), capsys,
                 check_mode=True)
    s.done()
    assert result["cmd"] == submit_argv(extra=["--exclude=n1,n3"])


def test_a_job_that_ran_is_not_run_again_because_exclude_grew(monkeypatch, capsys, tmp_path):
    fp = fp_of()
    path = bad_nodes(tmp_path / "bad_nodes.json", n2="bad")
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "COMPLETED", "train", "llmtrain:" + fp]), "")),
        (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, exclude=["n5"], bad_nodes_file=path), capsys)
    s.done()
    assert not result["changed"] and not result["submitted"] and result["done"] is True
    assert result["fingerprint"] == fp and result["cmd"] is None


@pytest.mark.parametrize("exclude", [["n1;touch x"], ["n1 n2"], ["-n1"], ["$(id)"]])
def test_exclude_items_must_be_node_names(monkeypatch, capsys, exclude):
    s = Slurm(monkeypatch, [])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, exclude=exclude), capsys)
    s.done()  # nothing run
    assert result["failed"] and result["msg"] == (
        "exclude=%r: each item must be a node name or a Slurm hostlist such as gpu-[01-04]" % (exclude,))


def test_a_job_its_node_check_held_is_released_without_the_bad_nodes(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(waiter.time, "sleep", lambda s: None)
    path = tmp_path / "bad_nodes.json"
    bad_nodes(path, slurm_worker_2="no answer")
    argv = submit_argv(extra=["--exclude=slurm-worker-2"])
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (argv, (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("running", 16), "")),
        (scontrol_job(16), (0, held_job(16, excluded="slurm-worker-2", num_nodes=1), "")),
        (SCONTROL_NODES, (0, nodes_in("ALLOCATED", "IDLE", "DOWN"), "")),
        ([SCONTROL, "update", "JobId=16", "ExcNodeList=slurm-worker-1,slurm-worker-2"], (0, "", "")),
        # two seconds past the requeue (the recorded SubmitTime), so that its nodes take the relaunch
        ([SCONTROL, "update", "JobId=16", "StartTime=2026-11-29T21:44:31"], (1, "", "Access/permission denied")),
        ([SCONTROL, "release", "16"], (0, "", "")),
        (scontrol_job(16), (0, job_text("running", 16), "")),
        (scontrol_job(16), (0, fixture("scontrol_job_completed.txt"), "")),
    ])
    # while it runs, its node check finds slurm-worker-1 bad and holds it
    when_run(monkeypatch, scontrol_job(16), lambda: path.exists() and bad_nodes(
        path, slurm_worker_2="no answer", slurm_worker_1=NO_IB))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, wait=True, bad_nodes_file=str(path),
                                   options={}), capsys)
    s.done()
    assert not result.get("failed") and result["done"] is True and result["state"] == "COMPLETED"
    assert result["excluded"] == [dict(
        job_id="16", restarts=1, excluded=["slurm-worker-1", "slurm-worker-2"], bad={"slurm-worker-1": NO_IB},
        message="job 16: node check excluded slurm-worker-1 (%s); requeued without it" % NO_IB)]


def test_a_held_job_without_enough_good_nodes_is_cancelled(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(waiter.time, "sleep", lambda s: None)
    fp = fp_of()
    path = bad_nodes(tmp_path / "bad_nodes.json", slurm_worker_1=NO_IB, slurm_worker_2="no answer")
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "PENDING", "train", "llmtrain:" + fp]), "")),  # re-attached
        (scontrol_job(16), (0, job_text("running", 16), "")),
        (scontrol_job(16), (0, held_job(16), "")),
        (SCONTROL_NODES, (0, nodes_in("IDLE", "IDLE", "IDLE"), "")),
        (["/usr/bin/scancel", "16"], (0, "", "")),
        (scontrol_job(16), (0, job_text("cancelled", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, wait=True, bad_nodes_file=path), capsys)
    s.done()
    assert result["failed"] and result["cancelled"] == ["16"] and result["state"] == "CANCELLED"
    assert result["excluded"] == []
    assert result["msg"].splitlines() == [
        "Job 16 (fx-pending) needs 2 node(s), and partition debug has 1 usable node(s) besides the bad ones "
        "(slurm-worker-0). The job is cancelled; nothing of this run is left queued. Bad nodes:",
        "  slurm-worker-1: " + NO_IB,
        "  slurm-worker-2: no answer",
        "Fix: repair those nodes (or ask the cluster's administrators), then remove them from %s and run the "
        "playbook again; or lower slurm_nodes, or pick another slurm_partition." % path]


def test_without_bad_nodes_file_a_held_job_is_left_alone(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(waiter.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(waiter.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(), (0, "16\n", "")),
        (scontrol_job(16), (0, held_job(16), "")),
        (scontrol_job(16), (0, held_job(16), "")),
        (scontrol_job(16), (0, held_job(16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, wait=True, wait_timeout=1, cancel_on_timeout=False),
                 capsys)
    s.done()  # no scontrol update, release or scancel
    assert result["failed"] and result["msg"] == "job 16 still PENDING after 1s (wait_timeout)"
    assert result["excluded"] == []


def test_an_option_set_to_null_or_false_is_not_given_nor_part_of_the_job(monkeypatch, capsys):
    """Every job of a run lists the site's options (account, QoS, ...); one left unset is the job
    without it - the same argv and the same fingerprint - and one that is set makes another job."""
    fp = fp_of(options={"nodes": 2})
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, "", "")),
        (submit_argv(fp=fp, extra=["--nodes=2"]), (0, "16\n", "")),
        (scontrol_job(16), (0, job_text("pending", 16), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, options={
        "nodes": 2, "account": None, "qos": None, "exclusive": False, "mail-type": None}), capsys)
    s.done()
    assert result["fingerprint"] == fp and result["cmd"] == submit_argv(fp=fp, extra=["--nodes=2"])
    assert fp_of(options={"nodes": 2, "account": "ml-team"}) != fp


# ---------------------------------------------------------------- attach

@pytest.mark.parametrize("check_mode", [False, True])
def test_attach_re_attaches_to_the_runs_active_job_whatever_it_runs(monkeypatch, capsys, tmp_path, check_mode):
    """A rerun with other settings (another fingerprint) never doubles the run's active job: not even a
    done record of this task's job makes it submit or return done, and the kept script stays that job's."""
    done_file, script = tmp_path / "done.json", tmp_path / "pretrain.sbatch"
    record(done_file)
    script.write_text("#!/bin/bash\necho the script job 22 runs\n")
    before = kept(script)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["21", "COMPLETED", "train", "llmtrain:" + fp_of()],
                                 ["22", "RUNNING", "train", "llmtrain:0000000000000000"],
                                 ["23", "PENDING", "other", "llmtrain:" + fp_of()]), "")),
        (scontrol_job(22), (0, job_text("running", 22), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True, done_file=str(done_file),
                                   keep_script=str(script)), capsys, check_mode=check_mode)
    s.done()
    assert result["attached"] and result["job_id"] == "22" and result["state"] == "RUNNING"
    assert not result["changed"] and not result["submitted"] and not result["done"] and result["cmd"] is None
    assert kept(script) == before


def test_attach_to_a_job_of_this_script_keeps_its_script(monkeypatch, capsys, tmp_path):
    script = tmp_path / "pretrain.sbatch"
    s = Slurm(monkeypatch, active(fp_of()))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True, keep_script=str(script)), capsys)
    s.done()
    assert result["attached"] and result["job_id"] == "21" and kept(script)[:2] == (KEPT, 0o755)


def test_attach_with_no_active_job_submits_after_one_squeue(monkeypatch, capsys):
    fp = fp_of()
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["16", "CANCELLED", "train", "llmtrain:0000000000000000"]), "")),
        (submit_argv(fp=fp), (0, "17\n", "")),
        (scontrol_job(17), (0, job_text("pending", 17), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True), capsys)
    s.done()
    assert result["submitted"] and not result["attached"] and result["job_id"] == "17"


def test_a_job_of_this_fingerprint_re_attached_to_says_so(monkeypatch, capsys):
    s = Slurm(monkeypatch, active(fp_of()))
    result = run(sbatch.main, dict(name="train", content=SCRIPT), capsys)
    s.done()
    assert result["attached"] and not result["submitted"]


def test_attach_waits_for_a_controller_that_does_not_answer_up_to_unreachable_timeout(monkeypatch, capsys):
    """A rerun started while the controller restarts re-attaches once it answers, as a watch rides an outage out."""
    monkeypatch.setattr(waiter.time, "sleep", lambda seconds: None)
    down = (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    s = Slurm(monkeypatch, [(SQUEUE, down), (SQUEUE, down)] + active("0000000000000000"))
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True, unreachable_timeout=600), capsys)
    s.done()
    assert result["attached"] and result["job_id"] == "21" and not result["submitted"]
    s = Slurm(monkeypatch, [(SQUEUE, down)])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True), capsys)
    s.done()
    assert result["failed"] and result["controller_unreachable"] and "Run this again" in result["msg"]


def test_after_ok_queues_the_job_behind_those_slurm_knows_and_keeps_its_identity(monkeypatch, capsys):
    """The training job of a run nobody watches goes behind its data and venv jobs at once; the dependency
    is no part of its fingerprint, and a job Slurm forgot (26.05 refuses a dependency on it) is left out."""
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, msg: warned.append(msg))
    fp = fp_of()
    queue = (0, squeue_rows(["30", "RUNNING", "llmtrain-prepare-r", "llmtrain:" + "1" * 16],
                            ["29", "COMPLETED", "llmtrain-venv", "llmtrain:" + "2" * 16]), "")
    s = Slurm(monkeypatch, [
        (SQUEUE, queue),  # once, for the dependencies and for this job
        (submit_argv(fp=fp, extra=["--dependency=afterok:30:29"]), (0, "31\n", "")),
        (scontrol_job(31), (0, job_text("pending", 31), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, after_ok=["30", "29", "7"]), capsys)
    s.done()
    assert result["submitted"] and result["job_id"] == "31" and result["fingerprint"] == fp
    assert warned == ["after_ok: Slurm no longer knows job(s) 7 (ended long ago): this job does not wait for them"]


def test_after_ok_takes_job_ids_only(monkeypatch, capsys):
    Slurm(monkeypatch, [])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, after_ok=["30", "30;rm -rf /"]), capsys)
    assert result["failed"] and result["msg"] == "after_ok=['30', '30;rm -rf /']: each item must be a Slurm job id such as 42"


@pytest.mark.parametrize("release", ["22.05", "26.05"])
@pytest.mark.parametrize("after_ok, dependency", [(["40"], "Dependency=afterok:40"), ([], "Dependency=")])
def test_a_job_re_attached_to_that_a_failed_dependency_holds_is_put_behind_the_new_one(
        monkeypatch, capsys, after_ok, dependency, release):
    """A rerun submitted the failed data job again (or found the data done): the training job Slurm held
    for good (DependencyNeverSatisfied, as each release recorded it says) waits for the new one, or for none."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm", "dependency.json")) as handle:
        never = json.load(handle)["releases"][release]["never_scontrol"]
    job_id = re.match(r"JobId=(\d+) ", never).group(1)
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows([job_id, "PENDING", "train", "llmtrain:" + "3" * 16],
                                 ["40", "PENDING", "llmtrain-prepare-r", "llmtrain:" + "1" * 16]), "")),
        (scontrol_job(job_id), (0, never, "")),
        (["/usr/bin/scontrol", "update", "JobId=" + job_id, dependency], (0, "", "")),
        (scontrol_job(job_id), (0, job_text("pending", job_id), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True, after_ok=after_ok), capsys)
    s.done()
    assert result["attached"] and result["dependency_updated"] and result["changed"] and not result["submitted"]
    assert result["job_id"] == job_id and result["after_ok"] == after_ok


def test_after_records_add_the_jobs_not_yet_recorded_completed(monkeypatch, capsys, tmp_path):
    """The data job's record, written as it was submitted and not waited for (an earlier play), names the
    job the training job goes behind; one that says it completed, a missing one or one naming no job adds none."""
    pending, completed, bad = tmp_path / "prepare.done.json", tmp_path / "venv.json", tmp_path / "bad.json"
    pending.write_text(json.dumps(dict(fingerprint="1" * 16, job_id="30", state="PENDING")))
    completed.write_text(json.dumps(dict(fingerprint="2" * 16, job_id="29", state="COMPLETED")))
    bad.write_text(json.dumps(dict(fingerprint="3" * 16, job_id="$(reboot)", state="PENDING")))
    other_digits = tmp_path / "other.json"  # Arabic-Indic 42: no job id, though str.isdigit() says digits
    other_digits.write_text(json.dumps(dict(fingerprint="4" * 16, job_id="\u0664\u0662", state="PENDING")))
    fp = fp_of()
    s = Slurm(monkeypatch, [
        (SQUEUE, (0, squeue_rows(["30", "PENDING", "llmtrain-prepare-r", "llmtrain:" + "1" * 16]), "")),
        (submit_argv(fp=fp, extra=["--dependency=afterok:30"]), (0, "31\n", "")),
        (scontrol_job(31), (0, job_text("pending", 31), "")),
    ])
    result = run(sbatch.main, dict(name="train", content=SCRIPT, attach=True,
                                   after_records=[str(pending), str(completed), str(bad), str(other_digits),
                                                  str(tmp_path / "none.json")]), capsys)
    s.done()
    assert result["submitted"] and result["after_ok"] == ["30"] and result["fingerprint"] == fp
    assert not result.get("warnings")  # no job of other digits was ever asked about
