# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job that finished records it itself: its job script, at its end, marks its done record
(train.done.json, data/prepare.done.json, written by llmtrain.slurm.sbatch when it submitted the job,
with the job's fingerprint) COMPLETED when that record names this job. A job nobody waited for (a run
submitted with pretrain_watch: false, its jobs chained) is then known finished by the next pipeline
run or status playbook, also once Slurm has forgotten the job: nothing is submitted again.

    python -m llmtrain_node.job_end --done-file <run>/train.done.json --job-id ID

A record that names another job (a later submission), or none, is left as it is. This file
imports nothing from Ansible: it runs on the batch node, beside the run's other scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import untrusted
from .atomic import replace_file


def completed(record, job_id, now):
    """The record with the job marked COMPLETED (as Slurm says of a batch script that exits 0), or
    None when it does not name job_id."""
    if not isinstance(record, dict) or untrusted.field(record.get("job_id"), untrusted.JOB) != str(job_id) \
            or not record.get("fingerprint"):
        return None
    return dict(record, state="COMPLETED", exit_code="0:0", end_time=now)


def mark(done_file, job_id, now=None):
    """Marks done_file COMPLETED for job_id; returns why not (a line for the job's log), or None."""
    try:
        record = untrusted.read(done_file, untrusted.DONE_RECORD_MAX_BYTES)
    except FileNotFoundError:
        return "no %s: the next run of the playbook asks Slurm whether job %s completed" % (done_file, job_id)
    except (OSError, ValueError) as err:
        return "cannot read %s (%s): the next run of the playbook asks Slurm whether job %s completed" % (
            done_file, err, job_id)
    new = completed(record, job_id, now or time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()))
    if new is None:
        return "%s names another job than %s: left as it is" % (done_file, job_id)
    replace_file(done_file, (json.dumps(new, sort_keys=True) + "\n").encode("utf-8"),
                 prefix=".%s." % os.path.basename(done_file), fsync=True)
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="llmtrain_node.job_end")
    parser.add_argument("--done-file", required=True)
    parser.add_argument("--job-id", required=True)
    args = parser.parse_args(argv)
    try:
        why = mark(args.done_file, args.job_id)
    except OSError as err:
        why = "cannot write %s: %s" % (args.done_file, err)
    if why:
        sys.stderr.write("llmtrain: %s\n" % why)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
