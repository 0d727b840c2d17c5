"""The integration session runs on a real Slurm cluster brought up by the project's own
local_cluster role, and takes it down at the end unless it was already up before."""

import os

import pytest

from cluster import CLUSTER_DIR, controller_running, run_playbook


@pytest.fixture(scope="session")
def local_cluster():
    if os.geteuid() != 0:
        pytest.fail("the integration tests run a real Slurm cluster and need root")
    was_up = controller_running()
    run_playbook("local_cluster.yml")
    yield CLUSTER_DIR
    if not was_up:
        run_playbook("local_cluster.yml", "-e", "local_cluster_state=absent")
