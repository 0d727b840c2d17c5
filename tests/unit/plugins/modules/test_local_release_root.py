"""local_release_root: a release's root built once with the commands a user would type
(debootstrap, then apt in the root), kept while nothing it is built from changes, and refused
when the suite has moved to another Slurm series. run_command is faked; the integration tests
build and run the real roots (make test-releases)."""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils import release_root
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
