# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record that says a job already ran: small JSON on the target, keyed by the job's
fingerprint, so a rerun asks Slurm nothing (the controller may long have forgotten the job)."""

from __future__ import annotations

import json
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_file

RECORD_FIELDS = ("fingerprint", "name", "job_id", "state", "exit_code", "end_time", "stdout_path")


def read(path, fp):
    """(the record, None) when path records fingerprint fp; (None, why) when path holds no
    readable record (its job id must be a Slurm job id: it is passed to scontrol and sacct);
    (None, None) when it is missing or records another job."""
    try:
        record = untrusted.read(path, untrusted.DONE_RECORD_MAX_BYTES)
    except FileNotFoundError:
        return None, None
    except (IOError, OSError, ValueError) as err:
        return None, "done_file %s holds no readable record (%s); the job counts as not done" % (path, err)
    if not isinstance(record, dict):
        return None, "done_file %s holds no record (a JSON object); the job counts as not done" % path
    if record.get("job_id") is not None and untrusted.field(record["job_id"], untrusted.JOB) is None:
        return None, "done_file %s names no Slurm job (job_id %r); the job counts as not done" % (
            path, untrusted.printable(record["job_id"])[:40])
    return (record if record.get("fingerprint") == fp else None), None


def pending_job(path):
    """The job id path's record names while it does not say the job completed (a job submitted and not
    waited for), else None: also for a missing or unreadable record, or one naming no Slurm job."""
    try:
        record = untrusted.read(path, untrusted.DONE_RECORD_MAX_BYTES)
    except (IOError, OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("state") == "COMPLETED":
        return None
    return untrusted.field(record.get("job_id"), untrusted.JOB)


def of_job(job, fp):
    """The record of a job that completed, as the modules return jobs."""
    record = {key: job.get(key) for key in RECORD_FIELDS}
    record["fingerprint"] = fp
    return record


def write(path, record):
    """Replaces path atomically: a reader sees the old record or the new one, never half."""
    replace_file(path, (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"),
                 prefix=".%s." % os.path.basename(path))
