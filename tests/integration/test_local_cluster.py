"""The local cluster is a real Slurm cluster: what `make cluster` promises, checked the
way a user would check it, on this stream's cluster (cluster.py). The tests that give the
cluster the /etc/slurm link ask for it (LINK): the link is one per machine, and only stream 0's
cluster takes it, so these tests run on stream 0 (conftest.py, STREAM_0_ONLY); other streams
reach their clusters through SLURM_CONF."""

import os
import re
import subprocess
import time

import pytest

from cluster import (BRIDGE, CLUSTER_DIR, NETNS_PREFIX, NODES, RELEASE, SLURM_CONF, SUBNET, controller_running, node,
                     run_playbook, slurm, wait_for)

LINK = ("-e", "local_cluster_link_system_config=true")


def node_states():
    out = slurm("sinfo", "--noheader", "--Node", "--format", "%N %T %G")
    return {line.split()[0]: line.split()[1:] for line in out.splitlines()}


def pid_of(name):
    with open(os.path.join(CLUSTER_DIR, name)) as handle:
        return int(handle.read())


@pytest.mark.releases(system=True)
def test_three_idle_nodes(local_cluster):
    assert node_states() == {name: ["idle", "(null)"] for name in NODES}


def test_plain_sinfo_finds_the_cluster_through_etc_slurm(local_cluster):
    run_playbook("local_cluster.yml", *LINK)  # stream 0's default, said
    assert os.readlink("/etc/slurm/slurm.conf") == SLURM_CONF
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    out = subprocess.run(["sinfo", "--noheader", "--format", "%D %T %N"], env=env, check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    assert out.split() == ["3", "idle", "%s[0-2]" % node("")]


@pytest.mark.releases(system=True)
def test_srun_runs_on_three_distinct_hosts_with_their_own_addresses(local_cluster):
    names = slurm("srun", "-N3", "hostname").split()
    assert sorted(names) == NODES
    addresses = slurm("srun", "-N3", "--label", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
    found = sorted(set(re.findall(r"inet (%s\.\d+)/24" % re.escape(SUBNET), addresses)))
    assert found == [SUBNET + ".10", SUBNET + ".11", SUBNET + ".12"]


@pytest.mark.releases(system=True)
def test_each_node_runs_in_its_own_network_namespace(local_cluster):
    out = slurm("srun", "-N3", "--label", "readlink", "/proc/self/ns/net")
    namespaces = set(line.split(":", 1)[1].strip() for line in out.splitlines())
    assert len(namespaces) == 3
    assert os.readlink("/proc/self/ns/net") not in namespaces


@pytest.mark.releases(system=True)
def test_a_shell_that_sources_env_sh_uses_the_clusters_release_and_each_node_sees_its_own_interfaces(local_cluster):
    # the tests before this one ran steps on every node, which stay COMPLETING a moment after
    # (seen in CI: "3 completing"): the shell below is to find them idle
    wait_for(lambda: "3 idle" in slurm("sinfo", "--noheader", "--format", "%D %T"), 60, "the 3 nodes to be idle")
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    out = subprocess.run(["sh", "-c", '. "$1/env.sh" && cd / && scontrol --version && sinfo --noheader --format "%D %T" '
                          '&& srun -N3 --label cat /sys/class/net/eth0/address', "sh", CLUSTER_DIR], env=env, check=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True).stdout
    version = re.match(r"slurm(?:-wlm)? (\d+\.\d+)\.\d+\n", out)
    assert version and (version.group(1) == RELEASE or RELEASE == "system" and version.group(1) == "22.05"), out
    assert "\n3 idle\n" in out, out
    addresses = dict(line.split(": ", 1) for line in out.splitlines()[2:])
    assert sorted(addresses) == ["0", "1", "2"], out
    # a release's nodes each see their own eth0 in /sys, a sysfs of their own namespace; this
    # machine's slurmds share the machine's /sys (22.05's slurmd did not start with a /sys of its own)
    assert len(set(addresses.values())) == (1 if RELEASE == "system" else 3), out


@pytest.mark.releases(system=True)
def test_second_run_changes_nothing(local_cluster):
    daemons = [pid_of("run/slurmctld.pid"), pid_of("munge/munged.pid")]
    result = run_playbook("local_cluster.yml")
    assert result.changed == 0, result.output[-3000:]
    assert [pid_of("run/slurmctld.pid"), pid_of("munge/munged.pid")] == daemons


def test_gres_change_restarts_slurm_only_and_registers_placeholder_gpus(local_cluster):
    munged = pid_of("munge/munged.pid")
    slurmctld = pid_of("run/slurmctld.pid")
    try:
        run_playbook("local_cluster.yml", "-e", "local_cluster_gres_gpus=2")
        assert node_states() == {name: ["idle", "gpu:2"] for name in NODES}
        assert pid_of("munge/munged.pid") == munged
        assert pid_of("run/slurmctld.pid") != slurmctld
        # Slurm schedules the placeholders, but no job sees a GPU device.
        out = slurm("srun", "-N1", "--gres=gpu:2", "sh", "-c", "echo CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}; ls /dev/nvidia0 2>&1 || true")
        assert "No such file" in out
    finally:
        run_playbook("local_cluster.yml")
    assert node_states() == {name: ["idle", "(null)"] for name in NODES}


def test_node_count_change_adds_and_removes_nodes(local_cluster):
    try:
        run_playbook("local_cluster.yml", "-e", "local_cluster_nodes=4")
        assert sorted(node_states()) == NODES + [node(3)]
        assert sorted(slurm("srun", "-N4", "hostname").split()) == NODES + [node(3)]
    finally:
        run_playbook("local_cluster.yml")
    assert sorted(node_states()) == NODES
    assert NETNS_PREFIX + node(3) not in subprocess.check_output(["ip", "netns", "list"], universal_newlines=True)
    assert not os.path.exists(os.path.join(CLUSTER_DIR, "run", "slurmd-%s.pid" % node(3))) or \
        not os.path.exists("/proc/%d" % pid_of("run/slurmd-%s.pid" % node(3)))


def test_killed_slurmd_is_brought_back(local_cluster):
    pid = pid_of("run/slurmd-%s.pid" % node(1))
    os.kill(pid, 9)
    result = run_playbook("local_cluster.yml")
    assert result.changed >= 1
    assert pid_of("run/slurmd-%s.pid" % node(1)) != pid
    assert sorted(slurm("srun", "-N3", "hostname").split()) == NODES


@pytest.mark.parametrize("variable, value", [
    ("local_cluster_nodes", "0"),
    ("local_cluster_gres_gpus", "-1"),
    ("local_cluster_node_prefix", "Bad_Name;"),
    ("local_cluster_dir", "relative/dir"),
    ("local_cluster_subnet_prefix", "10.300.0"),
    ("local_cluster_bridge", "a-bridge-name-that-is-too-long"),
])
def test_bad_input_is_rejected_naming_the_variable(local_cluster, variable, value):
    result = run_playbook("local_cluster.yml", "-e", "%s=%s" % (variable, value), check=False)
    assert result.rc != 0
    assert "%s=%s" % (variable, value) in result.output
    assert result.changed == 0


def running_identity(pid):
    """(start time, comm) of a live, non-zombie pid, or None; a reused pid has another start time."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            stat = handle.read()
    except (IOError, OSError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else (fields[19], stat[stat.find("(") + 1:stat.rfind(")")])


def test_absent_stops_everything_it_started_and_present_restores(local_cluster):
    pids = [pid_of("munge/munged.pid"), pid_of("run/slurmctld.pid")] + \
        [pid_of("run/slurmd-%s.pid" % n) for n in NODES]
    # A job still running when the cluster goes down must not outlive it: note every process
    # inside the nodes' namespaces while it runs (slurmd, slurmstepd, the job's own).
    job = slurm("sbatch", "--parsable", "--output=/dev/null", "--wrap", "sleep 300", "-N1").strip()
    deadline = time.monotonic() + 60
    while slurm("squeue", "--noheader", "--jobs", job, "--format=%T").strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.5)
    inside = set()
    for name in NODES:
        inside |= set(int(p) for p in subprocess.check_output(
            ["ip", "netns", "pids", NETNS_PREFIX + name], universal_newlines=True).split())
    assert len(inside) > len(NODES)  # more than the slurmds: the job's processes too
    started = {pid: running_identity(pid) for pid in set(pids) | inside}
    run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")
    try:
        for pid, identity in sorted(started.items()):
            assert identity is None or running_identity(pid) != identity, "pid %d %s still runs" % (pid, identity)
        assert not controller_running()
        netns = subprocess.check_output(["ip", "netns", "list"], universal_newlines=True)
        assert not re.search(r"^%s" % re.escape(NETNS_PREFIX), netns, flags=re.M), netns
        links = subprocess.check_output(["ip", "-o", "link", "show"], universal_newlines=True)
        assert ": %s:" % BRIDGE not in links
        with open("/etc/hosts") as handle:
            assert not re.search(r"\s%s\s" % re.escape(node(0)), handle.read())
        # its own link is gone (a link the machine had before the cluster is back)
        assert not (os.path.islink("/etc/slurm/slurm.conf") and os.readlink("/etc/slurm/slurm.conf") == SLURM_CONF)
        again = run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")
        assert again.changed == 0
    finally:
        run_playbook("local_cluster.yml")
    assert node_states() == {name: ["idle", "(null)"] for name in NODES}


def test_absent_touches_only_what_the_role_made(local_cluster, tmp_path):
    """A bridge that was there before the cluster stays (without the cluster's address), and a
    /etc/slurm/slurm.conf link of the machine's own is put back."""
    other_conf = tmp_path / "site-slurm.conf"
    other_conf.write_text("# the site's own configuration\n")
    run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")
    before = os.readlink("/etc/slurm/slurm.conf") if os.path.islink("/etc/slurm/slurm.conf") else None
    try:
        subprocess.run(["ip", "link", "add", "name", BRIDGE, "type", "bridge"], check=True)
        os.makedirs("/etc/slurm", exist_ok=True)
        if before is not None:  # the link the machine had before the cluster
            os.unlink("/etc/slurm/slurm.conf")
        os.symlink(str(other_conf), "/etc/slurm/slurm.conf")
        run_playbook("local_cluster.yml", *LINK)
        assert os.readlink("/etc/slurm/slurm.conf") == SLURM_CONF
        run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")
        links = subprocess.check_output(["ip", "-o", "link", "show"], universal_newlines=True)
        assert ": %s:" % BRIDGE in links  # not the role's to remove
        addresses = subprocess.check_output(["ip", "-o", "addr", "show", "dev", BRIDGE], universal_newlines=True)
        assert SUBNET + ".1/" not in addresses  # but the address it gave the bridge is gone
        assert os.readlink("/etc/slurm/slurm.conf") == str(other_conf)
    finally:
        subprocess.run(["ip", "link", "del", BRIDGE], check=False)
        if os.path.islink("/etc/slurm/slurm.conf") and os.readlink("/etc/slurm/slurm.conf") == str(other_conf):
            os.unlink("/etc/slurm/slurm.conf")
            if before is not None:
                os.symlink(before, "/etc/slurm/slurm.conf")
        run_playbook("local_cluster.yml")
    assert node_states() == {name: ["idle", "(null)"] for name in NODES}
