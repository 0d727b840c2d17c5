# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the inference role's batch (inference_prompts_file).

  path | llmtrain.slurm.prompts_file -> {path, prompts, bytes, sha256, errors}: the prompts file checked
  summary.json text | llmtrain.slurm.batch_message(where) -> what the batch made, in one line
"""

from __future__ import annotations

from ansible.utils.display import Display

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_facts
from ansible_collections.llmtrain.slurm.plugins.module_utils.inference import prompts_file as prompts
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable

display = Display()


def prompts_file(path):
    """The prompts file on the controller, checked line by line (module_utils/inputs/prompts.py)."""
    return prompts.check_file(path)


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _rate(value):
    value = _number(value)
    return "?" if value is None else "%.1f" % value


def batch_message(text, where="runs/<run>"):
    """summary.json (its text, as the batch job wrote it: untrusted) -> one line that says how many
    prompts, tokens and tokens/s, and where the records are."""
    summary = run_facts.run_json(text, {}, "summary.json", display.warning)
    ranks = [r for r in summary.get("per_rank") or [] if isinstance(r, dict)] if isinstance(summary.get("per_rank"), list) else []
    rates = sorted(r for r in (_number(s.get("tokens_per_second")) for s in ranks) if r is not None)
    spread = " (ranks from %.1f to %.1f)" % (rates[0], rates[-1]) if len(rates) > 1 else ""
    line = ("Batch: %s prompts, %s tokens generated on %s ranks in %s s of the busiest rank: %s tokens/s, %s per rank%s. "
            "Records in the prompts' order: %s/generations.jsonl; per rank: %s/summary.json."
            % (_number(summary.get("prompts")), _number(summary.get("tokens")), _number(summary.get("ranks")),
               _number(summary.get("busiest_rank_seconds")), _rate(summary.get("tokens_per_second")),
               _rate(summary.get("tokens_per_second_per_rank")), spread, where, where))
    return printable(line)


class FilterModule:
    def filters(self):
        return {"prompts_file": prompts_file, "batch_message": batch_message}
