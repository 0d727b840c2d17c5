"""bench/cluster_scale_bench.py: its cluster stays apart from the test cluster, and its parsing."""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import cluster_scale_bench  # noqa: E402  pylint: disable=wrong-import-position


def test_the_bench_cluster_shares_no_name_address_or_port_with_the_test_cluster(tmp_path):
    defaults = yaml.safe_load((ROOT / "roles/local_cluster/defaults/main.yml").read_text())
    inv = Path(cluster_scale_bench.inventory(str(tmp_path), 16, tmp_path / "workspace"))
    values = yaml.safe_load((inv / "group_vars" / "all.yml").read_text())
    for name in ("local_cluster_dir", "local_cluster_node_prefix", "local_cluster_subnet_prefix", "local_cluster_bridge",
                 "local_cluster_netns_prefix", "local_cluster_slurmctld_port", "local_cluster_slurmd_port"):
        assert values[name] != defaults[name], name
    # the test cluster's `absent` removes namespaces by prefix: neither prefix may start the other
    assert not values["local_cluster_netns_prefix"].startswith(defaults["local_cluster_netns_prefix"])
    assert not defaults["local_cluster_netns_prefix"].startswith(values["local_cluster_netns_prefix"])
    assert values["local_cluster_link_system_config"] is False and values["local_cluster_enabled"] is False
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    assert sorted(hosts["all"]["children"]["slurm_workers"]["hosts"]) == sorted("scale-%d" % i for i in range(16))
    assert values["slurm_nodes"] == 16 and values["slurm_procs_per_node"] == 1


def test_stage_times_add_up_each_play_and_each_stage_s_role_of_the_playbook():
    lines = [(0.0, "PLAY [Local Slurm cluster] ****"), (1.0, "TASK [x] ****"), (2.0, "PLAY [Pipeline] ****"),
             (2.5, "TASK [llmtrain.slurm.run : Look for the record] ****"),
             (3.0, "TASK [llmtrain.slurm.preflight : Validating arguments] ****"),
             (3.5, "TASK [llmtrain.slurm.run : Check the run's inputs] ****"), (4.0, "TASK [llmtrain.slurm.preflight : y] ****"),
             (6.0, "TASK [llmtrain.slurm.deploy : z] ****"), (9.0, "TASK [llmtrain.slurm.preflight : again] ****")]
    assert cluster_scale_bench.stage_times(lines, 12.0) == {"Local Slurm cluster": 2.0, "Pipeline": 1.0, "Preflight": 6.0,
                                                            "Deploy": 3.0}
