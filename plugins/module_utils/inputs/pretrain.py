# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the pretrain_* variables (the pretrain role's), done with every stage's so that a bad one
stops the run before the first job rather than when its stage starts; and what the reference
trainer's checkpoints need of the workspace."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, int_or_none, number
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.argument_specs import choices

MODEL_KEYS = ("n_layer", "n_head", "n_embd", "block_size")


def errors(values):
    """values: the variables that are set -> [message] about the pretrain_* among them."""
    found = []
    count(found, values, "pretrain_steps", 1, "optimizer steps of the run")
    count(found, values, "pretrain_batch_size", 1, "sequences per process per micro-step")
    count(found, values, "pretrain_checkpoint_interval", 0, "steps between checkpoints (0: only at the end)")
    count(found, values, "pretrain_signal_lead", 0, "seconds before the time limit to checkpoint")
    count(found, values, "pretrain_poll_interval", 1, "seconds between progress lines while watching")
    count(found, values, "pretrain_rendezvous_timeout", 1, "seconds for the nodes to reach each other at start-up")
    count(found, values, "pretrain_restarts_in_job", 0, "restarts of the training processes inside one start of the job")
    count(found, values, "pretrain_controller_timeout", 0, "seconds the watch waits for a Slurm controller that does not answer")
    if "pretrain_network_min_fraction" in values:
        fraction = number(values["pretrain_network_min_fraction"])
        if fraction is None or not 0 < fraction <= 1:
            found.append("pretrain_network_min_fraction=%r must be a number above 0 and at most 1, such as 0.5 "
                         "(the fraction of the slowest link's speed below which the network check calls a node slow)."
                         % (values["pretrain_network_min_fraction"],))
    if "pretrain_network_policy" in values and values["pretrain_network_policy"] not in choices("pretrain_network_policy"):
        found.append("pretrain_network_policy=%r must be one of %s: warn names a slow node and trains on, exclude "
                     "requeues the job without it, fail ends the job." % (values["pretrain_network_policy"],
                                                                          ", ".join(choices("pretrain_network_policy"))))
    if "pretrain_hang_timeout" in values and values["pretrain_hang_timeout"] != "auto":
        timeout = number(values["pretrain_hang_timeout"])
        if timeout is None or timeout < 0 or isinstance(values["pretrain_hang_timeout"], bool):
            found.append("pretrain_hang_timeout=%r must be auto (10 times the median interval between records, at "
                         "least 300 s), a number of seconds, or 0 (no hang watch)." % (values["pretrain_hang_timeout"],))
    if "pretrain_hang_policy" in values and values["pretrain_hang_policy"] not in choices("pretrain_hang_policy"):
        found.append("pretrain_hang_policy=%r must be one of %s: requeue restarts the job without the node the hang "
                     "names, fail ends the job, warn says so and waits on." % (values["pretrain_hang_policy"],
                                                                               ", ".join(choices("pretrain_hang_policy"))))
    if "pretrain_learning_rate" in values:
        rate = number(values["pretrain_learning_rate"])
        if rate is None or not 0 < rate < 1:
            found.append("pretrain_learning_rate=%r must be a number between 0 and 1, such as 0.0006."
                         % (values["pretrain_learning_rate"],))
    if "pretrain_model" in values:
        model = values["pretrain_model"]
        if not isinstance(model, dict):
            found.append("pretrain_model=%r must be a mapping such as {n_layer: 12, n_head: 12, n_embd: 768, "
                         "block_size: 1024}." % (model,))
        else:
            bad = [k for k in MODEL_KEYS if k in model and (int_or_none(model[k]) is None or int_or_none(model[k]) < 1)]
            if bad:
                found.append("pretrain_model: %s must be whole numbers >= 1." % ", ".join(bad))
            elif int_or_none(model.get("n_embd", 1)) % int_or_none(model.get("n_head", 1)):
                found.append("pretrain_model: n_embd=%s must be a multiple of n_head=%s." % (model["n_embd"], model["n_head"]))
    if "pretrain_parallel" in values:
        parallel = values["pretrain_parallel"]
        if parallel not in choices("pretrain_parallel"):
            found.append("pretrain_parallel=%r must be ddp (every process holds the whole model and optimizer) or fsdp "
                         "(parameters, gradients and optimizer state sharded over the processes)." % (parallel,))
        elif parallel != "ddp" and values.get("run_script"):
            found.append("pretrain_parallel=%s is for the reference trainer; your script (run_script=%s) "
                         "parallelises as it does itself: remove pretrain_parallel, or pass your script its own "
                         "flag in pretrain_script_args." % (parallel, values["run_script"]))
    if "pretrain_extra_args" in values and not (isinstance(values["pretrain_extra_args"], list) and
                                                all(isinstance(a, str) for a in values["pretrain_extra_args"])):
        found.append("pretrain_extra_args=%r must be a list of strings, such as [\"--warmup\", \"100\"]."
                     % (values["pretrain_extra_args"],))
    if "pretrain_straggler_threshold" in values:
        threshold = number(values["pretrain_straggler_threshold"])
        if threshold is None or not 0 < threshold <= 10:
            found.append("pretrain_straggler_threshold=%r must be a number above 0 (0.5: a node 50 %% slower than the "
                         "median node is a straggler), at most 10." % (values["pretrain_straggler_threshold"],))
    if "pretrain_straggler_intervals" in values:
        intervals = int_or_none(values["pretrain_straggler_intervals"])
        if intervals is None or not 0 <= intervals <= 10:
            found.append("pretrain_straggler_intervals=%r must be a whole number from 0 (no straggler lines) to 10: "
                         "loss records in a row a node must be slow." % (values["pretrain_straggler_intervals"],))
    if "pretrain_progress_regex" in values:
        patterns = values["pretrain_progress_regex"]
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            found.append("pretrain_progress_regex=%r must be a list of regular expressions, such as "
                         "['^step (?P<step>\\d+) loss (?P<loss>\\S+)'], or [] for the built-in ones." % (patterns,))
        else:
            try:
                log_progress.compile_patterns(patterns)
            except ValueError as err:
                found.append("%s." % err)
    tag = values.get("pretrain_progress_tag")
    if tag is not None and (not isinstance(tag, str) or not tag.strip() or len(tag) > 200):
        found.append("pretrain_progress_tag=%r must be the tag of your loss's scalar in your TensorBoard event files "
                     "(such as 'train_loss'), or null for the known ones." % (tag,))
    total = values.get("pretrain_progress_total_steps")
    if total is not None and (int_or_none(total) is None or int_or_none(total) < 1):
        found.append("pretrain_progress_total_steps=%r must be the number of steps your script trains (1 or more), or "
                     "null where its records say." % (total,))
    return found


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


def workspace_need(values):
    """(bytes, how) the reference trainer's checkpoints of this run take at most: keep + 1
    (the one being written) checkpoints of weights plus Adam's two moments, float32. None
    for your own training script, whose checkpoints this cannot know."""
    if values.get("run_script"):
        return None
    model = dict(values.get("pretrain_model") or {})
    layers, width, block = (int_or_none(model.get(k)) for k in ("n_layer", "n_embd", "block_size"))
    if not all(isinstance(v, int) and v > 0 for v in (layers, width, block)):
        return None
    # per layer: the attention's and the MLP's matrices and biases, two LayerNorms; then the
    # final LayerNorm and the embeddings (the output layer shares the token embedding)
    params = 12 * layers * width * width + 13 * layers * width + 2 * width + VOCAB_SIZE * width + block * width
    tensors = (12 * layers + 4) * 4
    ranks = (int_or_none(values.get("slurm_nodes")) or 1) * (int_or_none(values.get("slurm_procs_per_node")) or 1)
    if values.get("pretrain_parallel") == "fsdp":
        tensors_bytes = tensors * ranks * SHARDED_BYTES_PER_TENSOR_PER_RANK
    else:
        tensors_bytes = tensors * BYTES_PER_TENSOR
    one = params * 4 * 3 + tensors_bytes + ranks * RNG_BYTES_PER_RANK + CHECKPOINT_OVERHEAD
    args = [str(a) for a in values.get("pretrain_extra_args") or []]
    keep = DEFAULT_KEEP_CHECKPOINTS
    for index, arg in enumerate(args):
        if arg == "--keep-checkpoints" and index + 1 < len(args):
            keep = int_or_none(args[index + 1]) or keep
        elif arg.startswith("--keep-checkpoints="):
            keep = int_or_none(arg.split("=", 1)[1]) or keep
    return (keep + 1) * one, "%d checkpoints of about %.1f MiB (%d parameters, weights and Adam state)" % (
        keep + 1, one / 1048576.0, params)
