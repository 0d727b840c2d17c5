# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the play says of a run's model after training: its Hugging Face export and its held-out
loss (runs/<run>/model.json, which the inference stage writes from what the export job left in the
run directory). Every value came from a file a job wrote: numbers are checked to be numbers, and
text is made printable."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable


def number(value):
    """value when it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def size_text(size):
    size = number(size)
    if size is None:
        return "size unknown"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:
            return "%.1f %s" % (size / scale, unit)
    return "%d bytes" % size


def export_line(model):
    """One line on the model directory: where it is, and what it was made from."""
    where = printable(model.get("model_dir", ""))
    export = model.get("export") if isinstance(model.get("export"), dict) else None
    if not export:
        return "Model (your script's checkpoint %s, used as it is): %s" % (printable(model.get("checkpoint", "")), where)
    seconds = number(export.get("seconds"))
    made = ("exported in %.1f s" % seconds if seconds is not None else "exported") if export.get("exported") else "exported before"
    return "Model (Hugging Face, %s, step %s, %s): %s" % (size_text(export.get("bytes")), printable(export.get("step")), made, where)


def evaluation_line(model):
    """One line on the held-out loss, or why there is none."""
    evaluation = model.get("evaluation") if isinstance(model.get("evaluation"), dict) else None
    if not evaluation:
        return "Held-out loss: not evaluated (inference_evaluate is false, or the job left no result)."
    loss, perplexity, tokens = (number(evaluation.get(k)) for k in ("loss", "perplexity", "tokens"))
    if loss is None or tokens is None:
        return "Held-out loss: the evaluation's record has no loss or token count."
    return "Held-out loss %.4f (perplexity %s) over %s tokens of %s, %s ranks" % (
        loss, "%.2f" % perplexity if perplexity is not None else "unknown", "{:,}".format(int(tokens)),
        printable(evaluation.get("text", "the held-out text")), printable(evaluation.get("ranks", "?")))


def model_lines(model, run_name):
    """The play's lines on a run's model (runs/<run>/model.json as a dict)."""
    if not isinstance(model, dict) or not model.get("model_dir"):
        return ["Run %s has no exported model." % printable(run_name)]
    return [export_line(model), evaluation_line(model)]
