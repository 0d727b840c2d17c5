# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A training run's metrics file (JSONL, one object a line) and the progress it shows."""

from __future__ import annotations

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.job_log import tail_lines


def last_json_records(path, count=16):
    """The complete JSON objects among the last `count` lines of a JSONL file, in file order
    (a half-written last line is skipped)."""
    records = []
    for line in tail_lines(path, count):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


METRIC_KEYS = ("step", "total_steps", "loss", "val_loss", "lr", "tokens_per_s", "elapsed_s", "eta_s")


def progress_of(records):
    """Progress from the tail of a metrics file: the metrics of the last loss record, and the
    last record's `event` (e.g. checkpoint, preempted, done) with its step."""
    if not records:
        return None
    metrics = next((r for r in reversed(records) if "loss" in r), records[-1])
    progress = {k: metrics.get(k) for k in METRIC_KEYS}
    if progress["step"] is not None and progress["total_steps"]:
        progress["percent"] = round(100.0 * progress["step"] / progress["total_steps"], 1)
    progress["event"] = records[-1].get("event")
    progress["event_step"] = records[-1].get("step")
    return progress
