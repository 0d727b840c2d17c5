"""local_release_root: a release's root built once with the commands a user would type
(debootstrap, then apt in the root), kept while nothing it is built from changes, and refused
when the suite has moved to another Slurm series. run_command is faked; the integration tests
build and run the real roots (make test-releases)."""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import release_root
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable
from ansible_collections.llmtrain.slurm.plugins.modules import local_release_root
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import run


class FakeDebian:
    """debootstrap and apt as run_command sees them: debootstrap makes a directory, dpkg-query
    answers `version`."""

    def __init__(self, version):
        self.version = version
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        if argv[0] == "debootstrap":
            os.makedirs(os.path.join(argv[3], "usr", "sbin"))
        if "dpkg-query" in argv:
            return 0, self.version, ""
        return 0, "", ""


def build(tmp_path, monkeypatch, capsys, version, suite="trixie", release="24.11", **extra):
    fake = FakeDebian(version)
    monkeypatch.setattr(AnsibleModule, "run_command", lambda module, argv, **kwargs: fake(argv, **kwargs))
    scripts = tmp_path / "scripts"
    scripts.mkdir(exist_ok=True)
    (scripts / "trixie").write_text("")  # this machine's debootstrap knows trixie, not forky
    monkeypatch.setattr(local_release_root, "DEBOOTSTRAP_SCRIPTS", str(scripts))
    args = dict(release=release, suite=suite, cache=str(tmp_path / "cache"), state="built",
                packages=["slurmd", "slurm-client"], **extra)
    return run(local_release_root.main, args, capsys), fake.calls


def test_a_root_is_built_once_with_debootstrap_and_apt_and_kept(tmp_path, monkeypatch, capsys):
    result, calls = build(tmp_path, monkeypatch, capsys, "24.11.5-4+deb13u1")
    work = str(tmp_path / "cache" / "24.11.build")
    apt = ["chroot", work, "apt-get", "-q", "-o", "Acquire::Check-Valid-Until=false"]
    assert calls == [["debootstrap", "--variant=minbase", "trixie", work, "http://deb.debian.org/debian"],
                     apt + ["update"], apt + ["install", "-y", "--no-install-recommends", "slurm-client", "slurmd"],
                     ["chroot", work, "dpkg-query", "-W", "-f=${Version}", "slurm-client"],
                     ["chroot", work, "apt-get", "clean"]]
    assert result["changed"] is True and result["built"] == "there is none"
    assert result["slurm_version"] == "24.11.5-4+deb13u1" and result["marker"] == release_root.MARKER
    root = tmp_path / "cache" / "24.11"
    assert not os.path.exists(work) and os.access(str(root / "usr" / "sbin" / "policy-rc.d"), os.X_OK)
    assert "exit 101" in (root / "usr" / "sbin" / "policy-rc.d").read_text()  # no package starts a daemon
    assert json.loads((root / release_root.MARKER).read_text())["inputs"]["suite"] == "trixie"

    again, calls = build(tmp_path, monkeypatch, capsys, "24.11.5-4+deb13u1")
    assert calls == [] and again["changed"] is False and again["built"] is None

    other, calls = build(tmp_path, monkeypatch, capsys, "24.11.6-1", mirror="http://mirror.example/debian")
    assert other["built"] == "it was built from other inputs" and calls[0][-1] == "http://mirror.example/debian"
    assert json.loads((root / release_root.MARKER).read_text())["slurm_version"] == "24.11.6-1"
    assert not os.path.exists(str(root) + ".old")


def test_a_suite_newer_than_this_machines_debootstrap_is_made_with_sids_script(tmp_path, monkeypatch, capsys):
    result, calls = build(tmp_path, monkeypatch, capsys, "26.05.5-1", suite="forky", release="26.05")
    assert result["slurm_version"] == "26.05.5-1"
    assert calls[0][2:] == ["forky", str(tmp_path / "cache" / "26.05.build"), "http://deb.debian.org/debian",
                            str(tmp_path / "scripts" / "sid")]


def test_a_suite_that_moved_to_another_series_is_refused_naming_what_it_has(tmp_path, monkeypatch, capsys):
    result, _calls = build(tmp_path, monkeypatch, capsys, "26.11.1-1", suite="forky", release="26.05")
    assert result["failed"] is True
    assert result["msg"] == ("local_cluster_release 26.05: Debian forky now packages Slurm 26.11.1-1, not 26.05. Set "
                             "local_cluster_release_suites to a suite that packages 26.05, or local_cluster_release "
                             "to 26.11.")
    assert os.listdir(str(tmp_path / "cache")) == [".26.05.lock"]  # no root of the wrong series is kept


def test_a_release_that_is_no_slurm_series_is_refused_before_anything_is_made_or_removed(tmp_path, monkeypatch, capsys):
    """The release names the root's directory in the cache: ./../victim named victim.build beside it,
    which a build removes first."""
    victim = tmp_path / "victim.build"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    for release in ("./../victim", "\u0662\u0664.\u0661\u0661", "24.11/..", "24.11\n"):
        result, calls = build(tmp_path, monkeypatch, capsys, "24.11.5-4+deb13u1", release=release)
        assert result["failed"] is True and calls == []
        assert result["msg"] == ("local_release_root: release=%s must be a Slurm release: digits 0-9, a dot and "
                                 "digits 0-9, such as 24.11 (it names the release's root in the cache)"
                                 % release.replace("\n", " "))
    assert (victim / "keep").read_text() == "mine" and not (tmp_path / "cache").exists()


def test_a_suite_that_is_no_debian_codename_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """The suite is debootstrap's argument (run as root) and names a file of its scripts: an option, a
    path or another script's letters are refused, the option named, before any command or directory."""
    for suite in ("--foreign", "../../../tmp/x", "trixie/..", "Trixie", "tr\u0456xie", "trixie\n", "t", "x" * 32,
                  "trixie\x1b[2J"):
        result, calls = build(tmp_path, monkeypatch, capsys, "24.11.5-4+deb13u1", suite=suite)
        assert result["failed"] is True and calls == [], suite
        assert result["msg"] == ("local_release_root: suite=%s must be a Debian suite or codename: a letter a-z, then "
                                 "1 to 30 of a-z, 0-9 and -, such as trixie" % printable(suite))
        assert "\x1b" not in result["msg"]
    assert not (tmp_path / "cache").exists()
    for suite in ("trixie", "stable", "bookworm-backports", "sid"):
        result, calls = build(tmp_path, monkeypatch, capsys, "24.11.5-4+deb13u1", suite=suite)
        assert "failed" not in result and calls[0][2] == suite, result
