"""Who could replace the directories a job runs code from: checked on real directories, with
another user (nobody, uid 65534) made the owner where the test needs one."""

import os
import stat

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import trusted_dirs

NOBODY = 65534


@pytest.fixture
def umask_002():
    """The umask of a login shell with user-private groups (RHEL, Ubuntu), restored after."""
    old = os.umask(0o002)
    yield
    os.umask(old)


def mode_of(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def test_a_missing_run_directory_under_a_safe_workspace_is_made_yours_alone_under_umask_002(tmp_path, umask_002):
    run_dir = tmp_path / "ws" / "run"
    problems, own, missing = trusted_dirs.check(str(run_dir), os.geteuid(), "slurm_workspace", ["env", "scripts/trainer"])
    assert problems == [] and own == str(run_dir)
    assert missing == [str(tmp_path / "ws"), str(run_dir), str(run_dir / "env"), str(run_dir / "scripts"),
                       str(run_dir / "scripts/trainer")]
    made, problems = trusted_dirs.make(missing, os.geteuid(), "slurm_workspace", private=[str(run_dir / "env")])
    assert problems == [] and made == missing
    assert [mode_of(p) for p in made] == [0o755, 0o755, 0o700, 0o755, 0o755]
    # what it made, it accepts: a second run is not refused
    assert trusted_dirs.check(str(run_dir), os.geteuid(), "slurm_workspace", ["env", "scripts/trainer"]) \
        == ([], str(run_dir), [])


def test_a_private_umask_is_kept(tmp_path):
    old = os.umask(0o077)
    try:
        made, problems = trusted_dirs.make([str(tmp_path / "ws")], os.geteuid(), "slurm_workspace")
    finally:
        os.umask(old)
    assert problems == [] and mode_of(tmp_path / "ws") == 0o700


@pytest.mark.parametrize("mode, words", [
    (0o777, "is writable by group and others (mode 0777) without the sticky bit"),
    (0o775, "is writable by its group (mode 0775) without the sticky bit"),
    (0o2770, "is writable by its group (mode 2770) without the sticky bit"),
])
def test_a_workspace_others_can_write_without_the_sticky_bit_is_refused_before_anything_is_made(tmp_path, mode, words):
    workspace = tmp_path / "project"
    workspace.mkdir()
    os.chmod(str(workspace), mode)
    problems, _own, missing = trusted_dirs.check(str(workspace / "run"), os.geteuid(), "slurm_workspace", ["env"])
    assert missing == [] and len(problems) == 1
    assert problems[0].startswith("%s %s: anyone who can write there can rename your directory" % (workspace, words))
    assert "Point slurm_workspace at a directory of your own under one that only you or root can write" in problems[0]
    assert "`chmod +t %s`" % workspace in problems[0]


def test_a_sticky_shared_directory_holds_a_workspace_of_your_own(tmp_path):
    shared = tmp_path / "scratch"
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    problems, _own, missing = trusted_dirs.check(str(shared / "me" / "run"), os.geteuid(), "slurm_workspace")
    assert problems == [] and missing == [str(shared / "me"), str(shared / "me" / "run")]


def test_a_parent_owned_by_someone_else_is_refused_even_when_sticky(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(str(theirs), 0o1777)
    os.chown(str(theirs), NOBODY, NOBODY)
    problems, _own, _missing = trusted_dirs.check(str(theirs / "ws" / "run"), os.geteuid(), "slurm_workspace")
    assert problems[0].startswith("%s belongs to nobody (uid 65534), not to you (uid %d) or root: its owner can "
                                  "rename what is in it" % (theirs, os.geteuid()))


def test_links_are_followed_and_a_link_someone_else_owns_is_refused(tmp_path):
    real = tmp_path / "real"
    (real / "ws").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    problems, own, missing = trusted_dirs.check(str(link / "ws" / "run"), os.geteuid(), "slurm_workspace")
    assert problems == [] and own == str(real / "ws" / "run") and missing == [own]
    # the directory it leads to is checked too
    os.chmod(str(real), 0o777)
    problems, _own, _missing = trusted_dirs.check(str(link / "ws" / "run"), os.geteuid(), "slurm_workspace")
    assert problems and problems[0].startswith("%s is writable by group and others" % real)
    os.chmod(str(real), 0o755)
    os.lchown(str(link), NOBODY, NOBODY)
    problems, _own, _missing = trusted_dirs.check(str(link / "ws" / "run"), os.geteuid(), "slurm_workspace")
    assert problems and problems[0].startswith("%s belongs to nobody" % link)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    problems, _own, _missing = trusted_dirs.check(str(dangling / "run"), os.geteuid(), "slurm_workspace")
    assert problems == ["%s is a link to %s, which does not exist: point slurm_workspace at a directory that does"
                        % (dangling, tmp_path / "nowhere")]


def test_the_run_directory_and_below_are_yours_alone(tmp_path):
    run_dir = tmp_path / "ws" / "run"
    (run_dir / "scripts").mkdir(parents=True)
    (run_dir / "env").mkdir()
    (run_dir / "logs").write_text("not a directory")
    os.chmod(str(run_dir / "scripts"), 0o1777)  # sticky does not make it yours alone
    os.chown(str(run_dir / "env"), NOBODY, NOBODY)
    problems, _own, missing = trusted_dirs.check(str(run_dir), os.geteuid(), "run_name",
                                                 ["env", "scripts", "logs", "data"])
    assert missing == [str(run_dir / "data")]
    assert problems[0].startswith("%s belongs to nobody (uid 65534), not to you" % (run_dir / "env"))
    assert problems[1] == ("%s is writable by group and others (mode 1777): anyone who can write there runs code as "
                           "you, with your secrets loaded. Run `chmod go-w %s` if nobody else has written there, or "
                           "remove it." % (run_dir / "scripts", run_dir / "scripts"))
    assert problems[2].startswith("%s is in the way: it exists and is not a directory" % (run_dir / "logs"))


def test_a_directory_someone_else_makes_meanwhile_is_checked_not_trusted(tmp_path):
    planted = tmp_path / "ws"
    planted.mkdir()
    os.chown(str(planted), NOBODY, NOBODY)
    made, problems = trusted_dirs.make([str(planted), str(planted / "run")], os.geteuid(), "slurm_workspace")
    assert made == [] and problems[0].startswith("%s belongs to nobody" % planted)
    assert not (planted / "run").exists()
