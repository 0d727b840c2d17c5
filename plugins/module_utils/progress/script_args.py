# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The total steps of your own script, where pretrain_progress_total_steps is not set: from a
trainer's well-known flag among its arguments (pretrain_script_args), for the watch's step N/M
and ETA and the report's steps of the total. Each flag is one a trainer's own code or docs
define (tests/unit/fixtures/trainers/*.step_flags.json quote where); a value is taken only as
a plain positive integer, never guessed."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

# the flags that set a run's total steps, each as its trainer spells it; a trainer's parser
# takes --flag N and --flag=N alike (nanoGPT's configurator only the second)
STEP_FLAGS = (
    "--max_steps",          # Hugging Face TrainingArguments; PyTorch Lightning 1.x Trainer.add_argparse_args
    "--max-steps",          # Hugging Face's HfArgumentParser spells every field with dashes too
    "--trainer.max_steps",  # PyTorch Lightning's LightningCLI
    "--max_iters",          # nanoGPT's configurator
    "--train-iters",        # Megatron-LM
    "--training.steps",     # torchtitan
    "--num_train_steps",    # Google's BERT run_pretraining.py
)
# the key of the line below in a watch's progress_warnings, which the callback prints once per key
UNKNOWN_TOTAL_KEY = "total_steps"
UNKNOWN_TOTAL = ("the watch shows step N/?: your script's total steps are not known - its records do not say them, its "
                 "arguments (pretrain_script_args) set none with %s (a plain positive integer), and no Hugging Face "
                 "Trainer's checkpoint-N/trainer_state.json holds max_steps. pretrain_progress_total_steps sets the "
                 "total steps for the watch's step N/M and ETA" % ", ".join(STEP_FLAGS))


def total_steps(args):
    """The total steps that the last of STEP_FLAGS in args sets (--flag N or --flag=N: an argument
    parser keeps the last of a flag given twice), or None: none there, or its value is not a plain
    positive integer (-1, 0, 1e3, 60.0, +60, $STEPS). What follows a lone -- is positional."""
    args = [arg if isinstance(arg, str) else str(arg) for arg in args or ()]
    value = None
    for index, arg in enumerate(args):
        if arg == "--":
            break
        name, equals, given = arg.partition("=")
        if name in STEP_FLAGS:
            value = given if equals else (args[index + 1] if index + 1 < len(args) else "")
    # ASCII digits only, within 64 bits (int() takes signs, spaces and other scripts' digits)
    return untrusted.whole(value) or None


def total_of(given, args, state_max_steps=None):
    """The total steps of a run: given (pretrain_progress_total_steps), else the one its script's
    arguments set (total_steps), else state_max_steps (a Hugging Face Trainer's max_steps, from its
    newest trainer_state.json); None where none is known."""
    if given:
        return int(given)
    return total_steps(args) or (int(state_max_steps) if state_max_steps else None)


def say_unknown_total(p, result):
    """Adds UNKNOWN_TOTAL to a watch's result where the progress of a script of your own (p: the
    watch's options, progress_from_log or event_dirs) has a step and no total: the callback prints it
    once. The reference trainer's records always carry their total."""
    progress = result.get("progress")
    if (p["progress_from_log"] or p["event_dirs"]) and isinstance(progress, dict) \
            and progress.get("step") is not None and not progress.get("total_steps"):
        result.setdefault("progress_warnings", {})[UNKNOWN_TOTAL_KEY] = UNKNOWN_TOTAL
