"""Every unit test starts under umask 022, whatever the shell that runs pytest has: a test of a
login umask sets its own (umask 002 of user-private groups, 077), and the others build trees whose
modes they check."""

import os

import pytest


@pytest.fixture(autouse=True)
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)
