"""slurm_cluster_info with a faked run_command (helpers from test_sbatch)."""

import json

import pytest
from ansible.module_utils import basic

from ansible_collections.llmtrain.slurm.plugins.modules import slurm_cluster_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, fixture, run

CLUSTER = [
    (["/usr/bin/scontrol", "--version"], (0, fixture("scontrol_version.txt"), "")),
    (["/usr/bin/scontrol", "show", "partition", "-o"], (0, fixture("scontrol_show_partition.txt"), "")),
    (["/usr/bin/scontrol", "show", "node", "-o"], (0, fixture("scontrol_show_node.txt"), "")),
]


def warnings_of(monkeypatch):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, msg: warned.append(msg))
    return warned


BAD_NODES = {"slurm-worker-1": {"reason": "no network interface ib0 on slurm-worker-1 (it has eth0, lo)",
                                "job_id": "42", "time": "2026-11-30T10:00:00Z"}}


def test_cluster_info(monkeypatch, capsys):
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, {}, capsys)
    s.done()
    assert result["version"] == "22.05.8" and not result["changed"]
    assert result["partitions"][0]["nodes"] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
    assert [n["state"] for n in result["nodes"]] == ["idle"] * 3
    assert result["ansible_facts"]["slurm_cluster"]["nodes"] == result["nodes"]
    assert "bad_nodes" not in result


@pytest.mark.parametrize("check_mode", [False, True])
def test_bad_nodes_are_read_and_returned(monkeypatch, capsys, tmp_path, check_mode):
    path = tmp_path / "bad_nodes.json"
    path.write_text(json.dumps(BAD_NODES))
    warned = warnings_of(monkeypatch)
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, dict(bad_nodes=str(path)), capsys, check_mode=check_mode)
    s.done()
    assert result["bad_nodes"] == BAD_NODES and not result["changed"] and warned == []
    assert "bad_nodes" not in result["ansible_facts"]["slurm_cluster"]


def test_a_missing_bad_nodes_file_is_no_bad_nodes(monkeypatch, capsys, tmp_path):
    warned = warnings_of(monkeypatch)
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, dict(bad_nodes=str(tmp_path / "bad_nodes.json")), capsys)
    s.done()
    assert result["bad_nodes"] == {} and warned == [] and not result.get("failed")


def test_invalid_bad_nodes_file_keeps_no_node_off_with_a_warning(monkeypatch, capsys, tmp_path):
    path = tmp_path / "bad_nodes.json"
    path.write_text('{"slurm-worker-1": {"reason": ')  # cut short
    warned = warnings_of(monkeypatch)
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, dict(bad_nodes=str(path)), capsys)
    s.done()
    assert not result.get("failed") and result["bad_nodes"] == {} and len(result["nodes"]) == 3
    [warning] = warned
    assert str(path) in warning and "not valid JSON" in warning and "Fix it" in warning and "delete it" in warning


def test_a_link_as_bad_nodes_file_is_refused_with_a_warning(monkeypatch, capsys, tmp_path):
    target, path = tmp_path / "elsewhere.json", tmp_path / "bad_nodes.json"
    target.write_text(json.dumps(BAD_NODES))
    path.symlink_to(target)
    warned = warnings_of(monkeypatch)
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, dict(bad_nodes=str(path)), capsys)
    s.done()
    assert not result.get("failed") and result["bad_nodes"] == {}
    [warning] = warned
    assert str(path) in warning and "a link, not followed" in warning and "delete it" in warning


def test_cluster_info_without_slurm(monkeypatch, capsys):
    s = Slurm(monkeypatch, [], bins=())
    result = run(slurm_cluster_info.main, {}, capsys)
    s.done()
    assert result["failed"] and "scontrol not found on PATH" in result["msg"]


ASSOC = ["/usr/bin/sacctmgr", "--noheader", "--parsable2", "show", "assoc", "user=alice", "format=account,partition,qos"]


def test_reservations_and_associations_in_the_same_call(monkeypatch, capsys):
    s = Slurm(monkeypatch, CLUSTER + [
        (["/usr/bin/scontrol", "show", "reservation", "-o"], (0, fixture("scontrol_show_reservation.txt"), "")),
        (ASSOC, (0, "ml-team||high,normal\n", ""))], bins=("scontrol", "sacctmgr"))
    result = run(slurm_cluster_info.main, dict(reservations=True, associations=True), capsys)
    s.done()
    assert result["user"] == "alice"
    assert [r["name"] for r in result["reservations"]] == ["llm-week", "later"]
    assert result["associations"] == [dict(account="ml-team", partition=None, qos=["high", "normal"])]
    assert result["associations_note"] is None
    assert "reservations" not in result["ansible_facts"]["slurm_cluster"]


def test_associations_where_the_cluster_keeps_no_accounting_or_has_no_sacctmgr(monkeypatch, capsys):
    s = Slurm(monkeypatch, CLUSTER + [(ASSOC, (1, "", fixture("sacctmgr_no_accounting.txt")))],
              bins=("scontrol", "sacctmgr"))
    result = run(slurm_cluster_info.main, dict(associations=True), capsys)
    s.done()
    assert not result.get("failed") and result["associations"] is None
    assert result["associations_note"] == (
        "this cluster keeps no accounting database (You are not running a supported accounting_storage plugin "
        "Only 'accounting_storage/slurmdbd' is supported.)")
    s = Slurm(monkeypatch, CLUSTER, bins=("scontrol",))
    result = run(slurm_cluster_info.main, dict(associations=True), capsys)
    s.done()
    assert result["associations"] is None and result["associations_note"] == "sacctmgr is not installed here"
    # a slurmdbd that does not answer (sacctmgr 22.05's words, recorded): not refused either, and the note
    # says what sacctmgr said
    s = Slurm(monkeypatch, CLUSTER + [(ASSOC, (1, "", fixture("sacctmgr_slurmdbd_down.txt")))],
              bins=("scontrol", "sacctmgr"))
    result = run(slurm_cluster_info.main, dict(associations=True), capsys)
    s.done()
    assert result["associations"] is None
    assert "failed to open persistent connection to host:localhost:7031: Connection refused" in result["associations_note"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_what_it_finds_is_judged_by_the_run_and_recorded_in_the_same_call(monkeypatch, capsys, tmp_path, check_mode):
    """The preflight role's one call: bad nodes read, the partition judged by the run's variables, and
    preflight.json written where the run fits (not in check mode)."""
    path = tmp_path / "bad_nodes.json"
    path.write_text(json.dumps(BAD_NODES))
    judge = dict(slurm_partition=None, slurm_nodes=2, slurm_gpus_per_node=0, slurm_exclude_nodes=[],
                 run_gpu_policy="strict", record_dir=str(tmp_path))
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, dict(bad_nodes=str(path), judge=judge), capsys, check_mode=check_mode)
    s.done()
    judged = result["judged"]
    assert judged["errors"] == [] and judged["record"]["usable_nodes"] == ["slurm-worker-0", "slurm-worker-2"]
    assert judged["record"]["excluded_nodes"] == {"slurm-worker-1": "no network interface ib0 on slurm-worker-1 (it "
                                                  "has eth0, lo) (node check of job 42, 2026-11-30T10:00:00Z)"}
    assert judged["written"] is not check_mode and (tmp_path / "preflight.json").exists() is not check_mode
    if not check_mode:
        record = json.loads((tmp_path / "preflight.json").read_text())
        assert dict(record, time=None) == dict(judged["record"], time=None) and record["time"].endswith("Z")
    # one node more than the partition has left: refused, naming the variable, and nothing recorded
    (tmp_path / "preflight.json").unlink(missing_ok=True)
    s = Slurm(monkeypatch, CLUSTER)
    result = run(slurm_cluster_info.main, dict(bad_nodes=str(path), judge=dict(judge, slurm_nodes=3)), capsys)
    s.done()
    assert result["judged"]["errors"][0].startswith("slurm_nodes=3 but partition debug has 2 usable node(s)")
    assert not (tmp_path / "preflight.json").exists()
