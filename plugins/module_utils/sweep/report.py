# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sweep compared: members.json (each member's values, run name, state, job and progress),
sweep.md (a table of the values that differ between members with each one's state, step and loss,
the best finished member named, and where the members differ in size, the scaling law fitted to them:
fit.py) and sweep.png (every member's loss curve, and the law against the sizes), made on the
controller from what the sweep module returns. Everything a member's files gave is typed already
(progress: metrics.METRIC_FIELDS, the history: the module's HISTORY_FIELDS); a value shown in the
table is printable text."""

from __future__ import annotations

import json
import math
import statistics

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import fit

STATE_ORDER = ("done", "running", "pending", "stopped", "failed", "new", "changed")
# the members the watch's line names as recovered (requeued, on a new start); the others are counted
RECOVERIES_NAMED = 3
# where a member's losses came from (the sweep module's history: source), as sweep.md names it
SOURCES = (("metrics", "its metrics file"), ("events", "TensorBoard event files"), ("csv", "Lightning's metrics.csv"),
           ("log", "its log lines"))


def _text(value):
    return printable(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def _finite(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def _loss(member):
    """The member's last loss: its history's where the comparison read it, else its progress's."""
    return _finite(member.get("final_loss")) if "final_loss" in member else _finite((member.get("progress") or {}).get("loss"))


def _number(value, fmt="%.4g"):
    return "" if _finite(value) is None else fmt % value


def _hours(value):
    """Hours as the table shows them: 2 decimals, a short member's under 0.01 said so."""
    if _finite(value) is None:
        return ""
    return "< 0.01" if 0 < value < 0.005 else "%.2f" % value


def _count(value):
    """1234567 -> 1.23M."""
    if _finite(value) is None:
        return ""
    for size, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return "%.3g%s" % (value / size, unit)
    return "%d" % value


def with_compute(members):
    """Each member with its training compute C = 6 N D (N its parameters, D the tokens it saw), where known."""
    for member in members:
        if _finite(member.get("params")) and _finite(member.get("tokens")):
            member["compute"] = 6.0 * member["params"] * member["tokens"]
    return members


def laws(members, predict_at=None):
    """{'params': {law, points, predict_at, predicted}, 'compute': ...}: the law over the best finished
    member of each size, where the members differ in size (at least three sizes); the prediction at
    predict_at parameters (by default ten times the largest size)."""
    out = {}
    for key in ("params", "compute"):
        best_of = fit.best_per_size(members, key)
        law = fit.fit([(size, member["final_loss"]) for size, member in best_of.items()]) if len(best_of) >= 3 else None
        if law is None:
            continue
        at = (predict_at if key == "params" and predict_at else 10 * max(best_of))
        out[key] = dict(law=law, points=sorted((size, member["final_loss"], member["name"]) for size, member in best_of.items()),
                        predict_at=at, predicted=fit.predict(law, at))
    return out


def law_lines(name, found):
    """The scaling law section of sweep.md."""
    if not found:
        return []
    lines = ["## Scaling law", ""]
    for key, what, symbol in (("params", "parameters", "N"), ("compute", "training compute (6 N D)", "C")):
        if key not in found:
            continue
        law, points = found[key]["law"], found[key]["points"]
        error = " ± %.3g" % law["alpha_err"] if law["alpha_err"] is not None else ""
        formula = "    L(%s) = %.4g + %.4g * %s^-%.4g  (alpha = %.4g%s)" % (
            symbol, law["E"], law["A"], symbol, law["alpha"], law["alpha"], error)
        lines += ["Against %s, over %d sizes (the best finished member of each):" % (what, law["sizes"]), "",
                  formula, "",
                  "| %s | member | loss | law |" % symbol, "|---|---|---|---|"]
        lines += ["| %s | %s | %.4g | %.4g |" % (_count(size), member, loss, fit.predict(law, size)) for size, loss, member in points]
        lines += ["", "Predicted loss at %s = %s: %.4g." % (symbol, _count(found[key]["predict_at"]), found[key]["predicted"])]
        if law["why"]:
            lines += ["", "**Not to be trusted:** " + "; ".join(law["why"]) + "."]
        lines.append("")
    return lines


def best(members):
    """The finished member with the lowest last loss, or None."""
    done = [m for m in members if m.get("state") == "done" and _loss(m) is not None]
    return min(done, key=_loss) if done else None


def _duration(seconds):
    """3725 -> 1h 02m."""
    minutes = int(round(seconds / 60.0))
    return "%dh %02dm" % divmod(minutes, 60) if minutes >= 60 else "%dm" % max(1, minutes)


def eta(members, parallel=0):
    """Seconds until the sweep ends, estimated, or None: the longest ETA of the running members, and
    for the members still to start (pending, new, changed), as many rounds of as many members at once
    as run now (or sweep_parallel) as there are, each as long as a running member's whole training
    (the median, from its steps and ETA). None where a running member says no ETA, or none runs."""
    running = [m.get("progress") or {} for m in members if m.get("state") == "running"]
    etas = [_finite(p.get("eta_s")) for p in running]
    if not running or None in etas:
        return None
    whole = [p["eta_s"] * p["total_steps"] / (p["total_steps"] - p["step"]) for p in running
             if _finite(p.get("total_steps")) and _finite(p.get("step")) is not None and p["total_steps"] > p["step"]]
    waiting = sum(1 for m in members if m.get("state") in ("pending", "new", "changed"))
    if waiting and not whole:
        return None
    rounds = -(-waiting // (parallel if parallel > 0 else len(running)))
    return max(etas) + rounds * (statistics.median(whole) if waiting else 0)


def counts_line(name, members, parallel=0):
    """One line for the whole sweep: members in each state, the best loss so far (any state), the
    sweep's ETA where one can be estimated, and the members that recovered (requeued, or on a later start)."""
    counts = dict((state, sum(1 for m in members if m.get("state") == state)) for state in STATE_ORDER)
    line = "sweep %s: %d members, %s" % (name, len(members), ", ".join(
        "%d %s" % (counts[state], state) for state in STATE_ORDER if counts[state]))
    scored = [m for m in members if _loss(m) is not None]
    if scored:
        lead = min(scored, key=_loss)
        line += "; lowest loss %.4g (%s, step %s)" % (_loss(lead), lead["name"], (lead.get("progress") or {}).get("step"))
    left = eta(members, parallel)
    if left is not None:
        line += "; ETA about %s" % _duration(left)
    recovering = [m for m in members if m.get("recovered")]
    if recovering:
        line += "; recovered: %s%s" % ("; ".join("%s (%s)" % (m["name"], printable(m["recovered"])) for m in recovering[:RECOVERIES_NAMED]),
                                       " and %d more" % (len(recovering) - RECOVERIES_NAMED) if len(recovering) > RECOVERIES_NAMED else "")
    return line


def markdown(name, members, found_laws=None):
    """sweep.md: the members in a table of the keys they were given, their state, last step and loss
    (with their history: best and validation loss, parameters, tokens), then the scaling law."""
    keys = sorted(set(key for m in members for key in (m.get("values") or {})))
    history = any("final_loss" in m for m in members)
    lines = ["# Sweep %s" % printable(name), "", counts_line(name, members) + ".", ""]
    lead = best(members)
    if lead:
        lines += ["Best finished member: **%s** (loss %.4g). As a Hugging Face model, evaluated: "
                  "`ansible-playbook playbooks/export.yml -e run_name=%s`." % (lead["name"], _loss(lead), lead["name"]), ""]
    if history:
        lines += ["![loss curves](sweep.png)", ""]
    more = ["best loss", "val loss", "params", "tokens", "hours", "GPU-hours"] if history else []
    lines += ["| member | " + " | ".join([printable(k) for k in keys] + ["state", "step", "loss"] + more) + " |",
              "|---" * (len(keys) + 4 + len(more)) + "|"]
    for member in members:
        progress = member.get("progress") or {}
        values = member.get("values") or {}
        cells = [member["name"]] + [_text(values[k]) if k in values else "" for k in keys] + [
            member.get("state"), "" if progress.get("step") is None else progress["step"], _number(_loss(member))]
        if history:
            cells += [_number(member.get("best_loss")), _number(member.get("val_loss")), _count(member.get("params")),
                      _count(member.get("tokens")), _hours(member.get("hours")), _hours(member.get("gpu_hours"))]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    if history:
        lines += [""] + source_lines(members)
    unread = [m for m in members if m.get("unreadable") or m.get("truncated")]
    if unread:
        lines += [""] + ["%s: %s of its metrics file could not be read%s." % (
            m["name"], "%d line(s)" % m["unreadable"] if m.get("unreadable") else "none",
            "; it was read up to 64 MiB" if m.get("truncated") else "") for m in unread]
    lines += [""] + law_lines(name, found_laws or {})
    if history and len(set(m.get("params") for m in members if m.get("params"))) >= 2 and not found_laws:
        sizes = len(set(m["params"] for m in members if m.get("params") and m.get("state") == "done"))
        lines += ["No scaling law yet: the members differ in size, %d size(s) finished, and the law takes at least three."
                  % sizes, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def source_lines(members):
    """Where the members' losses came from, and the members that have none yet."""
    named = dict(SOURCES)
    counts = [(what, sum(1 for m in members if m.get("source") == key)) for key, what in SOURCES]
    lines = ["Losses from: " + ", ".join("%s (%d)" % (what, count) for what, count in counts if count) + "."] \
        if any(count for _what, count in counts) else []
    none = [m["name"] for m in members if m.get("source") not in named]
    if none:
        lines.append("No loss yet from %d member(s): %s%s (your script: write LLMTRAIN_METRICS_FILE, TensorBoard event "
                     "files, or set pretrain_progress_regex to its progress lines)."
                     % (len(none), ", ".join(none[:10]), ", ..." if len(none) > 10 else ""))
    return lines


def plot(name, members, found_laws, path):
    """sweep.png: every member's loss curve; beside it, where a law was fitted, the members' final
    losses against their parameters on log axes with the law and its prediction."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.run_report import atomic_write

    law = (found_laws or {}).get("params")
    figure, axes = plt.subplots(1, 2 if law else 1, figsize=(13 if law else 8, 4.5), dpi=100, squeeze=False)
    curves = axes[0][0]
    shown = [m for m in members if m.get("curve")]
    for member in shown:
        line, = curves.plot([p[0] for p in member["curve"]], [p[1] for p in member["curve"]], linewidth=1.2,
                            label=member["name"].replace("$", "\\$") if len(shown) <= 12 else None)
        if member.get("val_curve"):  # its validation loss, dashed in its colour
            curves.plot([p[0] for p in member["val_curve"]], [p[1] for p in member["val_curve"]], "--", linewidth=1.0,
                        color=line.get_color())
    curves.set_xlabel("step")
    curves.set_ylabel("loss (validation dashed)" if any(m.get("val_curve") for m in shown) else "loss")
    curves.set_title("Sweep %s: %d members" % (name.replace("$", "\\$"), len(members)))
    curves.grid(True, alpha=0.3)
    if 0 < len(shown) <= 12:
        curves.legend(loc="upper right", fontsize="small")
    if law:
        sizes = [p[0] for p in law["points"]]
        panel = axes[0][1]
        panel.loglog(sizes, [p[1] for p in law["points"]], "o", color="tab:blue", label="best member of each size")
        low, high = min(sizes), max([law["predict_at"]] + sizes)
        xs = [low * (high / low) ** (k / 99.0) for k in range(100)]
        fitted = law["law"]
        panel.loglog(xs, [fit.predict(fitted, x) for x in xs], "-", color="tab:orange",
                     label="E + A N^-alpha, alpha %.3g" % fitted["alpha"])
        panel.loglog([law["predict_at"]], [law["predicted"]], "x", color="tab:red", markersize=9, label="predicted")
        panel.set_xlabel("parameters N")
        panel.set_ylabel("final loss")
        panel.set_title("Scaling law" + ("" if fitted["trusted"] else " (not to be trusted)"))
        panel.grid(True, which="both", alpha=0.3)
        panel.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    try:
        atomic_write(path, lambda temp: figure.savefig(temp, format="png", metadata={"Software": None}))
    finally:
        plt.close(figure)
