"""Every knob of a training run, in one dataclass.

Precedence: dataclass defaults < ``--config FILE`` (JSON) < command-line flags.
Each field ``some_name`` is the flag ``--some-name``; a few fields have aliases.
"""

import argparse
import json
import re
import signal
from dataclasses import dataclass, field, fields


def knob(default, help, aliases=()):
    # called only in TrainConfig's class body, where field() belongs
    return field(default=default, metadata={"help": help, "aliases": aliases})  # pylint: disable=invalid-field-call


@dataclass
class TrainConfig:
    # model shape (the vocabulary size comes from the prepared data)
    n_layer: int = knob(6, "transformer blocks")
    n_head: int = knob(6, "attention heads per block")
    n_embd: int = knob(384, "embedding width; a multiple of --n-head")
    block_size: int = knob(256, "context length in tokens")
    dropout: float = knob(0.0, "dropout probability")
    bias: bool = knob(True, "biases in the Linear and LayerNorm layers (--no-bias: none, as many GPT-2-style "
                            "trainers; a little faster)")
    # optimisation
    steps: int = knob(0, "total optimizer steps of the run")
    batch_size: int = knob(16, "sequences per rank per micro-step")
    grad_accum: int = knob(1, "micro-steps per optimizer step")
    lr: float = knob(1e-3, "peak learning rate", aliases=("--learning-rate",))
    min_lr: float = knob(1e-4, "learning rate at the end of the cosine decay")
    warmup: int = knob(100, "linear warmup steps")
    weight_decay: float = knob(0.1, "AdamW weight decay of matrices")
    grad_clip: float = knob(1.0, "clip the global gradient norm to this; 0 disables")
    # evaluation, checkpoints, logging
    eval_interval: int = knob(250, "steps between validation losses; 0: only at the end")
    eval_iters: int = knob(20, "validation batches per evaluation")
    checkpoint_interval: int = knob(500, "steps between checkpoints; 0: only at the end or on preemption")
    keep_checkpoints: int = knob(3, "checkpoints kept; older ones are deleted")
    log_interval: int = knob(10, "steps between metrics records")
    tensorboard: bool = knob(True, "TensorBoard event files of the metrics records in RUN/tensorboard (rank 0; "
                                   "--no-tensorboard: none)")
    wandb_project: str = knob("", "Weights & Biases project the metrics records also go to (rank 0; needs the "
                                  "package wandb); empty: none")
    wandb_entity: str = knob("", "W&B entity (team or user) of the project; empty: the API key's default")
    wandb_mode: str = knob("online", "online (the nodes reach W&B; WANDB_API_KEY) or offline (RUN/wandb, uploaded "
                                     "later with 'wandb sync')")
    # runtime
    seed: int = knob(1337, "seed of initialisation, data order and dropout")
    compile: bool = knob(False, "torch.compile the model")
    parallel: str = knob("ddp", "ddp: every rank holds the whole model and optimizer, gradients are all-reduced; "
                                "fsdp: parameters, gradients and optimizer state sharded over the ranks (FSDP2, "
                                "fully_shard per block), sharded checkpoints (step_NNNNNN/ directories)")
    attention: str = knob("auto", "attention kernel tried first: auto (torch's choice), flash, efficient, math or "
                                  "cudnn; the others stay as fallbacks (torch 2.6 or newer unless auto)")
    dtype: str = knob("auto", "auto (bfloat16 on CUDA GPUs that have it natively, else float32), bfloat16 or float32")
    rendezvous_timeout: int = knob(300, "seconds for the ranks to reach each other at start-up; then every rank "
                                        "stops with a hint about the network interface settings")
    preempt_signal: str = knob("SIGUSR2", "signal that asks for a checkpoint and exit 75 (SIGTERM always does)")


DTYPES = ("auto", "bfloat16", "float32")
ATTENTION = ("auto", "flash", "efficient", "math", "cudnn")
WANDB_MODES = ("online", "offline")
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"
PARALLEL = ("ddp", "fsdp")
UNCATCHABLE_SIGNALS = {"SIGKILL", "SIGSTOP"}


class ConfigError(ValueError):
    """A config value is wrong; the message names the flag that sets it."""


def flag(name):
    return "--" + name.replace("_", "-")


def parse_signal(name):
    """'SIGUSR2', 'USR2' or '12' -> signal.Signals; refuse those the trainer cannot own."""
    text = str(name).strip().upper()
    try:
        # a number in ASCII digits: isdigit() also takes other scripts' digits, which int() reads
        sig = signal.Signals(int(text)) if re.fullmatch(r"[0-9]+", text) else signal.Signals[
            text if text[:3] == "SIG" else "SIG" + text]
    except (KeyError, ValueError):
        raise ConfigError(f"--preempt-signal {name!r} is not a signal name such as SIGUSR2") from None
    if sig.name == "SIGUSR1":
        raise ConfigError("--preempt-signal SIGUSR1 is refused: NCCL and some launchers handle it themselves; "
                          "use SIGUSR2 (the default) or SIGTERM")
    if sig.name in UNCATCHABLE_SIGNALS:
        raise ConfigError(f"--preempt-signal {sig.name} cannot be caught by a process; use SIGUSR2 or SIGTERM")
    return sig


def validate(cfg):
    """Raise ConfigError for the first value that cannot work."""
    positive = ["n_layer", "n_head", "n_embd", "block_size", "steps", "batch_size", "grad_accum",
                "eval_iters", "keep_checkpoints", "log_interval", "rendezvous_timeout"]
    non_negative = ["warmup", "weight_decay", "grad_clip", "eval_interval", "checkpoint_interval", "seed", "min_lr"]
    for name in positive:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{flag(name)} must be a positive integer (got {getattr(cfg, name)})")
    for name in non_negative:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{flag(name)} must not be negative (got {getattr(cfg, name)})")
    if cfg.n_embd % cfg.n_head:
        raise ConfigError(f"--n-embd ({cfg.n_embd}) must be a multiple of --n-head ({cfg.n_head})")
    if not 0.0 <= cfg.dropout < 1.0:
        raise ConfigError(f"--dropout must be in [0, 1) (got {cfg.dropout})")
    if cfg.lr <= 0:
        raise ConfigError(f"--lr must be positive (got {cfg.lr})")
    if cfg.min_lr > cfg.lr:
        raise ConfigError(f"--min-lr ({cfg.min_lr}) must not exceed --lr ({cfg.lr})")
    if cfg.dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)} (got {cfg.dtype!r})")
    if cfg.attention not in ATTENTION:
        raise ConfigError(f"--attention must be one of {', '.join(ATTENTION)} (got {cfg.attention!r})")
    if cfg.wandb_mode not in WANDB_MODES:
        raise ConfigError(f"--wandb-mode must be one of {', '.join(WANDB_MODES)} (got {cfg.wandb_mode!r})")
    if set(cfg.wandb_project) & set(WANDB_PROJECT_FORBIDDEN) or len(cfg.wandb_project) > 128:
        raise ConfigError(f"--wandb-project {cfg.wandb_project!r} is not a W&B project name: at most 128 characters, "
                          f"none of {' '.join(WANDB_PROJECT_FORBIDDEN)}")
    if cfg.parallel not in PARALLEL:
        raise ConfigError(f"--parallel must be one of {', '.join(PARALLEL)} (got {cfg.parallel!r})")
    parse_signal(cfg.preempt_signal)
    return cfg


def add_config_flags(parser):
    """One flag per field, default None so that only flags given on the command line override."""
    group = parser.add_argument_group("training config (override --config)")
    for f in fields(TrainConfig):
        names = [flag(f.name), *f.metadata["aliases"]]
        help_text = f"{f.metadata['help']} (default: {f.default})"
        if f.type is bool:
            group.add_argument(*names, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
        else:
            group.add_argument(*names, dest=f.name, type=f.type, default=None, metavar=f.type.__name__.upper(),
                               help=help_text)


def _check_json_type(name, value, kind):
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[kind]
    if not ok:
        raise ConfigError(f"--config: {name} must be {kind.__name__} (got {value!r})")
    return kind(value)


def load_json_config(path):
    """The JSON object in PATH as TrainConfig keyword arguments; field names or their flag spellings."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigError(f"--config {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config {path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: must hold a JSON object")
    by_name = {f.name: f for f in fields(TrainConfig)}
    aliases = {a.lstrip("-").replace("-", "_"): f.name for f in fields(TrainConfig) for a in f.metadata["aliases"]}
    values = {}
    for key, value in data.items():
        name = aliases.get(key.replace("-", "_"), key.replace("-", "_"))
        if name not in by_name:
            raise ConfigError(f"--config {path}: unknown key {key!r}")
        values[name] = _check_json_type(name, value, by_name[name].type)
    return values


def resolve_config(args):
    """TrainConfig from --config and the flags in an argparse namespace, validated."""
    values = load_json_config(args.config) if getattr(args, "config", None) else {}
    for f in fields(TrainConfig):
        if getattr(args, f.name, None) is not None:
            values[f.name] = getattr(args, f.name)
    return validate(TrainConfig(**values))
