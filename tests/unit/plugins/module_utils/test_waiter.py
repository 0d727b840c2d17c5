import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import ControllerUnreachable, SlurmError
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.waiter import Waiter


class Clock:
    """A clock that only sleeping moves."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def waiter(self, **kwargs):
        return Waiter(clock=lambda: self.now, sleep=self.sleep, **kwargs)


def answers(*values):
    """check(): the next value, raising those that are exceptions."""
    pending = list(values)

    def check():
        value = pending.pop(0)
        if isinstance(value, Exception):
            raise value
        return value
    return check


def test_checks_once_per_interval_until_done():
    clock = Clock()
    waiter = clock.waiter(interval=2.0)
    value, done = waiter.wait(answers("running", "running", "ended"), lambda v: v == "ended", 60)
    assert (value, done, waiter.checks) == ("ended", True, 3)
    assert clock.sleeps == [2.0, 2.0]  # none after the check that saw the end


def test_stops_when_the_next_check_would_begin_after_the_timeout():
    clock = Clock()
    waiter = clock.waiter()
    value, done = waiter.wait(answers(*["running"] * 3), lambda v: False, 2.5)
    assert (value, done, waiter.checks) == ("running", False, 3)
    assert clock.now == 3.0  # the last interval is waited out: a next call checks at once


def test_timeout_0_checks_once_without_sleeping():
    clock = Clock()
    waiter = clock.waiter()
    assert waiter.wait(answers("running"), lambda v: False, 0) == ("running", False)
    assert clock.sleeps == []


def test_an_unanswering_controller_is_retried_for_unreachable_timeout():
    clock = Clock()
    waiter = clock.waiter(unreachable_timeout=5)
    down = ControllerUnreachable("squeue failed (rc 1): Unable to contact slurm controller")
    assert waiter.wait(answers(down, down, "ended"), lambda v: v == "ended", 0) == ("ended", True)
    assert waiter.checks == 1 and clock.sleeps == [1.0, 1.0]


def test_a_controller_silent_past_unreachable_timeout_fails_saying_the_jobs_run_on():
    clock = Clock()
    waiter = clock.waiter(unreachable_timeout=2.5)
    down = ControllerUnreachable("Unable to contact slurm controller")
    with pytest.raises(ControllerUnreachable) as info:
        waiter.wait(answers("running", down, down, down, down), lambda v: False, 60)
    assert "has not answered for 3 s (Unable to contact slurm controller)" in str(info.value)
    assert "keep running" in str(info.value) and "re-attaches" in str(info.value)
    assert waiter.checks == 1 and clock.now == 4.0


def test_other_slurm_errors_are_not_retried():
    clock = Clock()
    with pytest.raises(SlurmError, match="denied"):
        clock.waiter(unreachable_timeout=600).wait(answers(SlurmError("denied")), lambda v: False, 60)
    assert clock.sleeps == []
