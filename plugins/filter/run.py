# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read run artifacts back.

  text | llmtrain.slurm.env_file_values -> {NAME: value} of an env file the nccl_env role wrote
  [(path, stat)] | llmtrain.slurm.run_dir_errors(uid) -> [message] for run directories others control
  [(path, real path, stat)] | llmtrain.slurm.fetch_refusals(real run dir, max bytes) -> {path: why not fetched}
  log text | llmtrain.slurm.log_metrics(patterns) -> metrics JSONL from your script's progress lines
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.llmtrain.slurm.plugins.module_utils import log_progress, node_check

display = Display()


def env_file_values(text):
    """The `export NAME=value` lines of an env file, read back as the shell would."""
    return node_check.env_file_values(text)


def run_dir_errors(paths_and_stats, uid):
    """paths_and_stats: (path, the stat module's result for it) pairs; uid: the user running the
    stages. A directory that exists must be a directory the user owns that neither group nor
    others can write: the job runs code from it and sources the secrets there."""
    errors = []
    for path, stat in paths_and_stats:
        if not stat.get("exists"):
            continue
        if not stat.get("isdir"):
            errors.append("%s is in the way of the run directory: it exists and is not a directory. Remove it, or "
                          "choose another pretrain_run_name." % path)
        elif int(stat.get("uid", -1)) != int(uid):
            errors.append("%s belongs to %s (uid %s), not to you (uid %s): the job would run the code and source the "
                          "environment files that its owner puts there. Choose another pretrain_run_name, or "
                          "slurm_workspace, or have it removed."
                          % (path, stat.get("pw_name") or "another user", stat.get("uid"), uid))
        elif stat.get("wgrp") or stat.get("woth"):
            errors.append("%s is writable by %s (mode %s): anyone who can write there runs code as you, with your "
                          "secrets loaded. Run `chmod go-w %s` if nobody else has written there, or remove it."
                          % (path, "group and others" if stat.get("wgrp") and stat.get("woth") else
                             "its group" if stat.get("wgrp") else "others", stat.get("mode"), path))
    return errors


def fetch_refusals(files, real_run_dir, max_bytes):
    """files: (path, its real path, the stat module's result) triples. A file whose real path
    leaves the run directory (a planted link) or that is larger than max_bytes is not fetched."""
    refused = {}
    inside = real_run_dir.rstrip("/") + "/"
    for path, real, stat in files:
        if not real.startswith(inside):
            refused[path] = "%s is not fetched: it leads to %s, outside the run directory %s." % (path, real, real_run_dir)
        elif stat.get("exists") and stat.get("size", 0) > max_bytes:
            refused[path] = ("%s is not fetched: it has %.0f MiB, more than pretrain_fetch_max_mb=%d; it stays in the "
                             "run directory." % (path, stat["size"] / 1048576.0, max_bytes // 1048576))
    return refused


def log_metrics(text, patterns=None):
    """The metrics file (JSON lines) of a job's log: one record per progress line. A pattern
    that backtracks past its CPU time is warned about, and the records of the others kept."""
    try:
        compiled = log_progress.compile_patterns(patterns or log_progress.DEFAULT_PATTERNS)
    except ValueError as err:
        raise AnsibleFilterError(str(err))
    records, warnings = log_progress.records(str(text or "").splitlines(), compiled)
    for message in warnings.values():
        display.warning(message)
    return "".join(json.dumps(dict(r, source="log"), sort_keys=True) + "\n" for r in records)


class FilterModule(object):
    def filters(self):
        return {"env_file_values": env_file_values, "run_dir_errors": run_dir_errors, "fetch_refusals": fetch_refusals,
                "log_metrics": log_metrics}
