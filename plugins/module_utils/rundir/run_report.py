# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Report of one training run, written on the controller from what was fetched: write_report(),
which the action llmtrain.slurm.run_report calls (the run role's report step).

Reads RUN/metrics.jsonl (the trainer's records), RUN/node_times.json (each node's step times
over the run, the reference trainer's), RUN/starts.jsonl (the nodes of each start of its jobs),
RUN/hangs/*/summary.json (the hang watch's verdicts), RUN/samples.txt (generated text), RUN/model.json
(the export and its held-out loss), RUN/summary.json (the last batch's figures) and a facts JSON file
written by the playbook (default RUN/facts.json); writes RUN/loss.png and RUN/report.md, and
RUN/nodes.md when the run has more nodes than the report's step-time table shows (the names of the
run directory's files are node/run_files.py's, those that only the controller's copy has are here).
Whatever is missing is reported as missing: a failed run still gets a report of what exists. The same
inputs give the same report (it holds no time of its own). A week of records (600,000 lines)
is read in seconds and a few hundred MB: of each loss record only the fields the report shows
are kept, and the per-node maps of a script's own records are summed as they are read.

Facts (every key optional): plugins/module_utils/rundir/run_facts.py defines them (FIELDS) and makes them;
the collect step writes them.

Every value from those files is untrusted text (a training script may write any record, and
many facts come from files jobs wrote on the cluster): each file is read as the collection reads
whatever a job wrote (plugins/module_utils/node/untrusted.py: bounded in size and depth, integers
within 64 bits), and a value reaches report.md only through md() (escaped inline text, or a
number) or fenced() (a code block it cannot close).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import statistics
import string
import sys
import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_with
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.hang import SHOWN_NODES
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.metrics import records_from_start
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.stragglers import add_record, node_times_table, totals_table

# the action's options, and the module's that documents them (plugins/modules/run_report.py)
ARGUMENT_SPEC = dict(run_dir=dict(type="path", required=True), facts=dict(type="path"))
# what only the controller's runs/<run>/ holds
MODEL_FILE = "model.json"  # the inference stage's: the Hugging Face export and its held-out loss
NODES_FILE = "nodes.md"
PLOT_FILE = "loss.png"
REPORT_FILE = "report.md"

NOT_RECORDED = "not recorded"
DEFAULT_STRAGGLER_THRESHOLD = 0.2
# What of a loss record the report shows: the rest (per-node times, a script's own fields) is not kept,
# so a week of records fits in a few hundred MB.
LOSS_FIELDS = ("step", "loss", "val_loss", "total_steps", "tokens_seen", "tokens_per_s", "mfu", "elapsed_s")
# Up to this many nodes the report lists each; beyond, the slow ones and a summary (all in nodes.md).
NODE_ROWS_SHOWN = 32
# node_times.json and facts.json: O(nodes), a few hundred KB at thousands of nodes
FILE_MAX_BYTES = 64 * 1048576


def read_metrics(path, threshold):
    """metrics.jsonl -> (loss records sorted by step, one per step, with their LOSS_FIELDS; events in
    file order; lines that are not JSON objects; stragglers.add_record's totals of the loss records'
    full `nodes` maps, at threshold). None when the file does not exist. The totals count every
    loss record that names the nodes, those of a step run again after a resume too: each measured
    the nodes' work."""
    if not os.path.exists(path):
        return None
    by_step, events, unreadable, totals = {}, [], 0, {}
    # each line read in pieces of at most a record's bound: a line longer is counted, never held whole
    # (the file itself is as large as the collect step fetched, pretrain_fetch_max_mb)
    for record in records_from_start(path, os.path.getsize(path) + 1, {}):
        if not isinstance(record, dict):
            unreadable += 1
        elif "event" in record:
            events.append(record)
        elif isinstance(record.get("step"), int) and is_number(record.get("loss")):
            add_record(totals, record, threshold)
            # a later record of a step replaces an earlier one
            by_step[record["step"]] = {key: record[key] for key in LOSS_FIELDS if key in record}
        else:
            unreadable += 1
    return [by_step[step] for step in sorted(by_step)], events, unreadable, totals


def read_node_times(path, warnings):
    """node_times.json -> (its content or None, why it could not be read or None); warnings gets why."""
    if not os.path.exists(path):
        return None, None
    try:
        return untrusted.read(path, FILE_MAX_BYTES), None
    except ValueError as error:
        warnings.append("%s cannot be read (%s); the report's step times per node come from the metrics" % (path, error))
        return None, str(error)


def read_facts(path, warnings):
    """A JSON object of the run (facts.json, model.json, summary.json), {} when there is none; warnings
    gets why one that is there is not read."""
    if not path or not os.path.exists(path):
        return {}
    try:
        facts = untrusted.read(path, FILE_MAX_BYTES, nonfinite=True)  # the report shows an infinity as such
    except ValueError as error:
        warnings.append("%s cannot be read (%s); the report leaves its sections as not recorded" % (path, error))
        return {}
    if not isinstance(facts, dict):
        warnings.append("%s holds no JSON object; the report leaves its sections as not recorded" % path)
        return {}
    return facts


def read_text(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def atomic_write(path, write):
    """write(temp_path) then rename over path, so a reader never sees half a file."""
    replace_with(path, write, 0o644, prefix="." + os.path.basename(path) + ".")


# ---------------------------------------------------------------- formatting

def fmt_loss(value):
    return "%.4f" % value


def is_finite(value):
    return is_number(value) and math.isfinite(value)


def fmt_int(value):
    if not is_number(value):
        return NOT_RECORDED
    return "{:,}".format(int(value)) if math.isfinite(value) else str(value)  # int() of inf or nan raises


def fmt_duration(seconds):
    if not is_finite(seconds):
        return NOT_RECORDED if not is_number(seconds) else str(seconds)
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh %02dm %02ds" % (hours, minutes, secs)
    if minutes:
        return "%dm %02ds" % (minutes, secs)
    return "%ds" % secs


def text(value):
    """A fact as table or line text: missing values say so."""
    if value is None or value == "":
        return NOT_RECORDED
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value) or NOT_RECORDED
    return str(value)


# What md() does to each character of untrusted text. Every value sits after literal text on its line
# (a prefix such as "- Partition: ", "| " or "# Run ") and can hold no line break, so it never starts a
# line: the block syntax of CommonMark and GFM (headings, lists, quotes, fences, HTML blocks, thematic
# breaks, setext underlines, link reference definitions, indented code, table delimiter rows), which only
# a line's start can open, is out of its reach, and md() has only inline syntax to neutralise:
LINE_BREAKS = frozenset("\r\n\x0b\x0c\x85\u2028\u2029")  # -> a space
# bidirectional controls reorder how the text around them is shown: dropped, with the C0/C1 controls
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
HTML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}  # raw HTML, autolinks, entity references
# backslash-escaped (CommonMark lets any ASCII punctuation be): escapes, code spans, emphasis, links and
# images, GFM table cells and strikethrough, and what other renderers read (GitHub's $ math, {attributes},
# ^superscript, # references). The ASCII punctuation left alone, - . / : , ; = @ % ' " ? ( ), opens no inline
# construct: ( ) ' " act only inside a link, which needs a "]" (every "]" is escaped); - . ) = : only at a
# line's start; at most GFM's extended autolinks (www., http://, a@b.c) show their own target as their text.
MARKDOWN_ESCAPED = frozenset("\\`*_[]{}!#+|~$^")
ALNUM = frozenset(string.ascii_letters + string.digits)


def is_control(char):
    code = ord(char)
    return (code < 0x20 and char != "\t") or 0x7f <= code <= 0x9f or char in BIDI_CONTROLS


def md(value):
    """Untrusted text as inline Markdown that shows it as is, on one line: a number (not a bool) as
    itself, anything else as text() with line breaks made spaces, control characters dropped, < > &
    as entities and the Markdown punctuation backslash-escaped. A single _ between two ASCII letters or
    digits stays (step_100.pt, NCCL_IB_HCA): such a _ is both left- and right-flanking and preceded and
    followed by no punctuation, so CommonMark lets it neither open nor close emphasis."""
    if is_number(value):
        return str(value)  # digits, . - + e, inf, nan: nothing that Markdown reads
    raw = text(value)
    out = []
    for index, char in enumerate(raw):
        if char in LINE_BREAKS:
            out.append(" ")
        elif is_control(char):
            continue
        elif char in HTML_ENTITIES:
            out.append(HTML_ENTITIES[char])
        elif char == "_" and 0 < index < len(raw) - 1 and raw[index - 1] in ALNUM and raw[index + 1] in ALNUM:
            out.append(char)
        elif char in MARKDOWN_ESCAPED:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def table(header, rows):
    """header (the report's own words) and rows of values, each cell through md(): no cell can hold an
    unescaped | or a line break, so none can break its row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _column in header) + "|"]
    lines += ["| " + " | ".join(md(value) for value in row) + " |" for row in rows]
    return lines


def fenced(body):
    """body in a fence longer than any backtick run inside it, so it is shown as is. A backtick fence is
    closed only by a line of at least as many backticks (not by tildes, and indenting does not help), so no
    line of the body can close it; line endings become \\n, other control characters (NUL...) are dropped."""
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    body = "".join(char for char in body if char == "\n" or not is_control(char))
    longest, run = 0, 0
    for char in body:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return [fence, body.rstrip("\n"), fence]


# ---------------------------------------------------------------- content

def summarize(losses, events):
    """The summary's figures, from the loss records and events."""
    last = losses[-1]
    done = [e for e in events if e.get("event") == "done"]
    starts = [e for e in events if e.get("event") in ("start", "resume")]
    total = last.get("total_steps")
    if not is_number(total):
        total = next((e["total_steps"] for e in reversed(starts) if is_number(e.get("total_steps"))), None)
    steps_done = max([last["step"]] + [e["step"] for e in done if is_number(e.get("step"))])
    vals = [(r["step"], r["val_loss"]) for r in losses if is_number(r.get("val_loss"))]
    rates = [r["tokens_per_s"] for r in losses if is_number(r.get("tokens_per_s"))]
    mfus = [r["mfu"] for r in losses if is_number(r.get("mfu"))]
    end = done[-1] if done else last
    return {
        "first": losses[0],
        "last": last,
        # the reference trainer says so; a script of your own's last record is at its total
        "finished": bool(done) or (is_number(total) and steps_done >= total),
        "steps_done": steps_done,
        "total_steps": total,
        "tokens_seen": end.get("tokens_seen", last.get("tokens_seen")),
        "elapsed_s": end.get("elapsed_s", last.get("elapsed_s")),
        "best_val": min(vals, key=lambda sv: (sv[1], sv[0])) if vals else None,
        "final_val": vals[-1] if vals else None,
        "median_tokens_per_s": statistics.median(rates) if rates else None,
        "median_mfu": statistics.median(mfus) if mfus else None,
    }


# where the loss records came from (facts' progress.source, the collect step's)
SOURCES = {
    "metrics": "the metrics file the trainer wrote (LLMTRAIN_METRICS_FILE)",
    "events": "your script's TensorBoard event files",
    "csv": "your script's Lightning `metrics.csv`",
    "log": "your script's progress lines in its job log",
}


def source_line(facts):
    """The line that says where the loss records came from, or None when the facts do not say."""
    progress = facts.get("progress") if isinstance(facts.get("progress"), dict) else {}
    source = progress.get("source")
    if source not in SOURCES:
        return None
    line = "- Loss records from: %s" % SOURCES[source]
    if source in ("events", "csv"):
        files = progress.get("files") if isinstance(progress.get("files"), list) else []
        shown, left = some([f for f in files if isinstance(f, str)], 4)
        line += ", %s %s, in %s%s" % ("tag" if source == "events" else "column", md(progress.get("tag")),
                                      ", ".join(md(f) for f in shown), "" if not left else " and %d more" % left)
        if is_number(progress.get("unreadable")) and progress["unreadable"] > 0:
            line += " (%s record(s) did not check and were skipped)" % fmt_int(progress["unreadable"])
    return line


def known_steps(facts):
    """(what shows that training took steps though no loss record was found: [text], the newest
    checkpoint's step or None)."""
    known, step = [], None
    script = facts.get("script") if isinstance(facts.get("script"), dict) else None
    if script is not None:
        names = script.get("checkpoints") if isinstance(script.get("checkpoints"), list) else []
        checkpoints, _other = trainer_checkpoints(names)
        stepped = [c for c in checkpoints if c[0] is not None]
        if stepped:
            step = stepped[-1][0]
            known.append("the newest checkpoint, %s, is of step %d" % (md(stepped[-1][1]), step))
        elif checkpoints:
            known.append("your script left the checkpoint %s" % md(checkpoints[-1][1]))
    elif isinstance(facts.get("checkpoint"), dict) and is_number(facts["checkpoint"].get("step")):
        step = facts["checkpoint"]["step"]
        known.append("the newest checkpoint is of step %s" % md(step))
    job = completed_job(facts)
    if job is not None:
        known.append("training job %s COMPLETED" % md(job.get("job_id")))
    return known, step


def completed_job(facts):
    """The run's last job when it COMPLETED (the script ended by itself, exit code 0), else None."""
    jobs = [j for j in facts.get("jobs") or [] if isinstance(j, dict)] if isinstance(facts.get("jobs"), list) else []
    return jobs[-1] if jobs and jobs[-1].get("state") == "COMPLETED" else None


def no_loss_lines(metrics, facts):
    """What the summary says when no loss record was found: what is known of the steps taken, and
    where to point the collection; "did not reach its first logged step" only when nothing says it did."""
    progress = facts.get("progress") if isinstance(facts.get("progress"), dict) else {}
    known, _step = known_steps(facts)
    if metrics is None:
        found = "No metrics: `%s` was not fetched" % run_files.METRICS
    else:
        found = "No loss records in `%s`" % run_files.METRICS
    if not known:
        return ["%s: training did not reach its first logged step (see the jobs and their logs)." % found]
    lines = ["%s, yet training took steps: %s." % (found, "; ".join(known))]
    if isinstance(facts.get("script"), dict):
        tags = [t for t in progress.get("tags") or [] if isinstance(t, str)] if isinstance(progress.get("tags"), list) else []
        if tags:
            where = ("Its TensorBoard event files hold the scalars %s, none of which is a loss tag known here: set "
                     "`pretrain_progress_tag` to your loss's." % ", ".join(md(t) for t in tags[:12]))
        elif is_number(progress.get("event_files")) and progress["event_files"] > 0:
            where = ("Event files were found but none could be fetched (see what was not fetched above); "
                     "`pretrain_progress_tag` names the loss's tag.")
        else:
            where = ("No TensorBoard event file was found where it runs or in the run directory, and no line of its "
                     "log matched: let your trainer write event files (docs/own-script.md says how, per trainer) "
                     "and set `pretrain_progress_tag` if its loss's tag is not a known one, or give "
                     "`pretrain_progress_regex` a pattern of its progress lines, or write LLMTRAIN_METRICS_FILE.")
        lines.append(where)
    return lines


def summary_lines(metrics, summary, events, facts=None):
    facts = facts or {}
    if metrics is None or summary is None:
        return no_loss_lines(metrics, facts)
    first, last = summary["first"], summary["last"]
    total = summary["total_steps"]
    # your script ended by itself with exit code 0: finished, though its last logged step may be the
    # total less one (Lightning counts from 0)
    completed = isinstance(facts.get("script"), dict) and completed_job(facts) is not None
    if summary["finished"] or completed:
        status = "finished"
    else:
        preempted = [e for e in events if e.get("event") == "preempted"]
        status = ("stopped before the end (last event: preempted at step %s)" % md(preempted[-1].get("step"))
                  if preempted and preempted[-1] is events[-1] else "stopped before the end")
    trend = "fell" if last["loss"] < first["loss"] else "went"
    # a loss record's step is an int and its loss a number (read_metrics keeps no other): %d and fmt_loss print digits
    lines = [line for line in [source_line(facts)] if line] + [
        "- Status: %s" % status,
        "- Steps: %s of %s" % (fmt_int(summary["steps_done"]), fmt_int(total)),
        "- Final train loss: %s (step %d)" % (fmt_loss(last["loss"]), last["step"]),
        "- Train loss %s from %s (step %d) to %s (step %d)" % (
            trend, fmt_loss(first["loss"]), first["step"], fmt_loss(last["loss"]), last["step"]),
    ]
    if summary["best_val"]:
        lines.append("- Best val loss: %s (step %d)" % (fmt_loss(summary["best_val"][1]), summary["best_val"][0]))
        lines.append("- Final val loss: %s (step %d)" % (fmt_loss(summary["final_val"][1]), summary["final_val"][0]))
    else:
        lines.append("- Val loss: %s" % NOT_RECORDED)
    lines.append("- Tokens seen: %s" % fmt_int(summary["tokens_seen"]))
    lines.append("- Training time: %s" % fmt_duration(summary["elapsed_s"]))
    rate = summary["median_tokens_per_s"]
    lines.append("- Median throughput: %s tokens/s" % fmt_int(round(rate) if is_finite(rate) else rate))
    if summary["median_mfu"] is not None:
        lines.append("- Median MFU: %.1f%%" % (100 * summary["median_mfu"]))
    for event in events:
        kind = event.get("event")
        if kind == "preempted":
            lines.append("- Preempted at step %s (%s)" % (md(event.get("step")), md(event.get("signal"))))
        elif kind == "resume":
            lines.append("- Resumed at step %s" % md(event.get("step")))
    return lines


def cluster_lines(facts, events):
    cluster = facts.get("cluster")
    start = next((e for e in events if e.get("event") in ("start", "resume")), {})
    if not isinstance(cluster, dict):
        lines = ["Cluster: %s." % NOT_RECORDED]
    else:
        nodes = cluster.get("nodes")
        nodes = nodes if isinstance(nodes, list) else ([nodes] if nodes else [])
        lines = [
            "- Partition: %s" % md(cluster.get("partition")),
            "- Slurm version: %s" % md(cluster.get("slurm_version")),
            # a job's thousands of names would be a line of noise: the first ones and the count
            "- Nodes: %s%s%s" % (md(nodes[:NODE_ROWS_SHOWN]), ", ..." if len(nodes) > NODE_ROWS_SHOWN else "",
                                 " (%d)" % len(nodes) if nodes else ""),
            "- GPUs per node: %s" % md(cluster.get("gpus_per_node")),
            "- Processes per node: %s" % md(cluster.get("procs_per_node")),
        ]
    if "workspace" in facts:
        lines.append("- Workspace: %s" % md(facts.get("workspace")))
    if start:
        lines.append("- World size: %s ranks on %s" % (md(start.get("world_size")), md(start.get("device"))))
    return lines


def model_lines(facts, events):
    model = facts.get("model")
    start = next((e for e in events if e.get("event") in ("start", "resume")), {})
    lines = []
    if isinstance(model, dict) and model:
        lines += ["- %s: %s" % (md(key), md(model[key])) for key in sorted(model)]
    else:
        lines.append("- Configuration: %s" % NOT_RECORDED)
    if is_number(start.get("params")):
        lines.append("- Parameters: %s" % fmt_int(start["params"]))
    if is_number(start.get("tokens_per_step")):
        lines.append("- Tokens per step: %s" % fmt_int(start["tokens_per_step"]))
    if start.get("tokenizer") and is_number(start.get("vocab_size")):
        lines.append("- Tokenizer: %s, vocabulary %s" % (md(start["tokenizer"]), fmt_int(start["vocab_size"])))
    return lines


def script_lines(facts):
    """Your training script as it ran: where, with what, from which source. Paths and arguments are
    escaped text, not code spans (a code span shows < and & as they are and cannot escape a |): the
    arguments as a shell would take them, each quoted where it needs to be."""
    script = facts.get("script") if isinstance(facts.get("script"), dict) else {}
    args = script.get("args") if isinstance(script.get("args"), list) else []
    lines = ["- Script: %s" % md(script.get("path")),
             "- Arguments: %s" % (md(" ".join(shlex.quote(str(a)) for a in args)) if args else "none"),
             "- Working directory: %s" % md(script.get("chdir"))]
    if script.get("source_dir"):
        lines.append("- Source: %s (%s file(s), sha1 %s)"
                     % (md(script["source_dir"]), md(script.get("files")), md(script.get("digest"))))
    else:
        lines.append("- Files deployed: %s (sha1 %s)" % (md(script.get("files")), md(script.get("digest"))))
    return lines


def env_lines(facts):
    env = facts.get("env")
    if not isinstance(env, dict):
        return ["Environment: %s." % NOT_RECORDED]
    if not env:
        return ["No NCCL/UCX/Gloo variables were set (library defaults apply)."]
    return table(["Variable", "Value"], [(name, env[name]) for name in sorted(env)])


def jobs_lines(facts):
    jobs = facts.get("jobs")
    if not isinstance(jobs, list):
        return ["Jobs: %s." % NOT_RECORDED]
    if not jobs:
        return ["No jobs were submitted."]
    rows = []
    for job in jobs:
        job = job if isinstance(job, dict) else {}
        rows.append([job.get(key) for key in ("job_id", "kind", "state", "exit_code", "elapsed", "nodelist", "restarts")])
    return table(["Job", "Kind", "State", "Exit", "Elapsed", "Nodes", "Restarts"], rows)


# How trainers name what they keep in LLMTRAIN_CHECKPOINT_DIR: (a name's pattern, the group that
# is its step, or 0 for none). Anything else there (a Trainer's final config.json and
# model.safetensors, logs) is not a checkpoint.
CHECKPOINT_NAMES = [
    (re.compile(r"^checkpoint-([0-9]+)$"), 1),  # Hugging Face Trainer: checkpoint-N/
    (re.compile(r"^step-([0-9]+)$"), 1),  # torchtitan: step-N/
    (re.compile(r"^iter_([0-9]+)$"), 1),  # Megatron-LM: iter_0000100/
    (re.compile(r"^step_([0-9]+)(?:\.pt)?$"), 1),  # the reference trainer: step_000100.pt, step_000100/
    (re.compile(r"^(?:.*[-_])?step=([0-9]+)(?:[-_].*)?\.ckpt$"), 1),  # Lightning: epoch=1-step=20.ckpt
    (re.compile(r"^.*\.(?:ckpt|pt|pth)$"), 0),  # a checkpoint file: last.ckpt, nanoGPT's ckpt.pt
]
# the report names at most this many checkpoints (the first and the newest), and of the rest a count
SHOWN_CHECKPOINTS = 12


def trainer_checkpoints(names):
    """(checkpoints [(step or None, name)] ordered by step, other names) of the entries of a
    checkpoint directory."""
    found, other = [], []
    for name in names:
        for pattern, group in CHECKPOINT_NAMES:
            match = pattern.match(name) if isinstance(name, str) else None
            if match:
                found.append((int(match.group(group)) if group else None, name))
                break
        else:
            other.append(name)
    stepped = sorted(c for c in found if c[0] is not None)
    return stepped + sorted((c for c in found if c[0] is None), key=lambda c: str(c[1])), other


def some(items, limit):
    """The first and last of items, as many as limit, and how many were left out."""
    if len(items) <= limit:
        return items, 0
    return items[:2] + items[len(items) - (limit - 2):], len(items) - limit


def checkpoint_lines(facts):
    if isinstance(facts.get("script"), dict):
        names = facts["script"].get("checkpoints") or []
        names = names if isinstance(names, list) else [names]
        where = "%s/checkpoints" % md(facts.get("workspace"))
        if not names:
            return ["Your script left nothing in %s (LLMTRAIN_CHECKPOINT_DIR)." % where]
        checkpoints, other = trainer_checkpoints(names)
        if not checkpoints:
            return ["In %s (LLMTRAIN_CHECKPOINT_DIR): %s" % (where, ", ".join(md(name) for name in names))]
        shown, left = some(checkpoints, SHOWN_CHECKPOINTS)
        lines = ["In %s (LLMTRAIN_CHECKPOINT_DIR): %s%s" % (
            where, ", ".join(md(name) + ("" if step is None else " (step %d)" % step) for step, name in shown),
            "" if not left else ", and %d more (%d checkpoints)" % (left, len(checkpoints)))]
        if other:
            shown, left = some(other, SHOWN_CHECKPOINTS)
            lines.append("Other entries there, not checkpoints: %s%s" % (
                ", ".join(md(name) for name in shown), "" if not left else ", and %d more" % left))
        return lines
    if "checkpoint" not in facts:
        return ["Checkpoint: %s." % NOT_RECORDED]
    checkpoint = facts["checkpoint"]
    if not isinstance(checkpoint, dict) or not checkpoint.get("path"):
        return ["No checkpoint was written."]
    return ["- Path: %s" % md(checkpoint["path"]), "- Step: %s" % md(checkpoint.get("step"))]


def node_check_lines(facts):
    """The training job's check of its nodes (its first step), and the nodes the run keeps off."""
    out = []
    check = facts.get("node_check_table")
    if isinstance(check, list) and check:
        out += ["Job %s checked its nodes at %s (GPUs asked/seen by the step/nvidia-smi/torch/registered by "
                "Slurm; GPU policy %s):" % (md(facts.get("node_check_job")), md(facts.get("node_check_time")),
                                            md(facts.get("gpu_policy"))), ""]
        out += fenced("\n".join(str(line) for line in check))
    else:
        out.append("Node check: %s." % NOT_RECORDED)
    excluded = facts.get("excluded_nodes")
    if isinstance(excluded, dict) and excluded:
        out += ["", "Nodes the run keeps off (remove them from `%s` in the run directory, or from "
                "`slurm_exclude_nodes`, once they are repaired):" % run_files.BAD_NODES, ""]
        out += table(["Node", "Why"], [[node, reason] for node, reason in sorted(excluded.items())])
    return out


def straggler_threshold(facts):
    threshold = facts.get("straggler_threshold")
    return float(threshold) if is_finite(threshold) and threshold > 0 else DEFAULT_STRAGGLER_THRESHOLD


def node_step_times(metrics, node_times, facts):
    """The step-time table's source: {rows, about (what they are over), threshold (of their slow
    records), problems}. node_times.json when it has rows, else the loss records' full maps."""
    history, error = node_times
    problems = ["`%s` was not read: %s." % (run_files.NODE_TIMES, md(error))] if error else []
    if history is not None:
        try:
            rows, unreadable = node_times_table(history)
        except ValueError as err:
            rows = []
            problems.append("`%s` was not read: %s." % (run_files.NODE_TIMES, md(str(err))))
        else:
            if unreadable:
                problems.append("%d node entries of `%s` could not be read and are left out."
                                % (unreadable, run_files.NODE_TIMES))
        if rows:
            threshold = history.get("threshold")
            return {"rows": rows, "problems": problems,
                    "about": "means over the %s loss records from step %s to step %s (`%s`)" % (
                        md(history.get("records")), md(history.get("first_step")), md(history.get("step")),
                        run_files.NODE_TIMES),
                    "threshold": float(threshold) if is_finite(threshold) else None,
                    "threshold_from": "the threshold the trainer used, in `%s`" % run_files.NODE_TIMES}
    return {"rows": totals_table(metrics[3]) if metrics else [], "problems": problems,
            "about": "means over the loss records whose `nodes` name every node",
            "threshold": straggler_threshold(facts), "threshold_from": "pretrain_straggler_threshold"}


def is_straggler(row):
    return row["slow_records"] * 2 > row["records"]


def node_rows_table(rows):
    return table(["Node", "Mean work ms/step", "Mean wait ms/step", "Work vs median", "Slow in"],
                 [[r["node"], "%.1f" % r["work_ms"], "%.1f" % r["wait_ms"],
                   "%.2fx" % r["ratio"] if r["ratio"] is not None else NOT_RECORDED,
                   "%d of %d records%s" % (r["slow_records"], r["records"], " (straggler)" if is_straggler(r) else "")]
                  for r in rows])


def step_time_about(times):
    threshold = times["threshold"]
    slow = ("a node more than %s %% above that record's median node's work is slow in it (%s)"
            % (md(round(100 * threshold)) if threshold is not None else NOT_RECORDED, times["threshold_from"]))
    return ("Per node, %s: its work per step (its slowest rank's time not spent waiting for the others in the "
            "gradient all-reduce) and its wait. Every step takes as long as the slowest node's work; %s; a node "
            "slow in more than half its records is a straggler." % (times["about"], slow))


def step_time_lines(times):
    """Each node's work and wait per step over the run, and which was slow. Beyond NODE_ROWS_SHOWN nodes:
    the spread of all, and the rows of the slow ones only (the whole table is in nodes.md)."""
    rows = times["rows"]
    if not rows:
        return ["Step time per node: %s (one node, no `%s` in the run directory, or a script whose metrics carry "
                "no `nodes`)." % (NOT_RECORDED, run_files.NODE_TIMES)] + times["problems"]
    out = [step_time_about(times)] + times["problems"] + [""]
    if len(rows) <= NODE_ROWS_SHOWN:
        return out + node_rows_table(rows)
    works = sorted(r["work_ms"] for r in rows)
    tail = len(works) // 20  # 5 % at each end
    out += ["%d nodes; mean work per step of the median node %.1f ms, of the fastest %.1f ms and the slowest %.1f ms; "
            "90 %% of the nodes between %.1f and %.1f ms."
            % (len(rows), statistics.median(works), works[0], works[-1], works[tail], works[-1 - tail]), ""]
    limit = 1.0 + (times["threshold"] or DEFAULT_STRAGGLER_THRESHOLD)
    slow = [r for r in rows if is_straggler(r) or (r["ratio"] or 0.0) > limit]
    shown = sorted(sorted(slow, key=lambda r: -(r["ratio"] or 0.0))[:NODE_ROWS_SHOWN], key=lambda r: r["node"])
    if not shown:
        out.append("No node's mean work is more than %d %% above the median node's, and none is a straggler."
                   % round(100 * (limit - 1.0)))
    else:
        out += ["The nodes whose mean work is more than %d %% above the median node's, or that are stragglers%s:"
                % (round(100 * (limit - 1.0)), " (the %d slowest of %d)" % (len(shown), len(slow))
                   if len(shown) < len(slow) else ""), ""]
        out += node_rows_table(shown)
    return out + ["", "Every node's row is in `%s` beside this report." % NODES_FILE]


def nodes_report(run_name, times):
    """nodes.md: the step-time table of every node."""
    return "\n".join(["# Step time per node of run %s" % md(run_name), "", step_time_about(times)]
                     + times["problems"] + [""] + node_rows_table(times["rows"])) + "\n"


def fetch_lines(facts):
    """The run's files that the collect step left on the cluster, and what that means here."""
    refused = facts.get("not_fetched")
    if not isinstance(refused, dict) or not refused:
        return []
    out = ["- %s" % md(why) for _path, why in sorted(refused.items())]
    if any(str(path).endswith("/" + run_files.METRICS) for path in refused):
        out.append("- The figures below are of the `%s` an earlier collect fetched, if any: raise "
                   "pretrain_fetch_max_mb above its size to fetch it whole." % run_files.METRICS)
    return out


def gbps(value):
    return "%g Gb/s" % value if is_number(value) else "unknown (the link reports none)"


def gb(value):
    return "%.3g GB/s" % value if is_number(value) else NOT_RECORDED


def microseconds(value):
    return "%.0f us" % value if is_number(value) else NOT_RECORDED


def percent(value):
    return "%.0f%%" % (100 * value) if is_number(value) else "-"


def network_lines(facts):
    """The training job's measure of its fabric (its network check): the whole, then per node."""
    network = facts.get("network")
    if not isinstance(network, dict) or not isinstance(network.get("nodes"), list):
        return ["Network check: %s (one node, pretrain_network_check=false, or the job stopped before it)."
                % NOT_RECORDED]
    whole = "all-reduce bus bandwidth %s" % gb(network.get("busbw"))
    if is_number(network.get("fraction")):
        whole += ", %s of the slowest link's %s" % (percent(network["fraction"]), gb(network.get("limit")))
    else:
        whole += " (the links report no speed: the nodes are judged against each other)"
    out = ["Job %s measured its fabric at %s over %s rank(s) with %s: %s; small-message latency %s; the check "
           "took %s s. Below %s of the link a node is slow." % (
               md(network.get("job_id")), md(network.get("time")), md(network.get("ranks")),
               md(network.get("backend")), whole, microseconds(network.get("latency_us")),
               md(network.get("seconds")), percent(network.get("min_fraction"))), ""]
    slow = network.get("slow") if isinstance(network.get("slow"), dict) else {}
    out += table(["Node", "Interface", "Link speed", "Bus bandwidth", "Of the link", "Latency", "Verdict"], [
        [n.get("node"), n.get("interfaces"), gbps(n.get("gbps")), gb(n.get("busbw")), percent(n.get("fraction")),
         microseconds(n.get("latency_us")), "SLOW" if isinstance(n.get("node"), str) and n["node"] in slow else "ok"]
        for n in network["nodes"] if isinstance(n, dict)])
    if slow:
        out += ["", "Slow node(s), measured with their ring neighbours:", ""]
        out += ["- %s: %s" % (md(node), md(reason)) for node, reason in sorted(slow.items())]
    if network.get("slow_fabric"):
        out += ["", "The fabric is slow: %s." % md(network["slow_fabric"])]
    return out


RECOVERIES_SHOWN = 50
STARTS_MAX_BYTES = 16 * 1048576


def read_start_lines(path):
    """starts.jsonl's JSON objects, oldest first ([] when it is missing): its last STARTS_MAX_BYTES only."""
    if not os.path.exists(path):
        return []
    lines = []
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - STARTS_MAX_BYTES))
        for line in handle.read().decode("utf-8", "replace").splitlines():
            record = untrusted.record(line, untrusted.METRICS_RECORD_MAX_BYTES)
            if isinstance(record, dict):
                lines.append(record)
    return lines


def read_starts(lines):
    """starts.jsonl's lines -> {(job_id, start): {nodes, left, ...}} of the job's start lines (the
    trainer's events there have no nodes)."""
    return dict(((str(r.get("job_id")), r["start"]), r) for r in lines
                if isinstance(r.get("start"), int) and isinstance(r.get("nodes"), str))


USAGE_ROWS_SHOWN = 50


def usage_lines(lines, facts):
    """What the run used: from Slurm's accounting where the collect step found one (facts' ledger, the
    run_ledger module's: each start's allocated TRES x its elapsed time, and the run's other jobs apart),
    else from the run's own start and end lines (starts.jsonl)."""
    found = facts.get("ledger") if isinstance(facts.get("ledger"), dict) else {}
    train = found.get("train") if isinstance(found.get("train"), dict) else None
    if found.get("source") == "sacct" and train is not None:
        out = sacct_lines(train) + ["", "The run's own start and end lines (%s) say:" % run_files.STARTS, ""] + own_lines(lines, facts)
    else:
        why = ("Slurm keeps no accounting here, or it does not know each training job" if found else
               "no accounting was read for this report")
        out = ["Source: the run's own start and end lines (%s)." % why, ""] + own_lines(lines, facts)
    others = [o for o in found.get("others") or [] if isinstance(o, dict)]
    if others:
        out += ["", "The run's other jobs (sacct: allocated TRES x elapsed):", ""]
        out += table(["Kind", "Job", "Starts", "Node-hours", "CPU-hours", "GPU-hours"],
                     [[o.get("kind"), o.get("job_id"), o.get("starts"), hours_of(o.get("node_hours")),
                       hours_of(o.get("cpu_hours")), hours_of(o.get("gpu_hours"))] for o in others[:USAGE_ROWS_SHOWN]])
    return out


def hours_of(value):
    return "%.2f" % value if is_number(value) else "-"


def sacct_lines(train):
    """The training job's starts and total as Slurm's accounting has them (the ledger's train)."""
    starts = [s for s in train.get("starts") or [] if isinstance(s, dict)]
    out = ["Source: sacct (Slurm's accounting): each start of the training job (a requeued job's starts apart) "
           "with the nodes, CPUs and GPUs Slurm allocated it, for its elapsed time.", ""]
    if is_number(train.get("count")) and train["count"] > len(starts):
        out += ["The newest %d of %s starts:" % (len(starts), md(train["count"])), ""]
    out += table(["Job", "State", "Began", "Hours", "Nodes", "CPUs", "GPUs", "Node-hours", "CPU-hours", "GPU-hours"],
                 [[s.get("job_id"), s.get("state"), str(s.get("start") or "-").replace("T", " ")[:16],
                   hours_of(s["seconds"] / 3600 if is_number(s.get("seconds")) else None), s.get("nodes"), s.get("cpus"),
                   s.get("gpus"), hours_of(s.get("node_hours")), hours_of(s.get("cpu_hours")), hours_of(s.get("gpu_hours"))]
                  for s in starts])
    out += ["", "Total: %s node-hours, %s CPU-hours, %s GPU-hours over %s start(s) (sacct)." % (
        hours_of(train.get("node_hours")), hours_of(train.get("cpu_hours")), hours_of(train.get("gpu_hours")),
        md(train.get("count")))]
    return out


def own_lines(lines, facts):
    """The training job's starts from its start and end lines: each start's nodes x its time, and the
    total, in node-hours and GPU-hours (slurm_gpus_per_node)."""
    used = run_files.usage(lines)
    if not used:
        return ["Resources: %s (no start line with its node count in %s)." % (NOT_RECORDED, run_files.STARTS)]
    cluster = facts.get("cluster") if isinstance(facts.get("cluster"), dict) else {}
    gpus = cluster.get("gpus_per_node") if is_number(cluster.get("gpus_per_node")) else 0
    rows = [[u["job_id"], u["start"], u["node_count"], time.strftime("%Y-%m-%d %H:%M", time.gmtime(u["began"])),
             "no end line yet" if u["running"] else "%.2f" % (u["seconds"] / 3600),
             "%.2f" % (u["seconds"] * u["node_count"] / 3600), "%.2f" % (u["seconds"] * u["node_count"] * gpus / 3600)]
            for u in used[-USAGE_ROWS_SHOWN:]]
    node_s = sum(u["seconds"] * u["node_count"] for u in used)
    out = ["Each start of the training job: its nodes for the time from its start line to its end line "
           "(%s), %s GPU(s) a node; a start without an end line (running as the run was collected, or "
           "its batch node lost) counts none here, and playbooks/status.yml counts a running one to now."
           % (run_files.STARTS, md(gpus)),
           ""]
    if len(used) > USAGE_ROWS_SHOWN:
        out += ["The newest %d of %d starts:" % (USAGE_ROWS_SHOWN, len(used)), ""]
    out += table(["Job", "Start", "Nodes", "Began (UTC)", "Hours", "Node-hours", "GPU-hours"], rows)
    out += ["", "Total: %.2f node-hours, %.2f GPU-hours over %d start(s)." % (
        node_s / 3600, node_s * gpus / 3600, len(used))]
    return out


def start_nodes(event, starts):
    """The nodes of the start an event of the trainer's is of, with those the start before had that
    it lacks; "-" where starts.jsonl does not say."""
    record = starts.get((str(event.get("job_id")), event.get("start"))) if event.get("job_id") else None
    if not isinstance(record, dict) or not isinstance(record.get("nodes"), str):
        return "-"
    left = record.get("left") if isinstance(record.get("left"), str) else ""
    return record["nodes"] + (" (without %s)" % left if left else "")


def failed_rank(event):
    """'rank 3 on node-1 failed after step 12 (RuntimeError: ...)' from a restart's failed_ranks, or None."""
    failed = [f for f in event.get("failed_ranks") or [] if isinstance(f, dict)]
    if not failed:
        return None
    first = failed[0]
    return "rank %s on %s failed after step %s (%s)" % (
        first.get("rank"), first.get("node"), first.get("step"), first.get("error"))


HANGS_SHOWN = 20
HANG_NODES_SHOWN = SHOWN_NODES  # as the watch shows them
HANG_FRAMES_SHOWN = 4


def read_hangs(run_dir, warnings):
    """The hang watch's verdicts fetched from the run (hangs/<job>-<start>/summary.json), oldest
    first by time: [(name, summary)]; one that holds no JSON object is left out, and one that cannot
    be read, with a warning."""
    root = os.path.join(run_dir, run_files.HANGS)
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    hangs = []
    for name in names:
        path = os.path.join(root, name, run_files.HANG_SUMMARY)
        if not os.path.isfile(path):
            continue
        try:
            summary = untrusted.read(path, untrusted.HANG_SUMMARY_MAX_BYTES)
        except ValueError as error:
            warnings.append("%s cannot be read (%s); the report leaves that hang out" % (path, error))
            continue
        if isinstance(summary, dict):
            hangs.append((name, summary))
    return sorted(hangs, key=lambda hang: str(hang[1].get("time")))


def hang_lines(hangs):
    """Each hang: when, after which step, how long silent, the nodes it names and the first frames
    of the rank there, where every rank's stack is."""
    if not hangs:
        return ["None: no start of the run went without progress for pretrain_hang_timeout."]
    out = []
    for name, hang in hangs[-HANGS_SHOWN:]:
        suspects = hang.get("suspects") if isinstance(hang.get("suspects"), dict) else {}
        frames = hang.get("frames") if isinstance(hang.get("frames"), dict) else {}
        out.append("- Job %s, start %s, at %s: no progress for %s s after step %s (timeout %s s); stacks of %s rank(s) "
                   "from %s of %s node(s) in %s." % (
                       md(hang.get("job_id")), md((hang.get("restart") or 0) + 1 if is_number(hang.get("restart"))
                                                  else hang.get("restart")),
                       md(hang.get("time")), md(hang.get("silent_s")), md(hang.get("step")), md(hang.get("timeout_s")),
                       md(hang.get("ranks")), md(hang.get("answered")), md(hang.get("nodes")),
                       md(hang.get("dir") or "%s/%s" % (run_files.HANGS, name))))
        if not suspects:
            out.append("  - The stacks name no node: every rank runs, in the same frame.")
        for node, why in sorted(suspects.items())[:HANG_NODES_SHOWN]:
            out.append("  - %s: %s" % (md(node), md(why)))
            node_frames = frames.get(node) if isinstance(frames.get(node), list) else []
            out += ["    - %s" % md(frame) for frame in node_frames[:HANG_FRAMES_SHOWN]]
        if len(suspects) > HANG_NODES_SHOWN:
            out.append("  - and %d more node(s): %s there" % (len(suspects) - HANG_NODES_SHOWN, run_files.HANG_SUMMARY))
    if len(hangs) > HANGS_SHOWN:
        out.append("The last %d of %d hangs; `%s/` holds every one." % (HANGS_SHOWN, len(hangs), run_files.HANGS))
    return out


def steps_lost(event):
    """The steps recorded past the checkpoint a start resumed from (trained again): the trainer's
    count, 0 where it dropped no record, "-" where it does not say (an older trainer's event)."""
    if isinstance(event.get("steps_lost"), int):
        return event["steps_lost"]
    return 0 if event.get("discarded_records") == 0 else "-"


def recovery_lines(events, starts=None, hung=()):
    """Each start after the first, from the trainer's events in file order: a stop it was told of
    (preempted), then the resume at the step of its checkpoint, with the steps recorded past it
    (trained again) and the records discarded, and the nodes of that start (starts.jsonl). hung:
    the names (<job>-<start>) of the starts the hang watch found hung."""
    rows, stopped, starts = [], None, starts or {}
    for event in events:
        if event.get("event") == "preempted":
            stopped = event.get("step")
        elif event.get("event") in ("resume", "start") and event.get("restart_in_job"):
            rows.append((len(rows) + 2, "%s: restart %s inside the job, on the same nodes"
                         % (failed_rank(event) or "a failed rank", event["restart_in_job"]), event.get("step"),
                         os.path.basename(str(event.get("checkpoint") or "")) or "-", steps_lost(event),
                         event.get("discarded_records", 0), start_nodes(event, starts)))
            stopped = None
        elif event.get("event") == "resume":
            why = "stopped at step %s with a checkpoint" % stopped if stopped is not None else "crash, hang or lost node"
            if isinstance(event.get("start"), int) and "%s-%d" % (event.get("job_id"), event["start"] - 1) in hung:
                # the hang watch's requeue stops the running ranks with a checkpoint, as a preemption does
                why = "a hang in start %d (see Hangs)%s" % (event["start"] - 1, "; " + why if stopped is not None else "")
            rows.append((len(rows) + 2, why, event.get("step"), os.path.basename(str(event.get("checkpoint") or "")),
                         steps_lost(event), event.get("discarded_records", 0), start_nodes(event, starts)))
            stopped = None
    if not rows:
        return ["None: the run trained from its first start to its end in one go."]
    lines = table(("start", "after", "resumed at step", "from", "steps lost", "records discarded", "on nodes"),
                  rows[-RECOVERIES_SHOWN:])
    if len(rows) > RECOVERIES_SHOWN:
        lines.append("The last %d of %d recoveries; `%s` holds every one." % (RECOVERIES_SHOWN, len(rows), run_files.METRICS))
    return lines


def after_training_lines(model, batch):
    """The Hugging Face model (runs/<run>/model.json: where, from which checkpoint, its size), its
    held-out loss, and the last batch's figures (runs/<run>/summary.json), each value through md()."""
    export = model.get("export") if isinstance(model.get("export"), dict) else {}
    evaluation = model.get("evaluation") if isinstance(model.get("evaluation"), dict) else {}
    out = ["- Model directory (Hugging Face): %s" % md(model.get("model_dir", NOT_RECORDED)),
           "- From checkpoint: %s" % md(model.get("checkpoint", NOT_RECORDED))]
    if export:
        out.append("- Exported: step %s, %s bytes, %s" % (md(export.get("step")), md(export.get("bytes")),
                   "in %s s" % md(export.get("seconds")) if export.get("exported") else "by an earlier job"))
    else:
        out.append("- Exported: your script's checkpoint, used as it is")
    if is_number(evaluation.get("loss")):
        out.append("- Held-out loss: %.4f, perplexity %s, over %s tokens of %s (%s ranks, %s s)" % (
            evaluation["loss"], md(round(evaluation["perplexity"], 3)) if is_number(evaluation.get("perplexity")) else NOT_RECORDED,
            md(evaluation.get("tokens")), md(evaluation.get("text")), md(evaluation.get("ranks")), md(evaluation.get("seconds"))))
    else:
        out.append("- Held-out loss: %s" % NOT_RECORDED)
    if is_number(batch.get("tokens_per_second")):
        out.append("- Batch inference: %s prompts, %s tokens on %s ranks, %.1f tokens/s (%.1f per rank); records in "
                   "`%s`" % (md(batch.get("prompts")), md(batch.get("tokens")), md(batch.get("ranks")),
                             batch["tokens_per_second"], batch.get("tokens_per_second_per_rank") if is_number(
                                 batch.get("tokens_per_second_per_rank")) else float("nan"), run_files.BATCH_RECORDS))
    return out


def render(run_name, metrics, summary, facts, samples, plot_note, times, lines=(), hangs=(), model=None, batch=None):
    events = metrics[1] if metrics else []
    out = ["# Run %s" % md(run_name), "", "## Summary", ""]
    out += fetch_lines(facts) + summary_lines(metrics, summary, events, facts)
    if metrics and metrics[2]:
        out += ["", "%d line(s) of `%s` were not records and were skipped." % (metrics[2], run_files.METRICS)]
    out += ["", "## Loss", ""]
    out += ["![loss](%s)" % PLOT_FILE] if plot_note is None else [plot_note]
    out += ["", "## Cluster", ""] + cluster_lines(facts, events)
    if isinstance(facts.get("script"), dict):
        out += ["", "## Training script", ""] + script_lines(facts)
    else:
        out += ["", "## Model", ""] + model_lines(facts, events)
    out += ["", "## Node check", ""] + node_check_lines(facts)
    out += ["", "## Step time per node", ""] + step_time_lines(times)
    out += ["", "## NCCL / UCX / Gloo environment", ""] + env_lines(facts)
    out += ["", "## Network", ""] + network_lines(facts)
    out += ["", "## Jobs", ""] + jobs_lines(facts)
    out += ["", "## Resources used", ""] + usage_lines(lines, facts)
    if metrics is not None and not isinstance(facts.get("script"), dict):
        out += ["", "## Recoveries", ""] + recovery_lines(events, read_starts(lines), {name for name, _hang in hangs})
    out += ["", "## Hangs", ""] + hang_lines(list(hangs))
    out += ["", "## Checkpoint", ""] + checkpoint_lines(facts)
    out += ["", "## Samples", ""]
    out += fenced(samples) if samples and samples.strip() else ["Samples: %s." % NOT_RECORDED]
    if model or batch:
        out += ["", "## After training", ""] + after_training_lines(model or {}, batch or {})
    return "\n".join(out) + "\n"


def plot(losses, events, run_name, path):
    """Train loss against step, val losses as points, resumes and preemptions as lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=100)
    axes.plot([r["step"] for r in losses], [r["loss"] for r in losses], color="tab:blue", linewidth=1.5,
              label="train loss")
    vals = [(r["step"], r["val_loss"]) for r in losses if is_number(r.get("val_loss"))]
    if vals:
        axes.plot([s for s, _value in vals], [v for _step, v in vals], "o", color="tab:orange", markersize=5,
                  label="val loss")
    # a resume usually sits on the step of the preemption before it: a wide band under a thin line
    styles = {"preempted": dict(color="tab:red", linestyle="-", linewidth=5, alpha=0.3, label="preempted"),
              "resume": dict(color="tab:green", linestyle="--", linewidth=1.2, label="resumed")}
    labelled = set()
    for event in events:
        style = styles.get(event.get("event"))
        if style and is_number(event.get("step")):
            axes.axvline(event["step"], **dict(style, label=None if style["label"] in labelled else style["label"]))
            labelled.add(style["label"])
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title("Loss of run %s" % run_name.replace("$", "\\$"))  # $...$ would be mathtext, which can raise
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right")
    figure.tight_layout()
    try:
        atomic_write(path, lambda temp: figure.savefig(temp, format="png", metadata={"Software": None}))
    finally:
        plt.close(figure)


def write_text(path, content):
    def write(temp):
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(content)
    atomic_write(path, write)


def write_report(run_dir, facts_path=None):
    """Write RUN/report.md, RUN/loss.png (when there are loss records and matplotlib) and RUN/nodes.md
    (beyond NODE_ROWS_SHOWN nodes) of the fetched run in run_dir; facts_path: the facts JSON file the
    playbook wrote (default RUN/facts.json). Returns (the report's path, the plot's or None, what could
    not be read or drawn: each also said in the report)."""
    warnings = []
    os.makedirs(run_dir, exist_ok=True)
    facts = read_facts(facts_path or os.path.join(run_dir, run_files.FACTS), warnings)
    if facts_path and not os.path.exists(facts_path):
        warnings.append("%s does not exist; the report leaves its sections as not recorded" % facts_path)
    run_name = text(facts.get("run_name") or os.path.basename(os.path.normpath(os.path.abspath(run_dir))))
    metrics = read_metrics(os.path.join(run_dir, run_files.METRICS), straggler_threshold(facts))
    losses, events = (metrics[0], metrics[1]) if metrics else ([], [])
    summary = summarize(losses, events) if losses else None
    samples = read_text(os.path.join(run_dir, run_files.SAMPLES))

    plot_path = os.path.join(run_dir, PLOT_FILE)
    plot_note = None
    if not losses:
        warnings.append("no loss records in %s; %s says so and no plot is drawn"
                        % (os.path.join(run_dir, run_files.METRICS), REPORT_FILE))
        plot_note = "No plot: there are no loss records (see the summary)."
    else:
        try:
            plot(losses, events, run_name, plot_path)
        except ImportError as error:
            warnings.append("no plot: %s" % error)
            plot_note = "No plot: matplotlib is not installed for %s." % md(sys.executable)
    if plot_note is not None and os.path.exists(plot_path):
        os.unlink(plot_path)  # a plot of an earlier attempt would not match this report

    times = node_step_times(metrics, read_node_times(os.path.join(run_dir, run_files.NODE_TIMES), warnings), facts)
    nodes_path = os.path.join(run_dir, NODES_FILE)
    if len(times["rows"]) > NODE_ROWS_SHOWN:
        write_text(nodes_path, nodes_report(run_name, times))
    elif os.path.exists(nodes_path):
        os.unlink(nodes_path)  # an earlier attempt's, of more nodes than this report shows

    report_path = os.path.join(run_dir, REPORT_FILE)
    model = read_facts(os.path.join(run_dir, MODEL_FILE), warnings)
    batch = read_facts(os.path.join(run_dir, run_files.BATCH_SUMMARY), warnings)
    write_text(report_path, render(run_name, metrics, summary, facts, samples, plot_note, times,
                                   read_start_lines(os.path.join(run_dir, run_files.STARTS)),
                                   read_hangs(run_dir, warnings), model, batch))
    return report_path, plot_path if plot_note is None else None, warnings
