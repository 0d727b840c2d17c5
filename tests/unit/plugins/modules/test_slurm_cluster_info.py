"""slurm_cluster_info with a faked run_command (helpers from test_sbatch)."""

from ansible_collections.llmtrain.slurm.plugins.modules import slurm_cluster_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, fixture, run


def test_cluster_info(monkeypatch, capsys):
    s = Slurm(monkeypatch, [
        (["/usr/bin/scontrol", "--version"], (0, fixture("scontrol_version.txt"), "")),
        (["/usr/bin/scontrol", "show", "partition", "-o"], (0, fixture("scontrol_show_partition.txt"), "")),
        (["/usr/bin/scontrol", "show", "node", "-o"], (0, fixture("scontrol_show_node.txt"), "")),
    ])
    result = run(slurm_cluster_info.main, {}, capsys)
    s.done()
    assert result["version"] == "22.05.8" and not result["changed"]
    assert result["partitions"][0]["nodes"] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
    assert [n["state"] for n in result["nodes"]] == ["idle"] * 3
    assert result["ansible_facts"]["slurm_cluster"]["nodes"] == result["nodes"]


def test_cluster_info_without_slurm(monkeypatch, capsys):
    s = Slurm(monkeypatch, [], bins=())
    result = run(slurm_cluster_info.main, {}, capsys)
    s.done()
    assert result["failed"] and "scontrol not found on PATH" in result["msg"]
