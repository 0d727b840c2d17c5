# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one loop that waits on Slurm: a clock, a check, a predicate, a timeout."""

from __future__ import annotations

import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import ControllerUnreachable


class Waiter:
    """Runs a check (one Slurm query or a few) at most once per interval.

    A controller that does not answer (stopped, restarting) is retried once per interval
    for up to unreachable_timeout seconds; its jobs run on meanwhile, so that time does not
    count against the timeout. checks counts the checks that got an answer."""

    def __init__(self, interval=1.0, unreachable_timeout=0.0, clock=None, sleep=None):
        self.interval = interval
        self.unreachable_timeout = unreachable_timeout
        self.clock, self.sleep = clock or time.monotonic, sleep or time.sleep
        self.checks = 0

    def wait(self, check, done, timeout):
        """Calls check() until done(its value), or until the next check would begin after
        timeout seconds (0: check once). Returns (the last value, whether done)."""
        deadline = self.clock() + timeout
        unanswered_since = None
        while True:
            started = self.clock()
            try:
                value = check()
            except ControllerUnreachable as err:
                unanswered_since = started if unanswered_since is None else unanswered_since
                if started - unanswered_since >= self.unreachable_timeout:
                    raise ControllerUnreachable(
                        "The Slurm controller has not answered for %d s (%s). The jobs are not affected: they keep "
                        "running without it. Run this again (the playbook re-attaches to its jobs) once `squeue` "
                        "answers." % (started - unanswered_since, err))
                self._pace(started)
                continue
            unanswered_since = None
            self.checks += 1
            if done(value):
                return value, True
            if timeout > 0:
                # also paces the next call of the module: its first check comes at once
                self._pace(started)
            if started + self.interval > deadline:
                return value, False

    def _pace(self, started):
        self.sleep(max(0.0, started + self.interval - self.clock()))
