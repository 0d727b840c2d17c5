# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node check's and the network check's records as a watcher returns them each poll: the
verdict and its figures, the nodes found bad or slow with their reasons, and the per-node
table while it is short. A record holds a line and a record per node (megabytes at thousands
of nodes); the whole stays in its file, which the summary names."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import COUNT, JOB, LIST, NUMBER, TEXT, field, fields

# A table of up to this many nodes is returned whole; above, the lines of the nodes found bad
# or slow, and one line that counts the others and names the file.
TABLE_NODES = 32
# Bad or slow nodes named (with their reasons and table lines); the others are counted.
NAMED_NODES = 32
# A text that names every node (the slow fabric's) is cut to this length.
MAX_TEXT_CHARS = 2000

# the fields of either record, of the types they must have (a job wrote the file): others are None
HEAD_FIELDS = dict(job_id=JOB, restart=COUNT, time=TEXT)
NETWORK_FIELDS = dict(backend=TEXT, ranks=COUNT, verdict=TEXT, busbw=NUMBER, latency_us=NUMBER, limit=NUMBER,
                      fraction=NUMBER, min_fraction=NUMBER, seconds=NUMBER)
NETWORK_FIGURES = tuple(NETWORK_FIELDS)


def _head(record):
    typed = fields(record, HEAD_FIELDS)
    return dict((key, typed.get(key)) for key in HEAD_FIELDS)


def _checked(record):
    nodes, table = record.get("nodes"), record.get("table")
    if isinstance(nodes, list):
        return len(nodes)
    return max(0, len(table) - 1) if isinstance(table, list) else 0


def _named(found):
    found = found if isinstance(found, dict) else {}
    return dict((node, str(found[node])) for node in sorted(found)[:NAMED_NODES])


def _table(record, checked, named, flagged, path, what):
    """The table whole while short; else its heading, the lines of the named nodes, and a line
    that counts the rest and says where every line is."""
    table = [str(line) for line in field(record.get("table"), LIST) or []]
    if checked <= TABLE_NODES:
        return table
    lines = table[:1] + [line for line in table[1:] if line.split(" ", 1)[0] in named]
    more = flagged - len(named)
    lines.append("(%d other node(s) %s%s; every node's line is in %s)"
                 % (checked - flagged, what, ", %d more not shown" % more if more > 0 else "", path))
    return lines


def _cut(text):
    if not isinstance(text, str) or len(text) <= MAX_TEXT_CHARS:
        return text
    return text[:MAX_TEXT_CHARS] + " [...]"


def node_check_summary(record, path):
    """node_check.json (job_id, restart, time, bad {node: reason}, table, nodes [records]) ->
    dict(job_id, restart, time, file, checked, bad_count, bad (at most NAMED_NODES), table)."""
    checked, bad = _checked(record), record.get("bad") if isinstance(record.get("bad"), dict) else {}
    named = _named(bad)
    return dict(_head(record), file=path, checked=checked, bad_count=len(bad), bad=named,
                table=_table(record, checked, named, len(bad), path, "passed"))


def network_check_summary(record, path):
    """The network check's record -> its figures (NETWORK_FIGURES), job_id, restart, time, file,
    checked, slow_count, slow (at most NAMED_NODES), slow_fabric (cut to MAX_TEXT_CHARS), table."""
    checked, slow = _checked(record), record.get("slow") if isinstance(record.get("slow"), dict) else {}
    named = _named(slow)
    figures = fields(record, NETWORK_FIELDS)
    summary = dict((key, figures.get(key)) for key in NETWORK_FIGURES)
    summary.update(_head(record), file=path, checked=checked, slow_count=len(slow), slow=named,
                   slow_fabric=_cut(field(record.get("slow_fabric"), TEXT)),
                   table=_table(record, checked, named, len(slow), path, "ok"))
    return summary
