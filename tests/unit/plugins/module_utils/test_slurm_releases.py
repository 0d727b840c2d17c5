"""The parsers against the output of Slurm releases after 22.05 (tests/unit/fixtures/slurm/releases,
provenance in its SOURCES.md): what the modules rely on, per release."""

import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv, slurm_parse

RELEASES_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm", "releases")
RELEASES = ("23.02", "23.11", "24.05", "24.11", "25.05", "26.05")
# Printed by the local cluster's own 24.11 and 26.05 (make test-releases runs the suite there):
# their node names, and the jobs the recording submitted (SOURCES.md)
HERE = {"24.11": "slurm7-worker-", "26.05": "slurm8-worker-"}


def fixture(release, name):
    with open(os.path.join(RELEASES_DIR, release, name), encoding="utf-8") as handle:
        return handle.read()


def has(release, name):
    return os.path.exists(os.path.join(RELEASES_DIR, release, name))


def job(release, name):
    records = slurm_parse.parse_records(fixture(release, "scontrol_show_job_%s.txt" % name), "JobId")
    assert len(records) == 1
    return slurm_parse.job_from_scontrol(records[0])


# What each release's node listing holds: name -> (state, flags, GPUs of each type, untyped GPUs,
# features, partitions, version).
NODES = {
    "23.02": {"mn1": ("allocated", [], {"GTX1660Super": 1}, 0, [], ["normal_master"], "23.02.4")},
    "23.11": {"hgpn01": ("mixed", [], {"H100": 8}, 0, [], ["dev"], "23.11.11")},
    "24.05": {"hpc3-gpu-16-00": ("mixed", [], {"V100": 4}, 0, ["intel", "avx512", "mlx5_ib"],
                                 ["free-gpu", "gpu"], "24.05.3")},
    "24.11": {name: ("idle", ["dynamic_norm"], {"nvidia_h100_80gb_hbm3": 8}, 0, [], ["main", "background"],
                     "24.11.5") for name in ("worker-1", "worker-0")},
    "25.05": {"node4504": ("idle", [], {"l40s": 4}, 0, ["node4504", "rocky8"], ["mit_preemptable"], "25.05.4")},
    "26.05": {"slurm8-worker-%d" % i: ("idle", [], {}, 0, [], ["debug"], "26.05.5") for i in range(3)},
}


@pytest.mark.parametrize("release", RELEASES)
def test_nodes(release):
    nodes = slurm_parse.parse_nodes(fixture(release, "scontrol_show_node.txt"))
    assert [n["name"] for n in nodes] == list(NODES[release])
    for node in nodes:
        state, flags, types, untyped, features, partitions, version = NODES[release][node["name"]]
        assert (node["state"], node["state_flags"]) == (state, flags)
        gpus = node["gres"].get("gpu", dict(types={}, untyped=0, total=0))  # a CPU node registers none
        assert gpus["types"] == types
        assert gpus["untyped"] == untyped
        assert gpus["total"] == sum(types.values()) + untyped
        assert node["features"] == features
        assert node["partitions"] == partitions
        assert node["version"] == version
        assert node["cpus"] and node["memory_mb"]
        assert slurm_parse.usable(node)


def test_node_with_two_gres_kinds():
    """23.02: a GPU and another GRES on one node; only the GPUs count as GPUs."""
    node = slurm_parse.parse_nodes(fixture("23.02", "scontrol_show_node.txt"))[0]
    assert node["gres"]["npu"] == dict(total=4, types={"Ascend910": 4}, untyped=0)
    assert node["gres"]["gpu"]["total"] == 1


def test_node_times_with_spaces():
    """24.11: a site's time format puts spaces in BootTime and the like; the keys after them still parse."""
    rec = slurm_parse.parse_records(fixture("24.11", "scontrol_show_node.txt"), "NodeName")[0]
    assert rec["BootTime"] == "2026-01-14 13:48:23.UTC"
    assert rec["Partitions"] == "main,background"
    assert rec["InstanceId"] == "computeinstance-e00rcsvhgse853pyd2"


PARTITIONS = {
    "23.02": ("normal_master", True, ["mn1"], 1, 5 * 86400),
    "24.05": ("standard", True, None, 159, 14 * 86400),
    "24.11": ("debug", True, ["slurm7-worker-%d" % i for i in range(3)], 3, None),
    "26.05": ("debug", True, ["slurm8-worker-%d" % i for i in range(3)], 3, None),
}


@pytest.mark.parametrize("release", sorted(PARTITIONS))
def test_partitions(release):
    name, default, nodes, total, max_time = PARTITIONS[release]
    part = slurm_parse.parse_partitions(fixture(release, "scontrol_show_partition.txt"))[0]
    assert (part["name"], part["default"], part["state"], part["total_nodes"]) == (name, default, "up", total)
    assert part["time_limit_s"] == max_time
    if nodes is not None:
        assert part["nodes"] == nodes
    else:
        assert len(part["nodes"]) == 32 + 29 + 4
        assert part["nodes"][:2] == ["hpc3-14-00", "hpc3-14-01"]


@pytest.mark.parametrize("release", RELEASES)
def test_running_job(release):
    rec = job(release, "running")
    assert (rec["state"], rec["active"], rec["exit_code"], rec["signal"]) == ("RUNNING", True, 0, 0)
    if release in HERE:
        assert (rec["nodes"], rec["elapsed"]) == ([HERE[release] + "0"], 7)
    else:
        assert rec["nodes"] == (["node156"] if release == "25.05" else ["cn1"])
        assert rec["elapsed"] == (15 * 60 + 41 if release == "25.05" else 3600 + 11 * 60 + 40)
    assert rec["num_nodes"] == 1


@pytest.mark.parametrize("release", RELEASES)
def test_ended_jobs(release):
    failed, timeout = job(release, "failed"), job(release, "timeout")
    assert (failed["state"], failed["active"], failed["success"], failed["exit_code"]) == ("FAILED", False, False, 3)
    assert (timeout["state"], timeout["exit_code"], timeout["signal"]) == ("TIMEOUT", 0, 15)
    if release in HERE:  # sbatch --wrap 'exit 3', and --time=1 --wrap 'sleep 600', output to /dev/null
        assert (failed["nodes"], timeout["nodes"]) == ([HERE[release] + "1"], [HERE[release] + "2"])
        assert timeout["stdout_path"] == "/dev/null" and timeout["elapsed"] >= 60
    else:
        assert failed["nodes"] == ["slurm-worker-1"]
        assert timeout["stdout_path"] == "/tmp/fx/slurm-28.out"


@pytest.mark.parametrize("release", RELEASES)
def test_version(release):
    version = slurm_parse.parse_version(fixture(release, "scontrol_version.txt"))
    assert version.startswith(release + ".")
    nodes = slurm_parse.parse_nodes(fixture(release, "scontrol_show_node.txt"))
    assert version == nodes[0]["version"]


@pytest.mark.parametrize("release", RELEASES)
def test_sbatch_parsable(release):
    job_id = fixture(release, "sbatch_parsable.txt").strip()
    assert sbatch_argv.parse_parsable(fixture(release, "sbatch_parsable.txt")) == job_id
    assert sbatch_argv.parse_parsable(fixture(release, "sbatch_parsable_cluster.txt")) == job_id


def test_every_release_has_the_fixtures():
    for release in RELEASES:
        for name in ("scontrol_show_node.txt", "scontrol_show_job_running.txt", "scontrol_show_job_failed.txt",
                     "scontrol_version.txt", "sbatch_parsable.txt", "sbatch_parsable_cluster.txt"):
            assert has(release, name), (release, name)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", ["running", "failed", "timeout"])
def test_each_releases_jobs_are_job_records_of_their_types(release, name):
    from ansible_collections.llmtrain.slurm.tests.unit.plugins.module_utils.test_slurm_parse import _typed
    assert _typed(job(release, name)) == []
