"""Held-out loss and perplexity of an exported model, over every rank of a job.

    srun python -m trainer.evaluate --model DIR (--data DATA_DIR | --text FILE) --out DIR [--max-tokens N]
    python -m trainer.evaluate --merge --model DIR --out DIR --ranks N

--model is a Hugging Face model directory (an export of trainer.export, or a GPT-2 another trainer
saved), or a directory of exports (step_<N>/), whose newest is taken. The text is the validation
split of a directory trainer.prepare wrote (--data; its tokens are the model's), or a UTF-8 text
file encoded with the model's tokenizer (--text). It is cut into consecutive windows of the
model's block size (at most --max-tokens targets in all); rank r of N (SLURM_PROCID and
SLURM_NTASKS, or RANK and WORLD_SIZE) takes windows r, r+N, ..., and writes its sums to
OUT/.step_<N>.rank-<r>.json; the rank that writes the job's last part adds the ranks' sums of this
job (SLURM_JOB_ID) into OUT/step_<N>.json (--merge does the same by hand): {loss, perplexity, tokens, windows, ranks, model, step, text, seconds}, the
loss being the mean over every target token, as the trainer's val loss is over its windows.
"""

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .fsio import atomic_file
from .hf import EXPORT_RECORD, ExportError, is_model_dir, json_number, json_value, load_model, read_json
from .prepare import read_meta, token_file

MAX_TEXT_BYTES = 1 << 30  # a --text file past this is cut (with --max-tokens, far more than is read)
MAX_PART_BYTES = 1 << 16
# the numbers of a rank's part that the merge adds up: of this kind, 0 to MAX_INT
PART_NUMBERS = {"loss_sum": float, "tokens": int, "windows": int, "block_size": int, "seconds": float}


class EvaluateError(RuntimeError):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m trainer.evaluate", description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--model", required=True, metavar="DIR", help="an exported model, or a directory of step_<N>/ exports")
    text = p.add_mutually_exclusive_group()
    text.add_argument("--data", metavar="DIR", help="a prepared data directory: its validation split")
    text.add_argument("--text", metavar="FILE", help="a UTF-8 text file")
    p.add_argument("--out", required=True, metavar="DIR", help="where step_<N>.json goes")
    p.add_argument("--max-tokens", type=int, default=1_000_000, help="target tokens evaluated at most, over all ranks")
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward pass")
    p.add_argument("--merge", action="store_true", help="add up the ranks' sums into step_<N>.json")
    p.add_argument("--ranks", type=int, help="with --merge: the number of ranks that evaluated")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = p.parse_args(argv)
    if not args.merge and not (args.data or args.text):
        p.error("give the text: --data DIR or --text FILE")
    if args.merge and not args.ranks:
        p.error("--merge needs --ranks N")
    if args.max_tokens < 1 or args.batch_size < 1:
        p.error("--max-tokens and --batch-size must be positive")
    return p, args


def model_dir_of(path):
    """The model directory of --model: itself, or the newest step_<N>/ export inside it."""
    path = Path(path)
    if is_model_dir(path):
        return path
    # ASCII digits: isdigit() and int() take any script's (and isdigit() superscripts, which int() refuses)
    steps = sorted((int(p.name[5:]), p) for p in path.glob("step_*") if re.fullmatch("[0-9]+", p.name[5:]) and is_model_dir(p)) \
        if path.is_dir() else []
    if not steps:
        raise EvaluateError(f"--model {path}: neither a model directory (config.json and model.safetensors) nor a "
                            "directory of step_<N>/ exports")
    return steps[-1][1]


def model_name(model_dir):
    """(step_<N> name, step or None) of a model directory: from the export's record, else its own name."""
    try:
        step = int(read_json(Path(model_dir) / EXPORT_RECORD, EXPORT_RECORD)["step"])
        return f"step_{step:06d}", step
    except (ExportError, KeyError, TypeError, ValueError):
        return Path(model_dir).name, None


def rank_and_world():
    env = os.environ
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    return int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1))


def read_tokens(args, model, needed):
    """The tokens to evaluate (at most `needed`; a text file encoded with the model's tokenizer), as a
    1-D int64 array, and what they are."""
    if args.data:
        meta = read_meta(args.data)
        if not meta.get("val_tokens"):
            raise EvaluateError(f"--data {args.data} has no validation split (val_tokens is 0): give --text FILE")
        tokens = np.memmap(token_file(args.data, "val"), dtype=meta["dtype"], mode="r")
        return np.asarray(tokens[:needed], dtype=np.int64), f"the validation split of {args.data}"
    with open(args.text, "rb") as handle:
        text = handle.read(MAX_TEXT_BYTES).decode("utf-8", errors="replace")
    return np.asarray(model.encode(text)[:needed], dtype=np.int64), str(args.text)


@torch.no_grad()
def evaluate_rank(forward, tokens, block, rank, world, batch_size, device):
    """(sum of the losses, targets, windows) of this rank's windows of tokens."""
    n_windows = max(0, (len(tokens) - 1) // block)
    mine = list(range(rank, n_windows, world))
    total, count = 0.0, 0
    for first in range(0, len(mine), batch_size):
        starts = np.asarray(mine[first:first + batch_size]) * block
        index = starts[:, None] + np.arange(block + 1)
        chunk = torch.from_numpy(tokens[index]).to(device)
        logits = forward(chunk[:, :-1]).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), chunk[:, 1:].reshape(-1), reduction="sum")
        total += loss.item()
        count += chunk[:, 1:].numel()
    return total, count, len(mine)


def part_path(out, name, rank):
    return Path(out) / f".{name}.rank-{rank}.json"


def read_parts(out, name, ranks, job):
    """Every rank's part of this job, or EvaluateError naming the first missing, unreadable or foreign one."""
    parts = []
    for rank in range(ranks):
        path = part_path(out, name, rank)
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_PART_BYTES:
            raise EvaluateError(f"rank {rank} left no result ({path})")
        try:
            part = json_value(path.read_bytes())
        except ValueError as e:
            raise EvaluateError(f"rank {rank} left no readable result ({path}: {str(e)[:200]})") from None
        if not isinstance(part, dict):
            raise EvaluateError(f"rank {rank} left no readable result ({path}: not a JSON object)")
        if part.get("job") != job or part.get("world") != ranks:
            raise EvaluateError(f"{path} is of another job or number of ranks ({part.get('job')}, {part.get('world')})")
        wrong = [field for field, kind in PART_NUMBERS.items() if not json_number(part.get(field), kind)]
        wrong += [] if isinstance(part.get("text"), str) else ["text"]
        if wrong:
            raise EvaluateError(f"rank {rank} left no readable result ({path}: {', '.join(wrong)}: not what a rank writes)")
        parts.append(part)
    return parts


def write_result(out, name, step, model_dir, parts, job):
    """Add up the parts into OUT/<name>.json; the parts are removed."""
    ranks = len(parts)
    tokens = sum(int(p["tokens"]) for p in parts)
    if tokens == 0:
        raise EvaluateError("no window of the text was evaluated: it is shorter than the model's block size plus one")
    loss = sum(float(p["loss_sum"]) for p in parts) / tokens
    result = {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "tokens": tokens,
              "windows": sum(int(p["windows"]) for p in parts), "block_size": parts[0]["block_size"],
              "ranks": ranks, "model": str(model_dir), "step": step, "text": parts[0]["text"],
              "seconds": max(float(p["seconds"]) for p in parts), "job_id": job}
    with atomic_file(Path(out) / f"{name}.json", "w") as handle:
        handle.write(json.dumps(result, indent=2) + "\n")
    for rank in range(ranks):
        part_path(out, name, rank).unlink(missing_ok=True)
    print(json.dumps(result), flush=True)
    return result


def merge(args):
    model_dir = model_dir_of(args.model)
    name, step = model_name(model_dir)
    job = os.environ.get("SLURM_JOB_ID", "")
    write_result(args.out, name, step, model_dir, read_parts(args.out, name, args.ranks, job), job)
    return 0


def merge_when_complete(out, name, step, model_dir, world, job):
    """The rank whose part completes the job's set adds them up: each rank looks once its own part
    is written, so the last to write sees every part; where two see them at once, the one that
    creates the merge's lock file merges. No process of its own, no barrier."""
    try:
        parts = read_parts(out, name, world, job)
    except (EvaluateError, OSError, ValueError):
        return  # a rank still at work: it merges
    lock = Path(out) / f".{name}.merge-{job or 'local'}"
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return
    try:
        write_result(out, name, step, model_dir, parts, job)
    finally:
        lock.unlink(missing_ok=True)


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        if args.merge:
            return merge(args)
        begin = time.monotonic()
        rank, world = rank_and_world()
        device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("SLURM_LOCALID", os.environ.get("LOCAL_RANK", 0))) % torch.cuda.device_count())
        model_dir = model_dir_of(args.model)
        model = load_model(model_dir, device, dtype=torch.float32)
        tokens, what = read_tokens(args, model, args.max_tokens + 1)
        total, count, windows = evaluate_rank(model.forward, tokens, model.block_size, rank, world, args.batch_size, device)
        if not math.isfinite(total):  # a part holds numbers JSON allows, and a loss of NaN means nothing
            raise EvaluateError(f"rank {rank}: the loss over {count} tokens of {what} is {total}: the model's logits "
                                "are not finite numbers")
        name, step = model_name(model_dir)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        part = {"job": os.environ.get("SLURM_JOB_ID", ""), "rank": rank, "world": world, "loss_sum": total,
                "tokens": count, "windows": windows, "block_size": model.block_size, "text": what,
                "seconds": round(time.monotonic() - begin, 3)}
        with atomic_file(part_path(args.out, name, rank), "w") as handle:
            handle.write(json.dumps(part) + "\n")
        print(f"evaluate: rank {rank}/{world}: {count} tokens of {what}, {model_dir}", file=sys.stderr, flush=True)
        merge_when_complete(args.out, name, step, model_dir, world, part["job"])
    except (EvaluateError, ExportError, OSError, ValueError) as e:
        print(f"evaluate: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
