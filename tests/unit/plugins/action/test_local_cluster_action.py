"""The local cluster's configuration as the local_cluster action makes it (plugins/action/local_cluster.py), from
the role's own defaults: what slurmctld, slurmd and slurmdbd read, and the client commands of a release. The
integration tests bring the cluster up from these files (tests/integration/test_local_cluster.py)."""

import subprocess

from ansible_collections.llmtrain.slurm.plugins.action.local_cluster import client_command, config_files, env_sh, slurmdbd_conf
from ansible_collections.llmtrain.slurm.plugins.filter.local_cluster import local_cluster_nodes
from ansible_collections.llmtrain.slurm.tests.unit.plugins.filter.test_local_cluster import defaults


def conf(v, name, cpus=2):
    nodes = local_cluster_nodes(v["local_cluster_nodes"], v["local_cluster_node_prefix"], v["local_cluster_subnet_prefix"],
                                v["local_cluster_netns_prefix"], v["local_cluster_dir"])
    text = config_files(v, nodes, "login1", cpus)[name]
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_slurm_conf_names_the_controller_each_node_and_the_partition():
    lines = conf(defaults(), "slurm.conf")
    assert "SlurmctldHost=login1(10.213.0.1)" in lines
    assert [line for line in lines if line.startswith("NodeName=")] == [
        "NodeName=slurm-worker-%d NodeAddr=10.213.0.%d NodeHostname=slurm-worker-%d CPUs=2 RealMemory=4096 State=UNKNOWN"
        % (i, 10 + i, i) for i in range(3)]
    assert lines[-1] == "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    assert "AccountingStorageType=accounting_storage/none" in lines and "GresTypes=gpu" not in lines
    assert "SchedulerParameters=sched_interval=2,bf_interval=2" in lines
    keys = [line.split("=", 1)[0] for line in lines if not line.startswith(("NodeName=", "PartitionName="))]
    assert len(keys) == len(set(keys))  # each setting once


def test_gpus_are_registered_and_placeholder_files_named_per_node():
    v = defaults(local_cluster_gres_gpus=4, local_cluster_gres_gpu_type="tiny", local_cluster_nodes=2)
    assert "GresTypes=gpu" in conf(v, "slurm.conf")
    assert conf(v, "slurm.conf")[-2].endswith(" CPUs=2 RealMemory=4096 Gres=gpu:tiny:4 State=UNKNOWN")
    assert conf(v, "gres.conf") == [
        "NodeName=slurm-worker-%d Name=gpu Type=tiny File=/var/lib/llmtrain-local-cluster/gres/slurm-worker-%d/gpu[0-3]" % (i, i)
        for i in range(2)]
    assert conf(defaults(local_cluster_gres_gpus=1), "gres.conf")[0].endswith("/gres/slurm-worker-0/gpu0")
    assert conf(defaults(), "gres.conf") == []


def test_accounting_points_slurmctld_at_slurmdbd_and_slurmdbd_at_a_database_per_release():
    v = defaults(local_cluster_accounting=True, local_cluster_slurmdbd_port=6919)
    lines = conf(v, "slurm.conf")
    assert "AccountingStorageType=accounting_storage/slurmdbd" in lines and "AccountingStoragePort=6919" in lines
    assert "AccountingStorageEnforce=associations,limits,qos" in lines
    assert "StorageLoc=slurm_acct_db" in slurmdbd_conf(v).splitlines()
    assert "StorageLoc=slurm_acct_db_24_11" in slurmdbd_conf(defaults(local_cluster_release="24.11")).splitlines()
    assert "DbdPort=6919" in slurmdbd_conf(v).splitlines()


def test_a_release_disables_the_cgroup_plugin_and_its_commands_run_from_its_root(tmp_path):
    assert conf(defaults(), "cgroup.conf") == []
    assert conf(defaults(local_cluster_release="26.05"), "cgroup.conf") == ["CgroupPlugin=disabled"]
    v = defaults(local_cluster_release="26.05", local_cluster_dir=str(tmp_path))
    script = tmp_path / "sinfo"
    script.write_text(client_command("sinfo", v, str(tmp_path / "root"), ".marker"))
    assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0
    text = script.read_text()
    assert "SLURM_CONF='%s/etc/slurm.conf'" % tmp_path in text
    assert "exec chroot '%s/root' " % tmp_path in text and '/usr/bin/sinfo "$@"' in text


def test_env_sh_sets_the_configuration_and_a_releases_commands_first_on_path(tmp_path):
    v = defaults(local_cluster_release="24.11", local_cluster_dir=str(tmp_path))
    out = subprocess.run(["sh", "-c", '. "$1" && echo "$SLURM_CONF" && echo "$PATH"', "sh", "/dev/stdin"],
                         input=env_sh(v), env={"PATH": "/usr/bin:/bin"}, check=True, stdout=subprocess.PIPE,
                         universal_newlines=True).stdout.split()
    assert out == [str(tmp_path) + "/etc/slurm.conf", str(tmp_path) + "/bin:/usr/bin:/bin"]
    assert "PATH" not in env_sh(defaults())
