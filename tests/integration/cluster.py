"""Helpers the integration tests share: run playbooks and Slurm commands as a user would."""

import os
import re
import json
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid

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


def playbook_argv(playbook, *extra):
    """ansible-playbook playbooks/<playbook> EXTRA..., as a user runs it from the repository root."""
    return [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook)] + list(extra)


def login_umask(umask):
    """A preexec_fn that gives ansible-playbook a login shell's umask (002 with user-private groups)."""
    return None if umask is None else (lambda: os.umask(umask))


def run_playbook(playbook, *extra, check=True, timeout=900, umask=None):
    """ansible-playbook from the repository root, as a user runs it (with umask: under that umask)."""
    argv = playbook_argv(playbook, *extra)
    proc = subprocess.run(argv, cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout, check=False, preexec_fn=login_umask(umask))
    result = PlaybookResult(proc)
    if check and result.rc != 0:
        raise AssertionError("%s failed (rc %d):\n%s" % (" ".join(argv), result.rc, proc.stdout[-6000:]))
    return result


class BackgroundPlaybook:
    """ansible-playbook started in the background with extra vars `values`, in a session of its
    own (its process group is what a terminal's Ctrl-C reaches); its output goes to a temporary
    file."""

    def __init__(self, values, playbook="pretrain.yml", tags=None, args=()):
        self.log = tempfile.TemporaryFile("w+")
        argv = playbook_argv(playbook, "-e", json.dumps(values), *(["--tags", tags] if tags else []), *args)
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=ansible_env(), stdout=self.log,
                                     stderr=subprocess.STDOUT, universal_newlines=True, start_new_session=True)

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def wait(self, timeout=600):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("the playbook did not end within %d s:\n%s" % (timeout, self.output()[-6000:]))
        proc = subprocess.CompletedProcess([], self.proc.returncode, self.output())
        self.log.close()
        return PlaybookResult(proc)

    def interrupt(self):
        """Ctrl-C: SIGINT to the whole process group."""
        os.killpg(self.proc.pid, signal.SIGINT)


def wait_for(predicate, timeout, what, playbook=None):
    """The first true value of predicate(), polled every 0.25 s; fails after `timeout` s, or
    as soon as `playbook` (a BackgroundPlaybook) has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if playbook is not None and playbook.proc.poll() is not None:
            raise AssertionError("the playbook ended while waiting for %s:\n%s" % (what, playbook.output()[-6000:]))
        time.sleep(0.25)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def slurm(*argv, timeout=120):
    """Run a Slurm client command against the local cluster; return stdout."""
    env = dict(os.environ, SLURM_CONF=SLURM_CONF)
    proc = subprocess.run(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError("%s failed (rc %d): %s" % (" ".join(argv), proc.returncode, proc.stderr))
    return proc.stdout


def writable_by_others(top):
    """The paths under top (itself included) that group or others can write, links aside."""
    found = []
    for base, dirs, files in os.walk(top):
        for path in [base] + [os.path.join(base, name) for name in files]:
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                found.append("%s %04o" % (path, stat.S_IMODE(info.st_mode)))
    return found


def controller_running():
    try:
        with open(os.path.join(CLUSTER_DIR, "run", "slurmctld.pid")) as handle:
            pid = handle.read().strip()
        with open("/proc/%s/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] not in ("Z", "X")
    except (IOError, OSError):
        return False


def ansible_env():
    # JSON results: messages appear unwrapped, as the tests quote them.
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json", PATH=BIN + os.pathsep + os.environ["PATH"])


def module(name, args, tmp_path, check=False):
    """One module run on the login node (`ansible slurm_login -m ...`); its result."""
    if name == "sbatch" and args.get("state") != "absent":
        args = dict(args, chdir=args.get("chdir", str(tmp_path)))  # job output under tmp_path
    tree = tmp_path / ("tree-" + uuid.uuid4().hex[:8])
    argv = [os.path.join(BIN, "ansible"), "slurm_login", "-m", "llmtrain.slurm." + name, "-a", json.dumps(args),
            "--tree", str(tree)] + (["--check"] if check else [])
    proc = subprocess.run(argv, cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120, check=False)
    with open(tree / "localhost") as handle:
        result = json.load(handle)
    result["_output"] = proc.stdout
    result["failed"] = proc.returncode != 0
    return result
