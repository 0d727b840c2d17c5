"""Helpers the integration tests share: run playbooks and Slurm commands as a user would."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
CLUSTER_DIR = "/var/lib/llmtrain-local-cluster"
SLURM_CONF = os.path.join(CLUSTER_DIR, "etc", "slurm.conf")


class PlaybookResult:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.output = proc.stdout
        recap = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout)
        self.ok, self.changed, self.unreachable, self.failed = (
            [int(x) for x in recap.groups()] if recap else [None] * 4)


def run_playbook(playbook, *extra, check=True, timeout=900):
    """ansible-playbook from the repository root, as a user runs it."""
    argv = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook)] + list(extra)
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", PATH=BIN + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout)
    result = PlaybookResult(proc)
    if check and result.rc != 0:
        raise AssertionError("%s failed (rc %d):\n%s" % (" ".join(argv), result.rc, proc.stdout[-6000:]))
    return result


def slurm(*argv, timeout=120):
    """Run a Slurm client command against the local cluster; return stdout."""
    env = dict(os.environ, SLURM_CONF=SLURM_CONF)
    proc = subprocess.run(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError("%s failed (rc %d): %s" % (" ".join(argv), proc.returncode, proc.stderr))
    return proc.stdout


def controller_running():
    try:
        with open(os.path.join(CLUSTER_DIR, "run", "slurmctld.pid")) as handle:
            pid = handle.read().strip()
        with open("/proc/%s/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] not in ("Z", "X")
    except (IOError, OSError):
        return False
