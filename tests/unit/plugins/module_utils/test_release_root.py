"""release_root: what a Slurm release's root records, when it is built again, which mounts a
cluster's view of it needs and in which order, and /proc/self/mountinfo read back."""

import json

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import release_root


def test_the_series_of_debian_package_versions():
    assert release_root.series("24.11.5-4+deb13u1") == "24.11"
    assert release_root.series("26.05.5-1") == "26.05"
    assert release_root.series("22.05.8-4+deb12u3") == "22.05"
    assert release_root.series("24.5.1") == "24.05"  # as Slurm numbers its months
    assert release_root.series("") is None and release_root.series("unknown") is None and release_root.series(None) is None
    assert release_root.series("\u0662\u0664.\u0661\u0661.5-4") is None  # Arabic-Indic digits are no series


@pytest.mark.parametrize("release", ["./../victim", "../24.11", "24.11/..", "24.11/../../x", "/24.11", "24", "24.11.5",
                                     "24.11\n", " 24.11", "\u0662\u0664.\u0661\u0661", "\uff12\uff14.\uff11\uff11",
                                     "24.1\u00b2", "", None])
def test_a_release_is_digits_a_dot_and_digits_and_nothing_else(release):
    """A release names its root's directory in the cache, which is removed and built again."""
    assert release_root.release_error(release) == (
        "release=%s must be a Slurm release: digits 0-9, a dot and digits 0-9, such as 24.11 (it names the "
        "release's root in the cache)" % str(release).replace("\n", " "))


def test_slurm_releases_are_releases():
    assert [release_root.release_error(r) for r in ("24.11", "26.05", "9.1")] == [None, None, None]


def test_a_root_is_kept_unless_missing_built_from_other_inputs_or_too_old():
    wanted = release_root.inputs("24.11", "trixie", "http://deb.debian.org/debian", ["slurmd", "slurmctld", "slurmd"])
    assert wanted["packages"] == ["slurmctld", "slurmd"] and wanted["format"] == release_root.FORMAT
    record = dict(inputs=wanted, built=1000.0)
    assert release_root.stale(record, wanted, 1000.0 + 6 * 86400, 7) is None
    assert release_root.stale(record, wanted, 1000.0 + 8 * 86400, 7) == "it is older than 7 days"
    assert release_root.stale(record, wanted, 1000.0 + 800 * 86400, 0) is None  # 0 keeps it
    assert release_root.stale(None, wanted, 0, 7) == "there is none"
    other = release_root.inputs("24.11", "trixie", "http://deb.debian.org/debian", ["slurmd"])
    assert release_root.stale(record, other, 1000.0, 7) == "it was built from other inputs"
    assert release_root.stale(dict(inputs=wanted), wanted, 1000.0, 7) == "its record has no build time"


def test_the_marker_is_read_bounded_and_anything_unreadable_is_no_record(tmp_path):
    assert release_root.read_marker(str(tmp_path)) is None
    marker = tmp_path / release_root.MARKER
    marker.write_text(json.dumps(dict(slurm_version="24.11.5", built=1.0)))
    assert release_root.read_marker(str(tmp_path))["slurm_version"] == "24.11.5"
    for text in ("[1, 2]", "{", "x" * (release_root.MARKER_MAX_BYTES + 1)):
        marker.write_text(text)
        assert release_root.read_marker(str(tmp_path)) is None


MOUNTINFO = """\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
600 22 0:77 / /var/lib/lc/root rw,relatime - overlay overlay rw,lowerdir=/var/cache/x/24.11
601 600 0:5 / /var/lib/lc/root/proc rw - proc proc rw
602 600 0:6 / /var/lib/lc/root/dev rw - devtmpfs udev rw
603 602 0:7 / /var/lib/lc/root/dev/pts rw - devpts devpts rw
604 600 253:1 /var/tmp/my\\040work /var/lib/lc/root/var/tmp/my\\040work rw - ext4 /dev/vda rw
605 22 0:9 / /var/lib/lc/rootless rw - tmpfs tmpfs rw
"""


def test_mount_points_are_read_with_their_escapes_and_unmounted_deepest_first():
    points = release_root.mount_points(MOUNTINFO)
    assert "/var/lib/lc/root/var/tmp/my work" in points and points[0] == "/"
    inside = release_root.under(points, "/var/lib/lc/root")
    assert inside[-1] == "/var/lib/lc/root" and "/var/lib/lc/rootless" not in inside
    assert inside.index("/var/lib/lc/root/dev/pts") < inside.index("/var/lib/lc/root/dev")
    assert set(inside) == {"/var/lib/lc/root", "/var/lib/lc/root/proc", "/var/lib/lc/root/dev",
                           "/var/lib/lc/root/dev/pts", "/var/lib/lc/root/var/tmp/my work"}
    assert release_root.under(points, "/nothing") == []


def test_what_a_root_mounts_each_at_its_own_path_a_directory_before_those_below_it():
    mounts = release_root.binds("/lc/root", "/lc", ["/ws/run", "/ws", "/lc", "/venv/"], ["/py", "/venv"])
    assert mounts[:5] == [("proc", "proc", "/lc/root/proc", False), ("rbind", "/dev", "/lc/root/dev", False),
                          ("rbind", "/sys", "/lc/root/sys", False), ("bind", "/etc/hosts", "/lc/root/etc/hosts", False),
                          ("bind", "/lc", "/lc/root/lc", False)]
    # the cluster's directory once; a path both shared and read-only is writable
    assert mounts[5:] == [("bind", "/py", "/lc/root/py", True), ("bind", "/venv", "/lc/root/venv", False),
                          ("bind", "/ws", "/lc/root/ws", False), ("bind", "/ws/run", "/lc/root/ws/run", False)]
    assert all(target.startswith("/lc/root/") for _kind, _source, target, _ro in mounts)
