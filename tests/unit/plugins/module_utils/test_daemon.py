import os
import shutil
import signal
import subprocess
import sys

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import daemon


def write_stat(proc, pid, comm, state, argv0=None):
    os.makedirs(os.path.join(proc, str(pid)))
    with open(os.path.join(proc, str(pid), "stat"), "w") as handle:
        handle.write("%d (%s) %s 1 1 1 0 -1 4194560 0 0 0\n" % (pid, comm, state))
    with open(os.path.join(proc, str(pid), "cmdline"), "w") as handle:
        handle.write("/usr/sbin/%s\0-D\0" % (argv0 or comm) if state != "Z" else "")


@pytest.fixture
def proc(tmp_path):
    root = str(tmp_path / "proc")
    write_stat(root, 100, "slurmd", "S")
    write_stat(root, 101, "slurmd", "Z")
    write_stat(root, 102, "python3", "R")
    write_stat(root, 103, "a (odd) name", "S")
    return root


def test_read_pidfile(tmp_path):
    good, bad, empty = tmp_path / "good", tmp_path / "bad", tmp_path / "empty"
    good.write_text("4168\n")
    bad.write_text("not a pid")
    empty.write_text("")
    assert daemon.read_pidfile(str(good)) == 4168
    assert daemon.read_pidfile(str(bad)) is None
    assert daemon.read_pidfile(str(empty)) is None
    assert daemon.read_pidfile(str(tmp_path / "missing")) is None
    for text in ("\u0664\u0661\u0666\u0668", "\u00b2"):  # Arabic-Indic 4168 (read as a pid), a superscript 2 (raised)
        bad.write_text(text)
        assert daemon.read_pidfile(str(bad)) is None


def test_alive_needs_a_live_non_zombie_with_the_expected_name(proc):
    assert daemon.is_alive(100, "slurmd", proc)
    assert not daemon.is_alive(101, "slurmd", proc)  # zombie
    assert not daemon.is_alive(102, "slurmd", proc)  # pid reused by another program
    assert not daemon.is_alive(999, "slurmd", proc)  # gone
    assert daemon.is_alive(102, None, proc)
    assert daemon.process_status(103, proc) == ("S", "a (odd) name")


def test_comm_is_truncated_to_15_characters(tmp_path):
    root = str(tmp_path / "proc")
    write_stat(root, 7, "a-very-long-dae", "S", argv0="a-very-long-daemon-name")
    assert daemon.is_alive(7, "a-very-long-daemon-name", root)
    assert not daemon.is_alive(7, "a-very-long-daemon", root)


def test_a_process_whose_name_only_begins_the_daemon_name_is_not_it(tmp_path):
    root = str(tmp_path / "proc")
    write_stat(root, 8, "s", "S")
    write_stat(root, 9, "slurm", "S")
    assert not daemon.is_alive(8, "slurmd", root)
    assert not daemon.is_alive(9, "slurmd", root)
    assert daemon.is_alive(8, None, root)  # no name: any live process


def test_the_command_line_must_name_the_daemon_too(tmp_path):
    root = str(tmp_path / "proc")
    write_stat(root, 10, "slurmd", "S", argv0="slurmd-impostor")
    write_stat(root, 11, "slurmd", "S")
    os.remove(os.path.join(root, "11", "cmdline"))
    assert not daemon.is_alive(10, "slurmd", root)
    assert not daemon.is_alive(11, "slurmd", root)


def test_running_pid(tmp_path, proc):
    pidfile = tmp_path / "slurmd.pid"
    pidfile.write_text("101")
    assert daemon.running_pid(str(pidfile), "slurmd", proc) is None
    pidfile.write_text("100")
    assert daemon.running_pid(str(pidfile), "slurmd", proc) == 100


def test_launch_argv_passes_values_as_arguments_never_as_shell_text():
    argv = daemon.launch_argv(["slurmd", "-N", "n0"], user="munge", netns="ns0", hostname="n0; rm -rf /")
    assert argv[:4] == ["runuser", "-u", "munge", "--"]
    assert argv[4:7] == ["nsenter", "--net=/var/run/netns/ns0", "--"]
    script = argv[argv.index("-c") + 1]
    assert script == 'hostname -- "$1" && shift && exec "$@"'
    assert argv[argv.index("-c") + 3] == "n0; rm -rf /"
    assert argv[-3:] == ["slurmd", "-N", "n0"]
    assert daemon.launch_argv(["munged"]) == ["munged"]


def test_launch_argv_from_a_root_gives_a_node_its_own_sysfs_and_hostname():
    root = "/var/lib/lc/root; rm -rf /"
    argv = daemon.launch_argv(["slurmd", "-N", "n0"], netns="ns0", hostname="n0", root=root)
    assert argv[:3] == ["nsenter", "--net=/var/run/netns/ns0", "--"]
    # a mount namespace of its own: the sysfs mounted there shows the node's namespace, not the machine's
    assert argv[3:9] == ["unshare", "--uts", "--mount", "--propagation", "private", "--"]
    script = argv[argv.index("-c") + 1]
    assert script == 'hostname -- "$1" && mount -t sysfs sysfs "$2/sys" && cd -- "$2" && shift 2 && exec chroot . "$@"'
    assert argv[argv.index("-c") + 2:] == ["sh", "n0", root, "slurmd", "-N", "n0"]
    # the controller: by chroot alone, in the machine's namespaces
    assert daemon.launch_argv(["slurmctld", "-f", "c"], root="/r") == ["chroot", "/r", "slurmctld", "-f", "c"]
    with pytest.raises(ValueError):
        daemon.launch_argv(["munged"], user="munge", root="/r")


def exec_settled(child, name, argv0=None):
    """Wait for a child's comm and argv[0]: Popen returns when exec closes the child's pipe, a
    moment before the kernel sets them."""
    assert daemon.wait_until(lambda: (daemon.process_status(child.pid)[1] == name[:daemon.COMM_LENGTH]
                                      and daemon.command_name(child.pid) == (argv0 or name)), 5)


def test_stop_terminates_a_real_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        name = os.path.basename(sys.executable)
        exec_settled(child, name)
        assert daemon.is_alive(child.pid, name)
        assert daemon.stop(child.pid, name, timeout=5)
        # reap it, so that it does not stay a zombie
        assert daemon.wait_until(lambda: child.poll() is not None, 5)
        assert child.returncode == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_stop_refuses_a_process_with_another_name():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert daemon.stop(child.pid, "slurmd", timeout=1)  # "not ours": nothing signalled
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def sleeper(tmp_path):
    """Starts real sleep processes through a link called name, with argv[0] argv0 (default: the
    link), and kills them after the test."""
    children = []

    def start(name, argv0=None):
        link = tmp_path / name
        link.symlink_to(shutil.which("sleep"))
        children.append(subprocess.Popen([argv0 or str(link), "60"], executable=str(link)))
        exec_settled(children[-1], name, argv0)
        return children[-1]
    yield start
    for child in children:
        child.kill()
        child.wait()


def test_a_real_process_is_matched_by_its_whole_name(sleeper):
    child = sleeper("a-very-long-daemon-name")
    assert daemon.process_status(child.pid)[1] == "a-very-long-dae"
    assert daemon.is_alive(child.pid, "a-very-long-daemon-name")
    assert not daemon.is_alive(child.pid, "a-very-long-dae")
    assert not daemon.is_alive(child.pid, "a-very-long-daemon")
    assert not daemon.is_alive(child.pid, "a")


def test_a_real_process_with_another_argv0_is_not_the_daemon(sleeper):
    child = sleeper("slurmd", argv0="python3")
    assert daemon.process_status(child.pid)[1] == "slurmd"
    assert not daemon.is_alive(child.pid, "slurmd")
    assert daemon.stop(child.pid, "slurmd", timeout=1)  # "not ours": nothing signalled
    assert child.poll() is None


def test_tail(tmp_path):
    log = tmp_path / "log"
    log.write_text("".join("line %d\n" % i for i in range(100)))
    assert daemon.tail(str(log), 3) == "line 97\nline 98\nline 99"
    assert daemon.tail(str(tmp_path / "missing")) == ""
