"""local_cluster_up: the local cluster counts as up only when the record of its last bring-up holds
this stamp, its daemons run from their pid files, its namespaces exist, its link points at it and
sinfo shows every node up. Real processes stand in for the daemons; sinfo's answers are recorded."""

import json
import shutil
import subprocess

import pytest

from ansible_collections.llmtrain.slurm.plugins.modules import local_cluster_up
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, run

SINFO = ["sinfo", "--noheader", "--Node", "--partition", "debug", "--format", "%N %T"]
NODES = ["n0", "n1"]


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """Two 'slurmd' and a 'slurmctld' (sleep processes under those names), their pid files, the
    namespaces, the record of the bring-up."""
    procs = []

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def daemon(name):
        program = bin_dir / name
        if not program.exists():
            program.symlink_to(shutil.which("sleep"))
        proc = subprocess.Popen([str(program), "60"])
        procs.append(proc)
        pidfile = tmp_path / ("%s-%d.pid" % (name, len(procs)))
        pidfile.write_text("%d\n" % proc.pid)
        return str(pidfile)

    netns = tmp_path / "netns"
    netns.mkdir()
    monkeypatch.setattr(local_cluster_up, "NETNS_DIR", str(netns))
    nodes = []
    for name in NODES:
        (netns / ("ns-" + name)).write_text("")
        nodes.append({"name": name, "namespace": "ns-" + name, "pidfile": daemon("slurmd")})
    (tmp_path / "up.json").write_text(json.dumps({"stamp": "abc"}))
    args = dict(stamp_file=str(tmp_path / "up.json"), stamp="abc", nodes=nodes, partition="debug",
                daemons=[{"pidfile": daemon("slurmctld"), "process_name": "slurmctld"}],
                environment={"SLURM_CONF": "/x/slurm.conf"})
    yield args, procs, tmp_path
    for proc in procs:
        proc.kill()
        proc.wait()


def check(monkeypatch, capsys, args, answer=None):
    slurm = Slurm(monkeypatch, [(SINFO, answer)] if answer else [])
    result = run(local_cluster_up.main, args, capsys)
    slurm.done()
    return result


def test_a_cluster_up_as_recorded_is_up(cluster, monkeypatch, capsys):
    args, _procs, _tmp = cluster
    result = check(monkeypatch, capsys, args, (0, "n0 idle\nn1 mixed\n", ""))
    assert result["up"] is True and result["why"] == "" and result["changed"] is False


def test_other_settings_than_the_record_are_not_up(cluster, monkeypatch, capsys):
    args, _procs, tmp = cluster
    assert "other settings" in check(monkeypatch, capsys, dict(args, stamp="def"))["why"]
    (tmp / "up.json").unlink()
    assert check(monkeypatch, capsys, args)["up"] is False


def test_a_dead_slurmd_or_a_missing_namespace_is_named(cluster, monkeypatch, capsys):
    args, procs, tmp = cluster
    (tmp / "netns" / "ns-n1").unlink()
    assert check(monkeypatch, capsys, args)["why"] == "network namespace ns-n1 is missing"
    procs[1].kill()
    procs[1].wait()
    assert check(monkeypatch, capsys, args)["why"].startswith("the slurmd of n1 ")


def test_a_pid_file_naming_another_program_is_not_its_daemon(cluster, monkeypatch, capsys):
    args, procs, _tmp = cluster
    # the controller's pid file names a slurmd's pid: not a running slurmctld
    with open(args["daemons"][0]["pidfile"], "w") as handle:
        handle.write("%d\n" % procs[0].pid)
    assert check(monkeypatch, capsys, args)["why"].startswith("slurmctld ")


def test_a_node_drained_down_or_not_responding_is_not_up(cluster, monkeypatch, capsys):
    args, _procs, _tmp = cluster
    for state in ("drained", "down", "idle*"):
        result = check(monkeypatch, capsys, args, (0, "n0 idle\nn1 %s\n" % state, ""))
        assert result["why"] == "node(s) not up: n1", state


def test_the_link_must_point_at_the_cluster_unless_the_site_has_a_file_there(cluster, monkeypatch, capsys):
    args, _procs, tmp = cluster
    link = tmp / "slurm.conf"
    link.symlink_to("/elsewhere/slurm.conf")
    result = check(monkeypatch, capsys, dict(args, link={"path": str(link), "target": "/x/slurm.conf"}))
    assert result["why"] == "%s does not point at /x/slurm.conf" % link
    link.unlink()
    link.write_text("the site's own\n")
    result = check(monkeypatch, capsys, dict(args, link={"path": str(link), "target": "/x/slurm.conf"}),
                   (0, "n0 idle\nn1 idle\n", ""))
    assert result["up"] is True
