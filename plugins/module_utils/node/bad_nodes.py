# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's bad_nodes.json: the nodes its checks found bad and why, which later jobs keep off.

One place adds to it (the node check, the network check and the hang watch each merge theirs in)
and bounds its reading (BAD_NODES_MAX_BYTES; exclusion.py reads it for the watch, the stages and
status). Each entry: {node: {reason, job_id, time}}. The file is replaced atomically; one that
cannot be read as such an object is kept beside it (<file>.unreadable) and said, never lost to
the next write."""

from __future__ import annotations

import json
import os
import sys

from . import untrusted
from .atomic import replace_file

BAD_NODES_MAX_BYTES = 16 * 1048576


def record(path, reasons, job_id, time):
    """Add {node: reason} to the file at path, as found by job job_id at time (ISO text)."""
    try:
        known = untrusted.read(path, BAD_NODES_MAX_BYTES)
        problem = None if isinstance(known, dict) else "not a JSON object"
    except FileNotFoundError:
        known, problem = {}, None
    except (OSError, ValueError) as error:  # untrusted.Unreadable is a ValueError
        known, problem = None, getattr(error, "strerror", None) or str(error)
    if problem:
        aside = path + ".unreadable"
        try:
            os.replace(path, aside)
            kept = "kept as " + aside
        except OSError as error:
            kept = "could not be kept (%s)" % error.strerror
        sys.stderr.write("llmtrain: %s cannot be read (%s) and %s; the new one holds the nodes found now\n"
                         % (path, untrusted.printable(problem), kept))
        known = {}
    for node, reason in reasons.items():
        known[node] = dict(reason=reason, job_id=job_id, time=time)
    replace_file(path, (json.dumps(known, indent=1, sort_keys=True) + "\n").encode("utf-8"))
