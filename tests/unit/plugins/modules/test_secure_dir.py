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
