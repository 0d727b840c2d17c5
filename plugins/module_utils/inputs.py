# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the inventory's variables (slurm_*, preflight_*, deploy_*, pretrain_*, inference_*), done before
anything reaches Slurm. Every message names the variable, the bad value and the fix."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils import log_progress
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import nccl

PARTITION = re.compile(r"^[A-Za-z0-9_.-]+$")
MEMORY = re.compile(r"^[1-9][0-9]*[KMGT]?$")
# minutes | MM:SS | HH:MM:SS | D-HH | D-HH:MM | D-HH:MM:SS
TIME_LIMIT = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|\d+-\d{1,2}:\d{1,2}:\d{1,2})$")


def _int(value):
    """value as an int when it is one (or a string of digits), else None; bools are not ints."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^-?\d+$", value.strip()):
        return int(value)
    return None


def _count(errors, values, name, minimum, fix):
    if name not in values:
        return None
    number = _int(values[name])
    if number is None or number < minimum:
        errors.append("%s=%r must be a whole number >= %d: %s." % (name, values[name], minimum, fix))
        return None
    return number


def validate(values):
    """values: the slurm_*, preflight_* and nccl_env_* variables that are set -> [message]. A null
    value is unset (the role defaults use null for "Slurm's own default")."""
    values = dict((name, value) for name, value in values.items() if value is not None)
    errors = []
    if "slurm_partition" in values and not PARTITION.fullmatch(str(values["slurm_partition"] or "")):
        errors.append("slurm_partition=%r is not a partition name: use one that `sinfo -s` lists "
                      "(letters, digits, . _ -)." % values["slurm_partition"])
    _count(errors, values, "slurm_nodes", 1, "how many nodes the job runs on")
    gpus = _count(errors, values, "slurm_gpus_per_node", 0, "GPUs per node, 0 for CPU nodes (gloo)")
    procs = _count(errors, values, "slurm_procs_per_node", 1, "training processes per node, usually one per GPU")
    _count(errors, values, "slurm_cpus_per_task", 1, "CPUs for each node's launcher task and its workers")
    if gpus and procs and procs > gpus:
        errors.append("slurm_procs_per_node=%d is more than slurm_gpus_per_node=%d: each process needs its own "
                      "GPU, so set slurm_procs_per_node to %d or fewer." % (procs, gpus, gpus))
    if "slurm_mem_per_cpu" in values and not MEMORY.fullmatch(str(values["slurm_mem_per_cpu"])):
        errors.append("slurm_mem_per_cpu=%r is not a Slurm memory size: a number with an optional K, M, G or T "
                      "suffix, such as 2G or 512M." % values["slurm_mem_per_cpu"])
    if "slurm_time_limit" in values:
        limit = str(values["slurm_time_limit"])
        if not (TIME_LIMIT.fullmatch(limit) or limit.upper() in ("UNLIMITED", "INFINITE")):
            errors.append("slurm_time_limit=%r is not a Slurm time: use minutes, HH:MM:SS or D-HH:MM:SS "
                          "(for example \"04:00:00\" or \"2-00:00:00\")." % values["slurm_time_limit"])
    if "slurm_master_port" in values and str(values["slurm_master_port"]) != "auto":
        port = _int(values["slurm_master_port"])
        if port is None or not 1024 <= port <= 65535:
            errors.append("slurm_master_port=%r must be auto (derived from the job id) or a port from 1024 "
                          "to 65535 that is free on the first node." % values["slurm_master_port"])
    if "slurm_workspace" in values:
        workspace = str(values["slurm_workspace"] or "")
        if not workspace.startswith("/") or "\n" in workspace or "\0" in workspace:
            errors.append("slurm_workspace=%r must be an absolute path to a directory that the login node and "
                          "every compute node share." % values["slurm_workspace"])
        elif "\\" in workspace:
            errors.append("slurm_workspace=%r contains a backslash, which turns off Slurm's %%j/%%x in the job log "
                          "names there: pick a path without one." % values["slurm_workspace"])
    if "slurm_python" in values:
        python = values["slurm_python"]
        if not isinstance(python, str) or not python.strip() or "\n" in python or "\0" in python:
            errors.append("slurm_python=%r must name the Python interpreter on the compute nodes, such as "
                          "python3 or /shared/venvs/train/bin/python." % (python,))
    if "slurm_env_setup" in values:
        setup = values["slurm_env_setup"]
        if not isinstance(setup, list) or not all(isinstance(line, str) and "\n" not in line for line in setup):
            errors.append("slurm_env_setup=%r must be a list of shell lines, one line per item, such as "
                          "['module load cuda/12.4']." % (setup,))
    errors.extend(_deploy_errors(values))
    errors.extend(_stage_errors(values))
    errors.extend(_script_errors(values))
    errors.extend(nccl.build_env({k: v for k, v in values.items() if k.startswith(nccl.PREFIX)})[1])
    return errors


VENV_PYTHON = re.compile(r"^/.*[^/]/bin/python[0-9.]*$")


def _strings(values, name, example):
    """values[name] as a list of one-line strings, or an error message."""
    value = values[name]
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() and "\n" not in v and "\0" not in v
                                       for v in value):
        return None
    return "%s=%r must be a list of one-line strings, such as %s." % (name, value, example)


def _deploy_errors(values):
    """The deploy_venv_* values: the venv is made before the nodes are probed."""
    errors = []
    for name, example in (("deploy_venv_packages", "[torch, numpy]"),
                          ("deploy_venv_pip_args", "[--index-url, https://download.pytorch.org/whl/cu124]")):
        if name in values:
            message = _strings(values, name, example)
            if message:
                errors.append(message)
    if "deploy_venv_base_python" in values:
        base = values["deploy_venv_base_python"]
        if not isinstance(base, str) or not base.strip() or "\n" in base or "\0" in base:
            errors.append("deploy_venv_base_python=%r must name the interpreter on the nodes that makes the venv, "
                          "such as python3 or /usr/bin/python3.11." % (base,))
    if "deploy_tokenizer" in values:
        tokenizer = values["deploy_tokenizer"]
        if not (tokenizer in ("bytes", "bpe") or (isinstance(tokenizer, str) and tokenizer.startswith("/")
                                                  and tokenizer.endswith(".json") and _one_line(tokenizer))):
            errors.append("deploy_tokenizer=%r must be bytes, bpe, or the absolute path of a tokenizer.json on the "
                          "cluster, such as /shared/tokenizers/gpt2/tokenizer.json." % (tokenizer,))
        elif tokenizer == "bpe":
            _count(errors, values, "deploy_vocab_size", 512, "tokens of the BPE to train (the 256 bytes, the merges "
                   "and <|endoftext|>)")
    if str(values.get("deploy_venv_create")).lower() in ("true", "yes", "on", "1"):
        python = values.get("slurm_python")
        # (a missing or empty slurm_python has its own message)
        if isinstance(python, str) and python.strip() and not (VENV_PYTHON.fullmatch(python) and "\n" not in python):
            errors.append("deploy_venv_create=true makes the venv that slurm_python names, so slurm_python=%r must be "
                          "the venv's interpreter: an absolute path ending in bin/python, such as "
                          "/shared/venvs/llmtrain/bin/python." % (python,))
        if values.get("deploy_venv_packages") == []:
            errors.append("deploy_venv_packages=[] installs nothing, but the trainer needs torch: list at least torch.")
    return errors


NODE_ITEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\]]*")
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size")


def _one_line(value):
    return isinstance(value, str) and value.strip() != "" and "\n" not in value and "\0" not in value


def _script_errors(values):
    """run_script, run_source_dir, run_source_exclude, run_script_chdir:
    their form (that the files exist is checked where they are read, on the controller)."""
    errors = []
    script, source = values.get("run_script"), values.get("run_source_dir")
    for name in ("run_script", "run_source_dir", "run_script_chdir"):
        if name in values and not _one_line(values[name]):
            errors.append("%s=%r must be a path on one line, or null." % (name, values[name]))
    if source and _one_line(source):
        if not script:
            errors.append("run_source_dir=%s is set but run_script is not: name your training script inside "
                          "it, such as run_script: train.py." % source)
        elif _one_line(script) and (script.startswith("/") or ".." in script.split("/")):
            errors.append("run_script=%s must be a path inside run_source_dir=%s, relative to it (such as "
                          "train.py or scripts/train.py), when run_source_dir is set." % (script, source))
    if "inference_script" in values:
        if not _one_line(values["inference_script"]):
            errors.append("inference_script=%r must be a path on one line, or null." % (values["inference_script"],))
        elif not script:
            errors.append("inference_script=%s is for a run of your own training script (run_script); the "
                          "reference trainer samples with inference_prompts: unset inference_script, or set "
                          "run_script." % values["inference_script"])
        elif values["inference_script"].startswith("/") or ".." in values["inference_script"].split("/"):
            errors.append("inference_script=%s must be a path relative to the directory your code is deployed to "
                          "(inside run_source_dir, or the name of one of run_extra_files), such as "
                          "sample.py." % values["inference_script"])
    if "pretrain_progress_regex" in values:
        patterns = values["pretrain_progress_regex"]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            errors.append("pretrain_progress_regex=%r must be a list of regular expressions, such as "
                          "['^step (?P<step>\\d+) loss (?P<loss>\\S+)'], or [] for the built-in ones." % (patterns,))
        else:
            try:
                log_progress.compile_patterns(patterns)
            except ValueError as err:
                errors.append("%s." % err)
    if "run_source_exclude" in values:
        message = _strings(values, "run_source_exclude", "[\"data/*\", \"*.ckpt\"]")
        if message and values["run_source_exclude"] != []:
            errors.append(message)
    return errors


# characters W&B refuses in a project name
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"
NETWORK_POLICIES = ("warn", "exclude", "fail")
WANDB_MODES = ("online", "offline")


def _number(value):
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _stage_errors(values):
    """The pretrain_* and inference_* values, so that a bad one stops the run before the
    first job rather than when its stage starts."""
    errors = []
    if "run_name" in values and not RUN_NAME.fullmatch(str(values["run_name"] or "")):
        errors.append("run_name=%r must be 1-64 letters, digits, . _ - starting with a letter or digit "
                      "(it names a directory and the job)." % values["run_name"])
    _count(errors, values, "pretrain_steps", 1, "optimizer steps of the run")
    _count(errors, values, "pretrain_batch_size", 1, "sequences per process per micro-step")
    _count(errors, values, "pretrain_checkpoint_interval", 0, "steps between checkpoints (0: only at the end)")
    _count(errors, values, "run_requeue_max", 0, "how often a preempted job may requeue itself")
    _count(errors, values, "slurm_node_check_timeout", 10, "seconds the node check step of a job may take")
    if "slurm_exclude_nodes" in values:
        nodes = values["slurm_exclude_nodes"]
        if not isinstance(nodes, list) or not all(
                isinstance(n, str) and all(NODE_ITEM.fullmatch(i.strip()) for i in n.split(",")) for n in nodes):
            errors.append("slurm_exclude_nodes=%r must be a list of node names or hostlists, such as "
                          "[gpu-07, \"gpu-[10-12]\"]." % (nodes,))
    _count(errors, values, "pretrain_signal_lead", 0, "seconds before the time limit to checkpoint")
    _count(errors, values, "pretrain_poll_interval", 1, "seconds between progress lines while watching")
    _count(errors, values, "pretrain_rendezvous_timeout", 1, "seconds for the nodes to reach each other at start-up")
    _count(errors, values, "pretrain_controller_timeout", 0, "seconds the watch waits for a Slurm controller that does not answer")
    if "pretrain_network_min_fraction" in values:
        fraction = _number(values["pretrain_network_min_fraction"])
        if fraction is None or not 0 < fraction <= 1:
            errors.append("pretrain_network_min_fraction=%r must be a number above 0 and at most 1, such as 0.5 "
                          "(the fraction of the slowest link's speed below which the network check calls a node slow)."
                          % (values["pretrain_network_min_fraction"],))
    if "pretrain_network_policy" in values and values["pretrain_network_policy"] not in NETWORK_POLICIES:
        errors.append("pretrain_network_policy=%r must be one of %s: warn names a slow node and trains on, exclude "
                      "requeues the job without it, fail ends the job." % (values["pretrain_network_policy"],
                                                                           ", ".join(NETWORK_POLICIES)))
    if "pretrain_learning_rate" in values:
        rate = _number(values["pretrain_learning_rate"])
        if rate is None or not 0 < rate < 1:
            errors.append("pretrain_learning_rate=%r must be a number between 0 and 1, such as 0.0006."
                          % (values["pretrain_learning_rate"],))
    if "pretrain_model" in values:
        model = values["pretrain_model"]
        if not isinstance(model, dict):
            errors.append("pretrain_model=%r must be a mapping such as {n_layer: 12, n_head: 12, n_embd: 768, "
                          "block_size: 1024}." % (model,))
        else:
            bad = [k for k in MODEL_KEYS if k in model and (_int(model[k]) is None or _int(model[k]) < 1)]
            if bad:
                errors.append("pretrain_model: %s must be whole numbers >= 1." % ", ".join(bad))
            elif _int(model.get("n_embd", 1)) % _int(model.get("n_head", 1)):
                errors.append("pretrain_model: n_embd=%s must be a multiple of n_head=%s." % (model["n_embd"], model["n_head"]))
    if "pretrain_parallel" in values:
        parallel = values["pretrain_parallel"]
        if parallel not in PARALLEL:
            errors.append("pretrain_parallel=%r must be ddp (every process holds the whole model and optimizer) or fsdp "
                          "(parameters, gradients and optimizer state sharded over the processes)." % (parallel,))
        elif parallel != "ddp" and values.get("run_script"):
            errors.append("pretrain_parallel=%s is for the reference trainer; your script (run_script=%s) "
                          "parallelises as it does itself: remove pretrain_parallel, or pass your script its own "
                          "flag in pretrain_script_args." % (parallel, values["run_script"]))
    if "pretrain_extra_args" in values and not (isinstance(values["pretrain_extra_args"], list) and
                                                all(isinstance(a, str) for a in values["pretrain_extra_args"])):
        errors.append("pretrain_extra_args=%r must be a list of strings, such as [\"--warmup\", \"100\"]."
                      % (values["pretrain_extra_args"],))
    if "pretrain_straggler_threshold" in values:
        threshold = _number(values["pretrain_straggler_threshold"])
        if threshold is None or not 0 < threshold <= 10:
            errors.append("pretrain_straggler_threshold=%r must be a number above 0 (0.5: a node 50 %% slower than the "
                          "median node is a straggler), at most 10." % (values["pretrain_straggler_threshold"],))
    if "pretrain_straggler_intervals" in values:
        intervals = _int(values["pretrain_straggler_intervals"])
        if intervals is None or not 0 <= intervals <= 10:
            errors.append("pretrain_straggler_intervals=%r must be a whole number from 0 (no straggler lines) to 10: "
                          "loss records in a row a node must be slow." % (values["pretrain_straggler_intervals"],))
    project = values.get("run_wandb_project")
    if project is not None and (not isinstance(project, str) or not project or len(project) > 128
                                or set(project) & set(WANDB_PROJECT_FORBIDDEN)):
        errors.append("run_wandb_project=%r must be a W&B project name: 1-128 characters, none of %s (the "
                      "entity goes in run_wandb_entity)." % (project, " ".join(WANDB_PROJECT_FORBIDDEN)))
    if values.get("run_wandb_mode", "online") not in WANDB_MODES:
        errors.append("run_wandb_mode=%r must be online (the nodes reach W&B) or offline (wandb sync later)."
                      % (values["run_wandb_mode"],))
    if "inference_prompts" in values:
        prompts = values["inference_prompts"]
        if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p for p in prompts):
            errors.append("inference_prompts=%r must be a non-empty list of non-empty strings." % (prompts,))
    _count(errors, values, "inference_max_new_tokens", 1, "tokens generated per prompt")
    _count(errors, values, "inference_top_k", 0, "sample from the k most likely tokens, 0 for all")
    if "inference_temperature" in values:
        temperature = _number(values["inference_temperature"])
        if temperature is None or temperature < 0:
            errors.append("inference_temperature=%r must be a number >= 0 (0 always takes the most likely token)."
                          % (values["inference_temperature"],))
    return errors


# The reference trainer's tokens are bytes; Adam keeps two float32 moments per parameter.
VOCAB_SIZE = 256
RNG_BYTES_PER_RANK = 16384
CHECKPOINT_OVERHEAD = 65536
# torch.save's record of each tensor (zip entry, alignment, pickle): a model's 12 per layer and
# 4 more, each also in the optimizer as two moments and a step count.
BYTES_PER_TENSOR = 512
# A sharded checkpoint (pretrain_parallel: fsdp) has each tensor once per process: its record in
# that process's shard file and its entry in .metadata; measured 1.4 to 2.2 KB.
SHARDED_BYTES_PER_TENSOR_PER_RANK = 2304
DEFAULT_KEEP_CHECKPOINTS = 3
PARALLEL = ("ddp", "fsdp")


def workspace_need(values):
    """(bytes, how) the reference trainer's checkpoints of this run take at most: keep + 1
    (the one being written) checkpoints of weights plus Adam's two moments, float32. None
    for your own training script, whose checkpoints this cannot know."""
    if values.get("run_script"):
        return None
    model = dict(values.get("pretrain_model") or {})
    layers, width, block = (_int(model.get(k)) for k in ("n_layer", "n_embd", "block_size"))
    if not all(isinstance(v, int) and v > 0 for v in (layers, width, block)):
        return None
    # per layer: the attention's and the MLP's matrices and biases, two LayerNorms; then the
    # final LayerNorm and the embeddings (the output layer shares the token embedding)
    params = 12 * layers * width * width + 13 * layers * width + 2 * width + VOCAB_SIZE * width + block * width
    tensors = (12 * layers + 4) * 4
    ranks = (_int(values.get("slurm_nodes")) or 1) * (_int(values.get("slurm_procs_per_node")) or 1)
    if values.get("pretrain_parallel") == "fsdp":
        tensors_bytes = tensors * ranks * SHARDED_BYTES_PER_TENSOR_PER_RANK
    else:
        tensors_bytes = tensors * BYTES_PER_TENSOR
    one = params * 4 * 3 + tensors_bytes + ranks * RNG_BYTES_PER_RANK + CHECKPOINT_OVERHEAD
    args = [str(a) for a in values.get("pretrain_extra_args") or []]
    keep = DEFAULT_KEEP_CHECKPOINTS
    for index, arg in enumerate(args):
        if arg == "--keep-checkpoints" and index + 1 < len(args):
            keep = _int(args[index + 1]) or keep
        elif arg.startswith("--keep-checkpoints="):
            keep = _int(arg.split("=", 1)[1]) or keep
    return (keep + 1) * one, "%d checkpoints of about %.1f MiB (%d parameters, weights and Adam state)" % (
        keep + 1, one / 1048576.0, params)
