# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's facts: what the report says of a run beyond its loss records, kept as facts.json in the
run directory (so that a controller that did not watch the run reports the same) and in
runs/<run>/. FIELDS is where each fact is defined; make() is the one maker of them, from what the
collect step read of the run directory (the filter llmtrain.slurm.run_facts); run_report.py (the
action llmtrain.slurm.run_report's) reads them.

Every value taken from a file of the run is untrusted: read bounded (node/untrusted.py), of the JSON
type expected, else left out and said through warn()."""

from __future__ import annotations

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import node_check, run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import expand_hostlist

# the most of one file of the run that is read as JSON (read_files' max_bytes default)
JSON_MAX_BYTES = 1048576

# fact -> what it holds (every key is optional to the report: a failed run reports what exists)
FIELDS = {
    "run_name": "the run's name (run_name)",
    "workspace": "the run directory on the cluster",
    "model": "the reference trainer's model shape (pretrain_model), or null with your own script",
    "script": "your script as it ran: {path, args, chdir, source_dir, files, digest, checkpoints}, or null",
    "cluster": "{partition, slurm_version, nodes: [names of the job's nodes], gpus_per_node, procs_per_node}",
    "node_check_table": "the lines of the job's last node check table",
    "node_check_time": "when that node check ran",
    "node_check_job": "the job that ran it",
    "network": "the job's network check (its last start): {job_id, time, backend, ranks, busbw, latency_us, limit,"
               " fraction, min_fraction, seconds, slow {node: reason}, slow_fabric, nodes [...]}, or null",
    "gpu_policy": "run_gpu_policy as the preflight recorded it",
    "straggler_threshold": "pretrain_straggler_threshold",
    "excluded_nodes": "{node: why the run keeps off it}: its node checks' bad nodes and slurm_exclude_nodes",
    "env": "{NAME: value} of the run's env file (env/cluster.env)",
    "jobs": "[{kind, job_id, state, exit_code, elapsed, nodelist, start_time, end_time, restarts}]",
    "progress": "where the report's loss records come from: {source: metrics | events | metrics_csv | log | null, ...}",
    "checkpoint": "the reference trainer's newest checkpoint {path, step}, or null",
    "not_fetched": "{path: why} of the run's files the collect step left on the cluster (runs/<run>/facts.json only)",
    "ledger": "what the run used (the run_ledger module's ledger: {source, train, others, missing}; runs/<run>/facts.json "
              "only, made at each collect)",
}
# the job record's fields a fact keeps (slurm_parse.JOB_FIELDS), with their value when the record lacks one
JOB_FACTS = (("job_id", None), ("state", "UNKNOWN"), ("exit_code", None), ("elapsed", None), ("nodelist", None),
             ("start_time", None), ("end_time", None), ("restarts", 0))


def run_json(text, default, name, warn):
    """The JSON value of a file of the run, or default when it is none, or not of default's type (said)."""
    try:
        value = untrusted.loads(str(text), JSON_MAX_BYTES)
    except untrusted.Unreadable as err:
        warn("%s cannot be read (%s): it is left out" % (untrusted.printable(name), err))
        return default
    # the JSON type of default (Ansible hands a template's [] and {} over as subclasses of list and dict)
    kind = next((k for k in (dict, list, str, bool, int, float) if isinstance(default, k)), None)
    if kind is not None and not isinstance(value, kind):
        warn("%s holds no JSON %s: it is left out" % (untrusted.printable(name), kind.__name__))
        return default
    return value


def hostnames(items):
    """Node names and Slurm hostlists (gpu-[01-04], a,b) -> the node names, in order, once each."""
    names = {}  # insertion-ordered, and a lookup in constant time: a job's thousands of nodes
    for item in [items] if isinstance(items, str) else (items or []):
        names.update(dict.fromkeys(expand_hostlist(str(item))))
    return list(names)


def excluded_reason(node, bad_nodes):
    """Why a run keeps off node: the reason its node check recorded in bad_nodes.json, or that
    slurm_exclude_nodes names it."""
    entry = (bad_nodes or {}).get(node)
    if isinstance(entry, dict) and entry.get("reason"):
        return "%s (node check of job %s, %s)" % (entry["reason"], entry.get("job_id"), entry.get("time"))
    return "named in slurm_exclude_nodes"


def progress(metrics_fetched, events, log_read, patterns, event_files, local_dir):
    """Where the report's loss records come from: the metrics file the job wrote, else your script's
    event files (events: event_metrics' result), else its log lines, else nothing (with what was found)."""
    if metrics_fetched:
        return {"source": "metrics"}
    events = events or {}
    if events.get("records", 0) > 0:
        return {"source": events.get("source"), "tag": events.get("tag"),
                "files": [os.path.relpath(f, local_dir) if local_dir else f for f in events.get("files", [])],
                "unreadable": events.get("unreadable")}
    if log_read:
        return {"source": "log", "patterns": list(patterns or [])}
    return {"source": None, "tags": list(events.get("tags", [])), "event_files": event_files}


def make(read, settings, job, job_id, checkpoints, progress_fact, warn):
    """The run's facts (FIELDS) from the files the collect step read of the run directory (read: name
    -> text), the run's settings, the job as last seen (job_id where that says nothing), its
    checkpoint names (oldest first) and where its loss records come from."""
    job_name = settings["job_name"]
    workspace = settings["workspace"]

    def of(name, default):
        return run_json(read[name], default, name, warn) if name in read else default

    checked = of("preflight.json", {})
    node_check_record = of("node_check/%s.json" % job_name, {})
    bad_nodes = of("bad_nodes.json", {})
    script = settings.get("script")
    excluded = list(dict.fromkeys(hostnames(settings.get("exclude_nodes")) + list(bad_nodes)))
    facts = {
        "run_name": settings["run_name"],
        "workspace": workspace,
        "model": None if script else settings.get("model"),
        "script": dict(script, checkpoints=list(checkpoints)) if script else None,
        "cluster": {
            "partition": settings.get("partition") or checked.get("slurm_partition"),
            "slurm_version": checked.get("slurm_version"),
            # an active job's node list is its compact nodelist (the watch does not expand it each poll)
            "nodes": job.get("nodes") or hostnames(job.get("nodelist") or ""),
            "gpus_per_node": settings["gpus_per_node"],
            "procs_per_node": settings["procs_per_node"],
        },
        "node_check_table": node_check_record.get("table", []),
        "node_check_time": node_check_record.get("time"),
        "node_check_job": node_check_record.get("job_id"),
        "network": of("network_check/%s.json" % job_name, None),
        "gpu_policy": checked.get("gpu_policy", settings.get("gpu_policy")),
        "straggler_threshold": settings.get("straggler_threshold"),
        "excluded_nodes": dict((node, excluded_reason(node, bad_nodes)) for node in excluded),
        "env": node_check.env_file_values(read.get("env/cluster.env", "")),
        "jobs": [dict([("kind", "train")] + [(key, job.get(key, job_id if key == "job_id" else default))
                                             for key, default in JOB_FACTS])],
        "progress": progress_fact,
        "checkpoint": ({"path": "%s/checkpoints/%s" % (workspace, checkpoints[-1]),
                        "step": run_files.checkpoint_step(checkpoints[-1])} if checkpoints and not script else None),
    }
    return facts


def kept_or_made(read, reuse, settings, warn, **kwargs):
    """The facts a watch kept in the run directory (facts.json), when reuse (the run is not watched
    now) and they are there, else those make() makes now."""
    if reuse and "facts.json" in read:
        return run_json(read["facts.json"], {}, settings["workspace"] + "/facts.json", warn)
    return make(read, settings=settings, warn=warn, **kwargs)
