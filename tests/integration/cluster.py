"""Helpers the integration tests share: run playbooks and Slurm commands as a user would."""

import os
import re
import fcntl
import json
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
LOCAL_INVENTORY = os.path.join(ROOT, "inventories", "local")


def stream_number():
    """Which stream of the integration tests this process runs: pytest-xdist's worker gwN runs
    stream N, a plain pytest stream 0."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


# A release session (make test-releases: LLMTRAIN_TEST_RELEASES=24.11,26.05, pytest-xdist's
# --dist each) runs the tests marked `releases` once per release: worker gwN on a cluster of
# release N, as stream 10 + N. Any other session runs on this machine's own Slurm (system).
RELEASES = [r for r in os.environ.get("LLMTRAIN_TEST_RELEASES", "").split(",") if r]
if RELEASES:
    RELEASE = RELEASES[stream_number() % len(RELEASES)]
    STREAM = 10 + stream_number()
else:
    RELEASE = "system"
    STREAM = stream_number()

# Each stream has a local cluster of its own, side by side on this machine. Stream 0's is the
# one `make cluster` brings up (the role's defaults, inventories/local, the /etc/slurm link);
# every other stream's differs in each name, address and port, and leaves /etc/slurm alone.
# Every command the tests run reaches the stream's cluster through SLURM_CONF (and, for a
# release, that release's commands first on PATH: the cluster's env.sh).
if STREAM == 0:
    CLUSTER_VARS = {}
    WORKSPACE = "/var/tmp/llmtrain-workspace"
    RUNS = os.path.join(ROOT, "runs")
    INVENTORY_DIR = LOCAL_INVENTORY
else:
    CLUSTER_VARS = dict(local_cluster_dir="/var/lib/llmtrain-local-cluster-%d" % STREAM,
                        local_cluster_cluster_name="llmtrain%d" % STREAM,
                        local_cluster_node_prefix="slurm%d-worker-" % STREAM,
                        local_cluster_subnet_prefix="10.213.%d" % STREAM,
                        local_cluster_bridge="llmtbr%d" % STREAM,
                        local_cluster_netns_prefix="llmt%d-" % STREAM,
                        local_cluster_slurmctld_port=6817 + 100 * STREAM,
                        local_cluster_slurmd_port=6818 + 100 * STREAM,
                        local_cluster_slurmdbd_port=6819 + 100 * STREAM,
                        local_cluster_link_system_config=False)
    WORKSPACE = "/var/tmp/llmtrain-workspace-%d" % STREAM
    if RELEASE != "system":
        # its jobs see the workspace, and the tests' files that runs name (tests/faults)
        CLUSTER_VARS.update(local_cluster_release=RELEASE,
                            local_cluster_shared_paths=[WORKSPACE, os.path.join(ROOT, "tests")])
    RUNS = os.path.join(ROOT, "tests", "output", "runs-%d" % STREAM)
    INVENTORY_DIR = os.path.join(ROOT, "tests", "output", "inventory-%d" % STREAM)
INVENTORY = os.path.join(INVENTORY_DIR, "hosts.yml")
ROLE_DEFAULTS = dict(local_cluster_dir="/var/lib/llmtrain-local-cluster", local_cluster_node_prefix="slurm-worker-",
                     local_cluster_subnet_prefix="10.213.0", local_cluster_bridge="llmtbr0",
                     local_cluster_netns_prefix="llmt-", local_cluster_link_system_config=True)
CLUSTER = dict(ROLE_DEFAULTS, **CLUSTER_VARS)
CLUSTER_DIR = CLUSTER["local_cluster_dir"]
SLURM_CONF = os.path.join(CLUSTER_DIR, "etc", "slurm.conf")


def as_user(user, argv):
    """argv run as another user of this machine, its Slurm commands reaching the stream's
    cluster: for a release, from the release's root (chroot needs root, so the switch to the
    user is chroot's)."""
    if RELEASE == "system":
        return ["runuser", "-u", user, "--"] + list(argv)
    return ["chroot", "--userspec=%s:%s" % (user, "nogroup" if user == "nobody" else user),
            os.path.join(CLUSTER_DIR, "root"), "/usr/bin/env", "SLURM_CONF=" + SLURM_CONF] + list(argv)


def slurm_env(base=None):
    """An environment whose Slurm commands reach the stream's cluster, as its env.sh makes one."""
    env = dict(os.environ if base is None else base, SLURM_CONF=SLURM_CONF)
    if RELEASE != "system":
        env["PATH"] = os.path.join(CLUSTER_DIR, "bin") + os.pathsep + env["PATH"]
    return env


NODE_PREFIX = CLUSTER["local_cluster_node_prefix"]
NETNS_PREFIX = CLUSTER["local_cluster_netns_prefix"]
BRIDGE = CLUSTER["local_cluster_bridge"]
SUBNET = CLUSTER["local_cluster_subnet_prefix"]


def node(index):
    """The name of the stream's node `index` (slurm-worker-<index> in stream 0)."""
    return NODE_PREFIX + str(index)


NODES = [node(index) for index in range(3)]
NODE_RE = re.escape(NODE_PREFIX) + r"\d"  # any of its nodes, in a regular expression


def write_stream_inventory():
    """inventories/local for this stream's cluster: the same settings, its own node names,
    cluster, workspace and runs directory (stream 0 uses inventories/local itself)."""
    if STREAM == 0:
        return
    with open(os.path.join(LOCAL_INVENTORY, "hosts.yml")) as handle:
        hosts = yaml.safe_load(handle)
    hosts["all"]["children"]["slurm_workers"]["hosts"] = dict((name, None) for name in NODES)
    with open(os.path.join(LOCAL_INVENTORY, "group_vars", "all.yml")) as handle:
        values = yaml.safe_load(handle)
    values.update(CLUSTER_VARS, slurm_workspace=WORKSPACE, run_results_dir=RUNS)
    os.makedirs(os.path.join(INVENTORY_DIR, "group_vars"), exist_ok=True)
    with open(INVENTORY, "w") as handle:
        yaml.safe_dump(hosts, handle)
    with open(os.path.join(INVENTORY_DIR, "group_vars", "all.yml"), "w") as handle:
        yaml.safe_dump(values, handle)


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


# The streams' clusters share this machine's /etc/hosts, /etc/slurm and package manager: the
# local_cluster role runs for one stream at a time.
ROLE_LOCK = "/tmp/llmtrain-local-cluster-role.lock"


def run_playbook(playbook, *extra, check=True, timeout=900, umask=None):
    """ansible-playbook from the repository root, as a user runs it (with umask: under that umask)."""
    argv = playbook_argv(playbook, *extra)
    with open(ROLE_LOCK if playbook == "local_cluster.yml" else os.devnull, "a") as lock:
        if playbook == "local_cluster.yml":
            fcntl.flock(lock, fcntl.LOCK_EX)
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
    proc = subprocess.run(list(argv), env=slurm_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError("%s failed (rc %d): %s" % (" ".join(argv), proc.returncode, proc.stderr))
    return proc.stdout


def job_ids():
    """Ids of every job the stream's controller still knows, ended ones included for MinJobAge
    (300 s). Jobs that ended before a test age out during it, so a test checks the ids that
    appear (job_ids() - before), never the whole set."""
    return set(slurm("squeue", "--noheader", "--states=all", "--format=%i").split())


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
    # JSON results: messages appear unwrapped, as the tests quote them. The stream's inventory
    # and cluster (a user's -i overrides the inventory).
    return slurm_env(dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                          ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                          PATH=BIN + os.pathsep + os.environ["PATH"], ANSIBLE_INVENTORY=INVENTORY))


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


def pinned_packages(name, requirements):
    """The packages of requirements (pinned, with what they import) installed with --no-deps into
    tests/output/<name>, kept between test runs: a trainer's library for the nodes (PYTHONPATH), whose
    torch and numpy are the venv's own, never a second copy from PyPI."""
    target = os.path.join(ROOT, "tests", "output", name)
    done = os.path.join(target, ".installed")
    if not os.path.exists(done) or open(done).read() != open(requirements).read():
        shutil.rmtree(target, ignore_errors=True)
        installed = subprocess.run([os.path.join(BIN, "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                                    "--no-compile", "--target", target, "-r", requirements],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                   timeout=900, check=False)
        assert installed.returncode == 0, installed.stdout[-3000:]
        shutil.copy(requirements, done)
    return target
