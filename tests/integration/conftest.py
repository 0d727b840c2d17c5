"""The integration session runs on a real Slurm cluster brought up by the project's own
local_cluster role, and takes it down at the end unless it was already up before.

Under pytest-xdist (make test-integration: -n 2) every worker is a stream with a cluster of its
own (cluster.py: stream N's names, addresses, ports, inventory, workspace and runs directory),
so that one stream's waits on Slurm overlap the other's work. Each test goes to the next free
worker, except that tests which share something made once stay together (SHARED), and the tests
of the machine's one /etc/slurm link run on stream 0, the only stream whose cluster takes that
link (STREAM_0_ONLY); the end of the session says how long each stream took."""

import os
import time

import pytest
from xdist.scheduler import LoadScopeScheduling

from cluster import CLUSTER_DIR, RELEASE, RELEASES, STREAM, controller_running, run_playbook, write_stream_inventory


@pytest.fixture(scope="session")
def local_cluster():
    if os.geteuid() != 0:
        pytest.fail("the integration tests run a real Slurm cluster and need root")
    write_stream_inventory()
    was_up = controller_running()
    run_playbook("local_cluster.yml")
    yield CLUSTER_DIR
    if not was_up:
        run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")


# Tests that share a module-scoped fixture (a run made once), or the machine's one /etc/slurm
# link, run on one worker, one after the other: a module's name, or module::test.
SHARED = {
    "test_deploy_venv.py": "the venv the module makes once",
    "test_local_cluster.py": "/etc/slurm/slurm.conf",
    "test_minimal_inventory.py": "the minimal inventory's run",
    "test_pipeline.py": "the local inventory's run",
    "test_after_training.py": "the local inventory's run",
    "test_sweep.py": "the ladder sweep",
    "test_reliability.py::test_preemption_requeue_checkpoints_and_resumes_at_the_same_step": "the reference run",
    "test_reliability.py::test_fsdp_preempted_with_sigusr2_resumes_from_its_sharded_checkpoint_and_matches_ddp":
        "the reference run",
}


# The streams take the tests in this order, the modules whose tests took longest in a CI run
# first (test_pipeline.py's scope holds test_after_training.py's too) (the rest after them, as collected), so that no stream is left alone with a long test
# at the end while the other has finished.
LONGEST_FIRST = ["test_minimal_inventory.py", "test_pipeline.py", "test_reliability.py", "test_own_script.py",
                 "test_shared_cluster.py", "test_operate.py", "test_tokenizer.py", "test_gpu_check.py", "test_sweep.py",
                 "test_deploy_venv.py", "test_fabric.py",
                 "test_local_cluster.py"]


def on_this_cluster(marker):
    """Whether a test marked `releases` runs on this stream's cluster. Without a release session it runs on
    the newer releases (make test-releases), where the users' clusters are, instead of this machine's 22.05;
    with system=True on both. In a release session, a test with `on=N` runs on release N of the session's
    (modulo their number) only: each of those behaviours is checked on one release users run per CI run,
    the two release streams taking about the same time; the others (what reads output that differs from
    release to release: squeue's reasons, sacct, reservations, sbatch's options) run on every release."""
    if not RELEASES:
        return bool(marker.kwargs.get("system"))
    if "on" not in marker.kwargs:
        return True
    return RELEASES[int(marker.kwargs["on"]) % len(RELEASES)] == RELEASE


def pytest_collection_modifyitems(config, items):
    rank = dict((name, index) for index, name in enumerate(LONGEST_FIRST))
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.path)), len(rank)))
    elsewhere = [item for item in items if item.get_closest_marker("releases")
                 and not on_this_cluster(item.get_closest_marker("releases"))]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if item not in elsewhere]


def shared_by(nodeid):
    """What a test shares with others (SHARED), or None."""
    path, _sep, name = nodeid.partition("::")
    module = os.path.basename(path)
    return SHARED.get(module) or SHARED.get("%s::%s" % (module, name.split("[")[0]))


# What only stream 0 may run. Stream 0's cluster is the role's default, which points the
# machine's /etc/slurm/slurm.conf at itself each time the role runs (every pretrain.yml of that
# stream); a test of the link on another stream would have it taken away between its playbook
# and its assertion (seen in CI: the link test on stream 1 found stream 0's link, and stream 0's
# no-op rerun found a changed link).
STREAM_0_ONLY = {"/etc/slurm/slurm.conf"}


class StreamScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with a scope per test, or per thing shared (SHARED): a worker
    takes the next scope when it is free, and a scope runs whole on one worker. Stream 0 takes
    the scopes only it may run (STREAM_0_ONLY) before any other; another stream skips them, and
    stops when they are all that is left."""

    def _split_scope(self, nodeid):
        return shared_by(nodeid) or nodeid

    def _assign_work_unit(self, node):
        """The first scope this worker may run goes to the front of xdist's queue, and xdist
        assigns it as usual."""
        first = node.gateway.id == "gw0"
        scope = next((s for s in self.workqueue if (s in STREAM_0_ONLY) == first), None)
        if scope is None and first:
            scope = next(iter(self.workqueue))
        if scope is None:
            node.shutdown()
            return
        self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") == "each":  # a release session: every test on every release's stream
        return None
    return StreamScheduling(config, log)


class StreamTimes:
    """On the controller of an xdist session: per worker, the tests it ran, the seconds they
    took (set-up, call and teardown) and when it finished."""

    def __init__(self):
        self.started = time.monotonic()
        self.tests, self.busy, self.ended = {}, {}, {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        worker = getattr(getattr(report, "node", None), "gateway", None)
        if worker is None:
            return
        self.busy[worker.id] = self.busy.get(worker.id, 0.0) + report.duration
        if report.when == "call":
            self.tests[worker.id] = self.tests.get(worker.id, 0) + 1

    @pytest.hookimpl
    def pytest_testnodedown(self, node, error):
        self.ended[node.gateway.id] = time.monotonic() - self.started

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter):
        if not self.busy:
            return
        terminalreporter.section("integration streams")
        for worker in sorted(self.busy):
            ended = self.ended.get(worker)
            terminalreporter.write_line("stream %s: %d tests, %.0f s in tests, done %s after the start" % (
                worker[2:], self.tests.get(worker, 0), self.busy[worker],
                "%.0f s" % ended if ended is not None else "(not seen)"))


def pytest_configure(config):
    config.addinivalue_line("markers", "releases(system=False, on=None): runs on every newer Slurm release of a "
                                       "release session (make test-releases) instead of this machine's own Slurm; "
                                       "with system=True on both; with on=N on the session's release N only")
    if (STREAM == 0 or RELEASES) and getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(StreamTimes(), "llmtrain-stream-times")
