"""secure_dir: the run directory checked and made in one module call, as a stage calls it."""

import os
import stat

from ansible_collections.llmtrain.slurm.plugins.modules import secure_dir
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import run

SUBDIRS = ["env", "scripts", "scripts/trainer", "data", "checkpoints", "logs"]


def mode_of(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def test_makes_the_run_directory_under_umask_002_and_accepts_it_again(tmp_path, capsys):
    run_dir = tmp_path / "ws" / "run"
    old = os.umask(0o002)
    try:
        first = run(secure_dir.main, dict(path=str(run_dir), subdirs=SUBDIRS, private=["env"]), capsys)
        again = run(secure_dir.main, dict(path=str(run_dir) + "/", subdirs=SUBDIRS, private=["env"]), capsys)
    finally:
        os.umask(old)
    assert first["changed"] is True and first["created"][:2] == [str(tmp_path / "ws"), str(run_dir)]
    assert mode_of(run_dir) == 0o755 and mode_of(run_dir / "env") == 0o700 and mode_of(run_dir / "scripts/trainer") == 0o755
    assert again["changed"] is False and again["created"] == [] and "failed" not in again


def test_check_mode_says_what_it_would_make_and_makes_nothing(tmp_path, capsys):
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), subdirs=["env"], private=["env"]), capsys,
                 check_mode=True)
    assert result["changed"] is True and result["created"] == [str(tmp_path / "run"), str(tmp_path / "run" / "env")]
    assert not (tmp_path / "run").exists()


def test_an_env_directory_of_an_earlier_release_is_narrowed_to_the_user_alone(tmp_path, capsys):
    (tmp_path / "run" / "env").mkdir(parents=True)
    os.chmod(str(tmp_path / "run" / "env"), 0o755)
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), subdirs=["env"], private=["env"]), capsys)
    assert result["narrowed"] == [str(tmp_path / "run" / "env")] and mode_of(tmp_path / "run" / "env") == 0o700


def test_a_workspace_others_can_write_is_refused_before_anything_is_made_in_it(tmp_path, capsys):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chmod(str(workspace), 0o777)
    result = run(secure_dir.main, dict(path=str(workspace / "run"), subdirs=["env"]), capsys)
    assert result["failed"] is True and result["created"] == []
    assert result["msg"].startswith("%s is writable by group and others (mode 0777) without the sticky bit" % workspace)
    assert os.listdir(str(workspace)) == []
    # only checking, a missing directory is no problem, the workspace still is
    result = run(secure_dir.main, dict(path=str(workspace / "venv"), create=False, variable="slurm_python"), capsys)
    assert result["failed"] is True and "Point slurm_python at" in result["msg"]


def test_names_below_the_directory_must_stay_below_it(tmp_path, capsys):
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), subdirs=["../x"], private=["env"]), capsys)
    assert result["failed"] is True and "'../x' must not contain '..'" in result["msg"]
    assert "'env' is not among subdirs" in result["msg"]


CHECKS = {"scripts/node_check.sh": "#!/bin/sh\necho {{ not a template }}\n", "scripts/node_check.conf": "timeout_s=60\n",
          "README": "the run directory\n"}


def test_puts_the_files_in_the_directories_it_made_under_umask_002_then_only_those_that_differ(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = dict(path=str(run_dir), subdirs=["env", "scripts"], private=["env"], files=CHECKS)
    old = os.umask(0o002)
    try:
        first = run(secure_dir.main, args, capsys)
        assert first["changed"] is True and first["written"] == ["README", "scripts/node_check.conf", "scripts/node_check.sh"]
        assert first["created"] == [str(run_dir), str(run_dir / "env"), str(run_dir / "scripts")]
        for name, text in CHECKS.items():
            assert (run_dir / name).read_text() == text and mode_of(run_dir / name) == 0o644
        assert sorted(os.listdir(str(run_dir / "scripts"))) == ["node_check.conf", "node_check.sh"]  # no temporary file
        # a rerun that finds everything in place changes nothing, and rewrites nothing
        again = run(secure_dir.main, args, capsys)
        assert again["changed"] is False and again["written"] == [] and again["unchanged"] == first["written"]

        (run_dir / "scripts" / "node_check.conf").write_text("timeout_s=1\n")
        os.chmod(str(run_dir / "README"), 0o664)
        third = run(secure_dir.main, args, capsys)
        assert third["changed"] is True and third["written"] == ["README", "scripts/node_check.conf"]
        assert third["created"] == [] and third["unchanged"] == ["scripts/node_check.sh"]
        assert (run_dir / "scripts" / "node_check.conf").read_text() == "timeout_s=60\n"
        assert mode_of(run_dir / "README") == 0o644

        executable = run(secure_dir.main, dict(args, files={"scripts/node_check.sh": CHECKS["scripts/node_check.sh"]},
                                               files_mode="0755"), capsys)
        assert executable["written"] == ["scripts/node_check.sh"] and mode_of(run_dir / "scripts" / "node_check.sh") == 0o755
    finally:
        os.umask(old)


def test_check_mode_says_which_files_it_would_write_and_writes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = dict(path=str(run_dir), subdirs=["scripts"], files=CHECKS)
    result = run(secure_dir.main, args, capsys, check_mode=True)
    assert result["changed"] is True and result["written"] == sorted(CHECKS) and not run_dir.exists()
    run(secure_dir.main, args, capsys)
    (run_dir / "README").write_text("changed by hand\n")
    result = run(secure_dir.main, args, capsys, check_mode=True)
    assert result["changed"] is True and result["written"] == ["README"] and result["created"] == []
    assert (run_dir / "README").read_text() == "changed by hand\n"


def test_no_file_is_written_in_a_refused_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "scripts").mkdir(parents=True)
    os.chmod(str(run_dir / "scripts"), 0o777)  # anyone could put their own node_check.sh there
    result = run(secure_dir.main, dict(path=str(run_dir), subdirs=["scripts"], files=CHECKS), capsys)
    assert result["failed"] is True and result["written"] == [] and str(run_dir / "scripts") in result["msg"]
    assert os.listdir(str(run_dir / "scripts")) == [] and sorted(os.listdir(str(run_dir))) == ["scripts"]


def test_files_go_only_into_the_directories_it_checks(tmp_path, capsys):
    files = {"scripts/x.sh": "", "other/y.sh": "", "../z": "", "scripts": ""}
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), subdirs=["scripts"], files=files), capsys)
    assert result["failed"] is True and result["msg"].startswith("files: each name is a file directly in path or in")
    assert "'other/y.sh' is in other, which is not among subdirs" in result["msg"]
    assert "'../z' must not contain" in result["msg"] and "'scripts' is one of subdirs" in result["msg"]
    assert "scripts/x.sh" not in result["msg"] and not (tmp_path / "run").exists()
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), files={"a": ""}, create=False), capsys)
    assert result["failed"] is True and "files needs create=true" in result["msg"]
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), files={"a": ""}, files_mode="rw-"), capsys)
    assert result["failed"] is True and "files_mode='rw-'" in result["msg"] and not (tmp_path / "run").exists()


def test_only_checking_it_says_what_the_directory_holds(tmp_path, capsys):
    """What deploy's check of the venv's directory reads: missing, or its names."""
    def entries(path):
        result = run(secure_dir.main, dict(path=str(path), create=False, variable="slurm_python"), capsys)
        assert "failed" not in result
        return result["entries"]
    assert entries(tmp_path / "venv") is None
    (tmp_path / "file").write_text("")
    assert secure_dir.entries(str(tmp_path / "file")) is False
    for name in ("pyvenv.cfg", "bin", "lib"):
        (tmp_path / "venv" / name).mkdir(parents=True)
    assert entries(tmp_path / "venv") == ["bin", "lib", "pyvenv.cfg"]


def test_it_says_how_much_room_is_left_where_the_directory_is_or_will_be(tmp_path, capsys):
    found = os.statvfs(str(tmp_path))
    for check_mode in (True, False):
        result = run(secure_dir.main, dict(path=str(tmp_path / "run"), subdirs=["env"]), capsys, check_mode=check_mode)
        # what df counts for the user (blocks free to non-root users), give or take what was written meanwhile
        assert abs(result["free_bytes"] - found.f_bavail * found.f_frsize) < 64 * 1024 * 1024
    assert abs(secure_dir.free_bytes(str(tmp_path / "a" / "b")) - secure_dir.free_bytes(str(tmp_path))) < 64 * 1024 * 1024


def test_the_room_is_measured_once_the_files_are_written(tmp_path, capsys, monkeypatch):
    """The pretrain stage compares it with what its checkpoints need: what the run directory's own files
    take (the checks, the node package, the trainer) is not left to them."""
    monkeypatch.setattr(secure_dir, "free_bytes", lambda path: int(os.path.exists(os.path.join(path, "scripts", "a.sh"))))
    result = run(secure_dir.main, dict(path=str(tmp_path / "run"), subdirs=["scripts"], files={"scripts/a.sh": "x\n"}), capsys)
    assert result["written"] == ["scripts/a.sh"] and result["free_bytes"] == 1
