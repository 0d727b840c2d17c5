# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the inference_* variables (the inference role's)."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, number, one_line


def errors(values):
    """values: the variables that are set -> [message] about the inference_* among them."""
    found = []
    script = values.get("run_script")
    if "inference_script" in values:
        if not one_line(values["inference_script"]):
            found.append("inference_script=%r must be a path on one line, or null." % (values["inference_script"],))
        elif not script:
            found.append("inference_script=%s is for a run of your own training script (run_script); the "
                         "reference trainer samples with inference_prompts: unset inference_script, or set "
                         "run_script." % values["inference_script"])
        elif values["inference_script"].startswith("/") or ".." in values["inference_script"].split("/"):
            found.append("inference_script=%s must be a path relative to the directory your code is deployed to "
                         "(inside run_source_dir, or the name of one of run_extra_files), such as "
                         "sample.py." % values["inference_script"])
    if "inference_prompts" in values:
        prompts = values["inference_prompts"]
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p for p in prompts):
            found.append("inference_prompts=%r must be a non-empty list of non-empty strings." % (prompts,))
    count(found, values, "inference_max_new_tokens", 1, "tokens generated per prompt")
    count(found, values, "inference_top_k", 0, "sample from the k most likely tokens, 0 for all")
    if "inference_temperature" in values:
        temperature = number(values["inference_temperature"])
        if temperature is None or temperature < 0:
            found.append("inference_temperature=%r must be a number >= 0 (0 always takes the most likely token)."
                         % (values["inference_temperature"],))
    return found
