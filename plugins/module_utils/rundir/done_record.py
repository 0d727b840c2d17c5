# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record that says a job already ran: small JSON on the target, keyed by the job's
fingerprint, so a rerun asks Slurm nothing (the controller may long have forgotten the job)."""

from __future__ import annotations

import json
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_file
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import read_text

RECORD_FIELDS = ("fingerprint", "name", "job_id", "state", "exit_code", "end_time", "stdout_path")
# what the run's other readers take of a record: which job, and whether it completed
JOB_FIELDS = dict(job_id=untrusted.JOB, state=untrusted.TEXT)


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


def job_of(path):
    """{job_id, state} of the record at path, each of its type or left out: read bounded, a link not
    followed; {} when it is missing or holds no record. The status, the ledger and a job queued behind
    another read a record so."""
    text, _why = read_text(path, untrusted.DONE_RECORD_MAX_BYTES)
    record = untrusted.record(text, untrusted.DONE_RECORD_MAX_BYTES) if text is not None else None
    return untrusted.fields(record or {}, JOB_FIELDS)


def pending_job(path):
    """The job id path's record names while it does not say the job completed (a job submitted and not
    waited for), else None: also for a missing or unreadable record, or one naming no Slurm job."""
    record = job_of(path)
    return record.get("job_id") if record.get("state") != "COMPLETED" else None


def of_job(job, fp):
    """The record of a job that completed, as the modules return jobs."""
    record = {key: job.get(key) for key in RECORD_FIELDS}
    record["fingerprint"] = fp
    return record


def write(path, record):
    """Replaces path atomically: a reader sees the old record or the new one, never half."""
    replace_file(path, (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"),
                 prefix=".%s." % os.path.basename(path))
