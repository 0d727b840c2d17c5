# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run used, from Slurm's accounting: the GPU-, node- and CPU-hours of each start of its
training job (a requeued job keeps its id: `sacct --duplicates` lists each start) and, apart, of
its data, venv and samples jobs; allocated TRES x elapsed time. Where the cluster keeps no
accounting (or it does not know the training job), the run's own lines say it (usage.json,
node/run_files.py), and the ledger says which.

The cost is flat in the run's length and the cluster's size: one sacct call for the run's few
job ids (job_ids: the done records, usage.json's job ids, what the caller knows), a row per start
back, and what is kept of them is bounded (STARTS_KEPT); the totals are over every row.

Pure functions on sacct's text and the run's files, for the run_status and run_ledger modules;
the Slurm client (slurm_client.Slurm.sacct_usage) makes the one call."""

from __future__ import annotations

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP, normalize_state, null

# sacct -X (the allocation, not its steps) --duplicates (each start of a requeued job)
USAGE_FIELDS = ("JobID", "JobIDRaw", "State", "Start", "ElapsedRaw", "AllocTRES")
# the done records of the run's other jobs, relative to the run directory (the venv's is the
# caller's: it lies beside the shared venv, <venv>/.llmtrain-venv.json)
RECORDS = (("data", run_files.PREPARE_DONE), ("samples", run_files.GENERATE_DONE))
VENV_RECORD = ".llmtrain-venv.json"
# the most job ids one ledger asks about (a run's handful, a workspace's runs), and the newest
# starts it keeps of the training job (its totals count every one)
JOB_IDS_MAX = 512
STARTS_KEPT = 50


def argv(sacct, job_ids):
    """sacct's argument vector for the allocations of job_ids (each start apart), one line each."""
    return [sacct, "-X", "--duplicates", "--noheader", "--parsable2", "--delimiter=" + FIELD_SEP,
            "--format=" + ",".join(USAGE_FIELDS), "--jobs=" + ",".join(job_ids)]


def tres(text):
    """AllocTRES ('billing=6,cpu=6,gres/gpu=8,gres/gpu:a100=8,mem=12G,node=3') -> {cpus, nodes, gpus};
    the GPUs are gres/gpu's, else the sum of its typed counts (gres/gpu:TYPE=N)."""
    counts, typed = dict(cpus=0, nodes=0, gpus=None), 0
    for item in (text or "").split(","):
        name, _sep, value = item.partition("=")
        value = untrusted.whole(value, 0)
        if name == "cpu":
            counts["cpus"] = value
        elif name == "node":
            counts["nodes"] = value
        elif name == "gres/gpu":
            counts["gpus"] = value
        elif name.startswith("gres/gpu:"):
            typed += value
    counts["gpus"] = typed if counts["gpus"] is None else counts["gpus"]
    return counts


def parse_usage(text):
    """sacct's lines in USAGE_FIELDS (argv) -> [{job_id, array_id, state, start, seconds, cpus, nodes,
    gpus}], in sacct's order; a line of another shape is not one of them. A start that has not
    begun (pending again after a requeue) is of 0 seconds."""
    rows = []
    for line in text.splitlines():
        values = line.split(FIELD_SEP)
        if len(values) != len(USAGE_FIELDS):
            continue
        record = dict(zip(USAGE_FIELDS, values))
        if not untrusted.JOB_ID.match(record["JobIDRaw"]):
            continue
        rows.append(dict(tres(record["AllocTRES"]), job_id=record["JobIDRaw"], array_id=record["JobID"],
                         state=normalize_state(record["State"]), start=null(record["Start"]),
                         seconds=untrusted.whole(record["ElapsedRaw"], 0)))
    return rows


def job_ids(run_dir, train=(), venv_dir=None):
    """({job id: kind}, complete) of the run's jobs: its training jobs (train.done.json's, usage.json's,
    and those the caller knows: train), its data and samples jobs (their done records) and, with
    venv_dir, the venv's job. Each a job id (untrusted.JOB_ID): they go to sacct. complete: usage.json
    kept every training job's id (a run of more jobs than it keeps is not complete)."""
    kinds = {}
    usage = run_files.read_usage(run_dir)
    recorded = done_record.job_of(os.path.join(run_dir, run_files.DONE)).get("job_id")
    for job_id in list(train) + [recorded] + (usage.get("jobs") or "").split():
        if job_id and untrusted.JOB_ID.match(str(job_id)):
            kinds[str(job_id)] = "train"
    others = [(kind, os.path.join(run_dir, name)) for kind, name in RECORDS]
    others += [("venv", os.path.join(venv_dir, VENV_RECORD))] if venv_dir else []
    for kind, path in others:
        job_id = done_record.job_of(path).get("job_id")
        if job_id and job_id not in kinds:
            kinds[job_id] = kind
    return dict(list(kinds.items())[:JOB_IDS_MAX]), not usage.get("jobs_dropped") and len(kinds) <= JOB_IDS_MAX


def hours(rows):
    """{seconds, node_hours, cpu_hours, gpu_hours} of sacct's rows: each allocation x its elapsed time."""
    return dict(seconds=sum(r["seconds"] for r in rows),
                node_hours=sum(r["seconds"] * r["nodes"] for r in rows) / 3600.0,
                cpu_hours=sum(r["seconds"] * r["cpus"] for r in rows) / 3600.0,
                gpu_hours=sum(r["seconds"] * r["gpus"] for r in rows) / 3600.0)


def of_job(row, kinds):
    """The job id of kinds that a sacct row is of (an array task by its JobID), or None."""
    return row["job_id"] if row["job_id"] in kinds else row["array_id"] if row["array_id"] in kinds else None


def ledger(rows, kinds, usage=None, complete=True):
    """The run's ledger from sacct's rows of the job ids in kinds (None: the cluster keeps no
    accounting). {source, train: {starts: the newest STARTS_KEPT [{job_id, state, start, seconds,
    nodes, cpus, gpus, node_hours, cpu_hours, gpu_hours}], count, node_hours, cpu_hours, gpu_hours},
    others: [{kind, job_id, starts, node_hours, cpu_hours, gpu_hours}] (sacct only), missing: the job
    ids sacct does not know}. Where sacct is not there, or does not know every training job, or the
    run's training job ids are not complete (job_ids), the training job's figures are usage
    (usage_totals' of usage.json: the caller's), source usage.json."""
    rows = [r for r in rows or [] if of_job(r, kinds)] if rows is not None else None
    known = {of_job(r, kinds) for r in rows or []}
    train_ids = [j for j, kind in kinds.items() if kind == "train"]
    missing = sorted((j for j in kinds if j not in known), key=lambda j: [int(p) for p in j.split("_")])
    result = dict(source="usage.json", others=[], missing=missing if rows is not None else [])
    if rows is not None and complete and train_ids and all(j in known for j in train_ids):
        started = [r for r in rows if kinds[of_job(r, kinds)] == "train" and r["start"]]
        started.sort(key=lambda r: (r["start"], int(r["job_id"])))
        starts = [dict(dict((k, r[k]) for k in ("job_id", "state", "start", "seconds", "nodes", "cpus", "gpus")),
                       **hours([r])) for r in started[-STARTS_KEPT:]]
        totals = hours(started)
        del totals["seconds"]
        result.update(source="sacct", train=dict(totals, starts=starts, count=len(started)))
    elif usage:
        result["train"] = dict(starts=[], count=usage["starts"], node_hours=usage["node_hours"],
                               cpu_hours=usage.get("cpu_hours"), gpu_hours=usage["gpu_hours"])
    else:
        result["train"] = None
    for job_id, kind in kinds.items():
        mine = [r for r in rows or [] if of_job(r, kinds) == job_id]
        if kind != "train" and mine:
            totals = hours(mine)
            del totals["seconds"]
            result["others"].append(dict(totals, kind=kind, job_id=job_id, starts=len(mine)))
    return result
