# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""This job as Slurm's commands must name it to act on it alone.

A task of a job array has a job id of its own (SLURM_JOB_ID), but the array's last task has the
array's: `scontrol requeue $SLURM_JOB_ID` from that task requeues every task of the array (Slurm
24.11 and 26.05, tests/unit/fixtures/slurm/arrays/requeue-*.txt). `<array>_<index>` names the task
alone, on every release. This file imports nothing from Ansible: it runs on the nodes."""

from __future__ import annotations

import os

from .untrusted import digits


def own_id(env=None):
    """`<SLURM_ARRAY_JOB_ID>_<SLURM_ARRAY_TASK_ID>` in a job array, else SLURM_JOB_ID ('' outside a job)."""
    env = os.environ if env is None else env
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if digits(array) and digits(task):
        return "%s_%s" % (array, task)
    return env.get("SLURM_JOB_ID", "")
