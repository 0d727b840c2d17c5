# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the inference_* variables (the inference role's)."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, int_or_none, number, one_line, strings
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.slurm import MEMORY, TIME_LIMIT
from ansible_collections.llmtrain.slurm.plugins.module_utils.inference.prompts_file import TEMPERATURES, temperature_ok


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
        if temperature is None or not temperature_ok(temperature):
            found.append("inference_temperature=%r must be %s." % (values["inference_temperature"], TEMPERATURES))
    # the batch (inference_prompts_file, whose content llmtrain.slurm.prompts_file checks)
    if "inference_prompts_file" in values and not one_line(values["inference_prompts_file"]):
        found.append("inference_prompts_file=%r must be the path of a file of prompts on this machine (JSON lines), "
                     "or null." % (values["inference_prompts_file"],))
    count(found, values, "inference_nodes", 1, "the nodes of the evaluation and batch jobs, each running slurm_procs_per_node ranks")
    if "inference_batch_time_limit" in values and not TIME_LIMIT.fullmatch(str(values["inference_batch_time_limit"])):
        found.append("inference_batch_time_limit=%r is not a Slurm time: use minutes, HH:MM:SS or D-HH:MM:SS "
                     "(for example \"04:00:00\")." % (values["inference_batch_time_limit"],))
    count(found, values, "inference_batch_wait_timeout", 1, "seconds the play waits for the batch job")
    count(found, values, "inference_batch_fetch_max_mb", 1, "the largest generations.jsonl brought to the controller, in MiB")
    found += serve_errors(values)
    return found


def serve_errors(values):
    """The serving job's settings (playbooks/serve.yml)."""
    found = []
    if "inference_serve_time_limit" in values:
        limit = str(values["inference_serve_time_limit"])
        if not (TIME_LIMIT.fullmatch(limit) or limit.upper() in ("UNLIMITED", "INFINITE")):
            found.append("inference_serve_time_limit=%r is not a Slurm time: use minutes, HH:MM:SS or D-HH:MM:SS "
                         "(for example \"04:00:00\")." % values["inference_serve_time_limit"])
    if "inference_serve_mem" in values and not MEMORY.fullmatch(str(values["inference_serve_mem"])):
        found.append("inference_serve_mem=%r is not a Slurm memory size: a number with an optional K, M, G or T "
                     "suffix, such as 16G." % values["inference_serve_mem"])
    count(found, values, "inference_serve_gpus", 0, "GPUs of the serving job, 0 on CPU nodes")
    count(found, values, "inference_serve_ready_timeout", 1, "seconds to wait for the server to answer")
    if "inference_serve_port" in values:
        port = int_or_none(values["inference_serve_port"])
        if port is None or not (port == 0 or 1024 <= port <= 65535):
            found.append("inference_serve_port=%r must be 0 (a port free on the node when the job starts) or a "
                         "port from 1024 to 65535." % (values["inference_serve_port"],))
    if "inference_serve_args" in values:
        why = strings(values, "inference_serve_args", "[--max-model-len, '4096']")
        if why:
            found.append(why)
    if "inference_serve_model" in values and not one_line(values["inference_serve_model"]):
        found.append("inference_serve_model=%r must be a path on one line (a Hugging Face model directory on the "
                     "cluster), or null." % (values["inference_serve_model"],))
    return found
