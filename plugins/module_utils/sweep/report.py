# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sweep compared: members.json (each member's values, run name, state, job and progress) and
sweep.md (a table of the values that differ between members with each one's state, step and loss,
and the best finished member named), made on the controller from what the sweep module returns.
Everything a member's files gave is typed already (progress: metrics.METRIC_FIELDS); a value shown
in the table is printable text."""

from __future__ import annotations

import json
import math

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable

STATE_ORDER = ("done", "running", "pending", "failed", "new")


def _text(value):
    return printable(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def _loss(member):
    loss = (member.get("progress") or {}).get("loss")
    return loss if isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss) else None


def best(members):
    """The finished member with the lowest last loss, or None."""
    done = [m for m in members if m.get("state") == "done" and _loss(m) is not None]
    return min(done, key=_loss) if done else None


def counts_line(name, members):
    """One line for the whole sweep: members in each state and the best loss so far (any state)."""
    counts = dict((state, sum(1 for m in members if m.get("state") == state)) for state in STATE_ORDER)
    line = "sweep %s: %d members, %s" % (name, len(members), ", ".join(
        "%d %s" % (counts[state], state) for state in STATE_ORDER if counts[state]))
    scored = [m for m in members if _loss(m) is not None]
    if scored:
        lead = min(scored, key=_loss)
        line += "; lowest loss %.4g (%s, step %s)" % (_loss(lead), lead["name"], (lead.get("progress") or {}).get("step"))
    return line


def markdown(name, members):
    """sweep.md: the members in a table of the keys they were given, their state, last step and loss."""
    keys = sorted(set(key for m in members for key in (m.get("values") or {})))
    lines = ["# Sweep %s" % printable(name), "", counts_line(name, members) + ".", ""]
    lead = best(members)
    if lead:
        lines += ["Best finished member: **%s** (loss %.4g)." % (lead["name"], _loss(lead)), ""]
    lines += ["| member | " + " | ".join(printable(k) for k in keys) + " | state | step | loss |",
              "|---" * (len(keys) + 4) + "|"]
    for member in members:
        progress = member.get("progress") or {}
        loss = _loss(member)
        values = member.get("values") or {}
        lines.append("| %s | %s | %s | %s | %s |" % (
            member["name"], " | ".join(_text(values[k]) if k in values else "" for k in keys), member.get("state"),
            "" if progress.get("step") is None else progress["step"], "" if loss is None else "%.4g" % loss))
    return "\n".join(lines) + "\n"
