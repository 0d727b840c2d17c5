# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Daemons tracked by their pid files: liveness, start, stop.

A process counts as ours only when the pid file names it, it is not a zombie, and both
its /proc comm and the basename of its argv[0] are the expected program's name, so a
reused pid is never signalled.
"""

from __future__ import annotations

import os
import signal
import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

PROC = "/proc"
COMM_LENGTH = 15  # the kernel keeps this much of a program's name in comm


def read_pidfile(path):
    """Return the pid in a pid file, or None when the file is missing or not a pid."""
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except (IOError, OSError):
        return None
    pid = untrusted.whole(text)
    return pid if pid else None


def process_status(pid, proc=PROC):
    """Return (state letter, comm) of a pid from /proc, or (None, None) when gone."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as handle:
            stat = handle.read()
    except (IOError, OSError):
        return None, None
    # comm is in parentheses and may itself contain spaces or parentheses.
    open_paren, close_paren = stat.find("("), stat.rfind(")")
    if open_paren < 0 or close_paren < 0:
        return None, None
    comm = stat[open_paren + 1:close_paren]
    rest = stat[close_paren + 1:].split()
    return (rest[0] if rest else None), comm


def command_name(pid, proc=PROC):
    """The basename of a pid's argv[0], or None when it is gone or has no command line (a
    zombie, a kernel thread)."""
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            argv0 = handle.read().split(b"\0", 1)[0]
    except (IOError, OSError):
        return None
    return os.path.basename(argv0.decode("utf-8", "replace")) or None


def is_alive(pid, process_name=None, proc=PROC):
    """True when pid runs (not a zombie) and, if a name is given, it is that program's: its
    comm is the name as the kernel truncates it, and its argv[0] the whole name (which tells
    long names with the same first 15 characters apart)."""
    if not pid:
        return False
    state, comm = process_status(pid, proc)
    if state is None or state in ("Z", "X"):
        return False
    if process_name and (comm != process_name[:COMM_LENGTH] or command_name(pid, proc) != process_name):
        return False
    return True


def running_pid(pidfile, process_name=None, proc=PROC):
    """The live pid a pid file names, or None."""
    pid = read_pidfile(pidfile)
    return pid if is_alive(pid, process_name, proc) else None


def wait_until(predicate, timeout, interval=0.1):
    """Poll predicate until it returns a truthy value or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def stop(pid, process_name=None, timeout=10.0, proc=PROC):
    """SIGTERM pid, then SIGKILL after timeout. Returns True when it is gone."""
    if not is_alive(pid, process_name, proc):
        return True
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if wait_until(lambda: not is_alive(pid, process_name, proc), timeout):
        return True
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    return bool(wait_until(lambda: not is_alive(pid, process_name, proc), 5.0))


def launch_argv(command, user=None, netns=None, hostname=None, root=None):
    """The argv that starts command, optionally as user, in a network namespace and
    a new UTS namespace with its own hostname, and from another root directory.

    With a root, the command runs by chroot; with a hostname too, in a mount namespace of its
    own where the root's /sys is a sysfs of the network namespace (a node's interfaces, not
    the machine's). The values travel as positional parameters of fixed shell scripts, so no
    shell string is ever built from a value.
    """
    if user and root:
        raise ValueError("a daemon runs either as another user or from another root, not both")
    argv = list(command)
    if hostname and root:
        argv = ["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c",
                'hostname -- "$1" && mount -t sysfs sysfs "$2/sys" && cd -- "$2" && shift 2 && exec chroot . "$@"',
                "sh", hostname, root] + argv
    elif hostname:
        argv = ["unshare", "--uts", "--", "sh", "-c", 'hostname -- "$1" && shift && exec "$@"',
                "sh", hostname] + argv
    elif root:
        argv = ["chroot", root] + argv
    if netns:
        argv = ["nsenter", "--net=/var/run/netns/%s" % netns, "--"] + argv
    if user:
        argv = ["runuser", "-u", user, "--"] + argv
    return argv


def tail(path, lines=20):
    """The last lines of a text file, or '' when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return ""
    return "\n".join(data.splitlines()[-lines:])
