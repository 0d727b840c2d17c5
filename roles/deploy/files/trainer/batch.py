"""Batch inference: every prompt of a JSON-lines file, shared out over the ranks of one job.

    python -m trainer.batch --model DIR --prompts FILE --out DIR [--max-new-tokens N] [--temperature T]
        [--top-k K] [--seed S] [--device auto|cpu|cuda] [--rank R --world W]
    python -m trainer.batch --merge --prompts FILE --out DIR

Each line of FILE is one prompt: {"prompt": TEXT} with, optionally, "max_new_tokens", "temperature",
"top_k", "seed" (the defaults are the options of the same names) and "id" (a string or a number,
copied to its record). Prompt i (its line, from 0) goes to rank i mod world; --rank and --world
default to the job's (RANK or SLURM_PROCID, WORLD_SIZE or SLURM_NTASKS).

Each rank appends one JSON record per finished prompt to its own part file,
OUT/parts/w<world>/rank-<rank>.jsonl, written whole in one append: {"index", "id" (when given),
"prompt", "completion", "tokens", "prompt_tokens", "truncated", "max_new_tokens", "capped",
"finish", "seed", "temperature", "top_k", "seconds", "rank", "world", "node"}. A rank that starts again (a
requeued or rerun job) first reads the part files that can hold its prompts (its own, and those of
earlier starts with another world size), ignores a torn last line, and generates only the prompts
that have no record. Every prompt is sampled with a generator seeded by its own seed, so its text
does not depend on which rank made it, nor on the other prompts.

Bounds: max_new_tokens is at most --max-new-tokens (a prompt asking more gets that many and its
record says "capped": true); a prompt longer than the model's context keeps its last tokens (the
record says how many were dropped, "truncated"). Generation stops early at the tokenizer's
end-of-text token ("finish": "end_of_text", else "length").

--merge, once every rank ended: OUT/generations.jsonl, the records in the prompts' order (one per
prompt), and OUT/summary.json (prompts, tokens, seconds, tokens/s per rank and overall); it fails,
naming the prompts without a record, while any is missing.

The model: a GPT-2 directory (what trainer.export writes) is loaded into the reference model
(trainer.hf); any other Hugging Face causal LM directory with transformers, where it is installed.
"""

import argparse
import json
import math
import os
import re
import socket
import sys
import time
from array import array
from pathlib import Path

import torch

from .fsio import atomic_file
from .hf import MAX_INT, json_number, json_value, load_model
from .model import TEMPERATURES, sample_next, temperature_ok

EMPTY_PROMPT = "\n"  # an empty prompt starts the text as if after a newline (as trainer.generate)
# The prompts file is read by every rank; the play refuses a larger one before anything is submitted.
MAX_PROMPTS_BYTES = 64 * 1024 * 1024
# A part file's line longer than this is no record of ours (a record is its prompt, at most the
# prompts file, and its completion).
MAX_RECORD_BYTES = MAX_PROMPTS_BYTES + 16 * 1024 * 1024
PARTS = "parts"
GENERATIONS = "generations.jsonl"
SUMMARY = "summary.json"
# every record starts with its index (records are written with it first), so that a reader learns
# whose a record is without decoding the rest of it
INDEX = re.compile(rb'^\{"index": (\d{1,18}),')
SETTINGS = {"max_new_tokens": int, "temperature": float, "top_k": int, "seed": int}
# the numbers of a record that merge adds up or sorts by: absent, or of this kind, 0 to MAX_INT
RECORD_NUMBERS = {"tokens": int, "seconds": float, "rank": int, "world": int}


class BatchError(ValueError):
    """Bad input (a prompts line, a model directory); the message says which and why."""


# --- prompts --------------------------------------------------------------------------------------

def prompt_lines(path):
    """The lines of the prompts file (bytes, without their line ends), bounded in size."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_PROMPTS_BYTES:
        raise BatchError(f"{path} holds {size} bytes, more than the {MAX_PROMPTS_BYTES} a prompts file may")
    with open(path, "rb") as handle:
        data = handle.read(MAX_PROMPTS_BYTES + 1)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file's last line end
    return lines


def parse_prompt(line, number, defaults):
    """The prompt of one line (bytes; number counts from 1) and its settings, defaults filled in."""
    try:
        item = json_value(line)
    except ValueError as e:
        raise BatchError(f"line {number} is not JSON ({str(e)[:200]})") from None
    if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
        raise BatchError(f"line {number} is not an object with a string \"prompt\"")
    prompt = dict(defaults, prompt=item["prompt"])
    for name, kind in SETTINGS.items():
        if name in item:
            value = item[name]
            # 1e309 reads as an infinity: no number; a seed torch takes, and any count, fits in 64 bits
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or (kind is int and value != int(value))):
                raise BatchError(f"line {number}: {name} {value!r} is not a {'whole ' if kind is int else ''}number")
            if name == "temperature" and not temperature_ok(value):
                raise BatchError(f"line {number}: temperature {value!r} is out of range: give {TEMPERATURES}")
            if not (1 if name == "max_new_tokens" else 0) <= value <= MAX_INT:
                raise BatchError(f"line {number}: {name} {value!r} is out of range")
            prompt[name] = kind(value)
    if "id" in item:
        if isinstance(item["id"], bool) or not isinstance(item["id"], (str, int)):
            raise BatchError(f"line {number}: id {item['id']!r} is not a string or a whole number")
        prompt["id"] = item["id"]
    return prompt


# --- part files -----------------------------------------------------------------------------------

def part_path(out, rank, world):
    return Path(out) / PARTS / f"w{world}" / f"rank-{rank:05d}.jsonl"


def part_files(out, rank=None, world=None):
    """The part files that can hold records of the prompts of rank (of world): its own, and, of an
    earlier start with world size w, those of the ranks r with r = rank mod gcd(w, world). Without
    rank: every part file."""
    parts = Path(out) / PARTS
    if not parts.is_dir():
        return []
    found = []
    for directory in sorted(parts.iterdir()):
        match = re.fullmatch(r"w([0-9]{1,9})", directory.name)  # not \d: int() takes any script's digits
        if not match or not directory.is_dir() or directory.is_symlink():
            continue
        size = int(match.group(1))
        if rank is None:
            found.extend(sorted(p for p in directory.glob("rank-*.jsonl") if p.is_file() and not p.is_symlink()))
            continue
        step = math.gcd(size, world)
        found.extend(p for p in (directory / f"rank-{r:05d}.jsonl" for r in range(rank % step, size, step)) if p.is_file())
    return found


def read_records(path):
    """(offset, line) of each whole line of a part file, bounded in length: a torn last line (a rank
    killed while it wrote) and an over-long line are skipped."""
    with open(path, "rb") as handle:
        offset = 0
        while True:
            line = handle.readline(MAX_RECORD_BYTES + 1)
            if not line:
                return
            start, offset = offset, offset + len(line)
            if len(line) > MAX_RECORD_BYTES:  # skip the rest of it
                while line and not line.endswith(b"\n"):
                    line = handle.readline(1024 * 1024)
                    offset += len(line)
                continue
            if line.endswith(b"\n"):
                yield start, line


def whole_record(line, count):
    """The record on line (bytes) when it is a whole record of one of count prompts, else None."""
    match = INDEX.match(line)
    if not match or int(match.group(1)) >= count:
        return None
    try:
        record = json_value(line)
    except ValueError:
        return None
    if (not isinstance(record, dict) or record.get("index") != int(match.group(1))
            or not isinstance(record.get("completion"), str)
            or not all(record.get(name) is None or json_number(record[name], kind) for name, kind in RECORD_NUMBERS.items())):
        return None
    return record


def done_indices(out, rank, world, count):
    """The indices of rank's prompts (of count) that some start already made."""
    done = set()
    for path in part_files(out, rank, world):
        for _offset, line in read_records(path):
            match = INDEX.match(line)
            if not match:
                continue
            index = int(match.group(1))
            if index % world == rank and index not in done and whole_record(line, count) is not None:
                done.add(index)
    return done


def open_part(path):
    """The rank's part file, open to append; a torn last line an earlier start left is cut off first
    (only this rank writes the file), so that the next record starts on a line of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        begin = max(0, end - 65536)
        chunk = os.pread(fd, end - begin, begin)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = begin + newline + 1
            break
        end = begin
    if end != size:
        os.ftruncate(fd, end)
    return fd


def append_record(fd, record):
    """One record, written whole with O_APPEND (a write of a line at the end)."""
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@torch.no_grad()
def generate(model, prompt, cap, device):
    """The record of one prompt (dict from parse_prompt), less index, rank and world."""
    begin = time.monotonic()
    ids = model.encode(prompt["prompt"]) or model.encode(EMPTY_PROMPT)
    truncated = max(0, len(ids) - model.block_size)
    ids = ids[truncated:]
    asked = prompt["max_new_tokens"]
    max_new = min(asked, cap)
    temperature, top_k = prompt["temperature"], prompt["top_k"]
    generator = torch.Generator(device=device).manual_seed(prompt["seed"])
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    new, finish = [], "length"
    for _token in range(max_new):  # the sampling of GPT.generate, token by token
        logits = model.forward(idx[:, -model.block_size:])[:, -1, :]
        next_token = sample_next(logits, temperature, top_k, generator, model.vocab_size)
        idx = torch.cat((idx, next_token), dim=1)
        new.append(int(next_token))
        if new[-1] == model.end_of_text:
            finish = "end_of_text"
            break
    record = {"prompt": prompt["prompt"], "completion": model.decode(new), "tokens": len(new), "prompt_tokens": len(ids),
              "truncated": truncated, "max_new_tokens": max_new, "capped": asked > cap, "finish": finish,
              "seed": prompt["seed"], "temperature": temperature, "top_k": top_k}
    if "id" in prompt:
        record = {"id": prompt["id"], **record}
    record["seconds"] = round(time.monotonic() - begin, 6)
    return record


# --- the two modes ------------------------------------------------------------------------------

def rank_device(choice):
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    return torch.device("cuda", local % torch.cuda.device_count())


def run_rank(args):
    lines = prompt_lines(args.prompts)
    count, rank, world = len(lines), args.rank, args.world
    done = done_indices(args.out, rank, world, count)
    missing = [i for i in range(rank, count, world) if i not in done]
    print(f"batch: rank {rank} of {world}: {len(missing)} of {len(range(rank, count, world))} prompts to generate",
          file=sys.stderr, flush=True)
    if not missing:
        return 0
    defaults = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_k": args.top_k,
                "seed": args.seed}
    prompts = {i: parse_prompt(lines[i], i + 1, defaults) for i in missing}  # checked before the model loads
    del lines
    device = rank_device(args.device)
    model = load_model(args.model, device)
    if rank == 0:
        print(f"batch: {args.model} ({model.describe}) on {device}", file=sys.stderr, flush=True)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    fd = open_part(part_path(args.out, rank, world))
    try:
        for index in missing:
            record = generate(model, prompts.pop(index), args.max_new_tokens, device)
            append_record(fd, {"index": index, **record, "rank": rank, "world": world, "node": node})
    finally:
        os.close(fd)
    return 0


def merge(prompts, out):
    """Write OUT/generations.jsonl and OUT/summary.json from the part files; (written, missing)."""
    count = len(prompt_lines(prompts))
    files = part_files(out)
    # where each prompt's first record lies: (file, offset, length), in arrays (flat per prompt)
    which, offsets, lengths = array("i", [-1]) * count, array("q", [0]) * count, array("q", [0]) * count
    ranks, duplicates = {}, 0
    for number, path in enumerate(files):
        for offset, line in read_records(path):
            record = whole_record(line, count)
            if record is None:
                continue
            index = record["index"]
            if which[index] >= 0:
                duplicates += 1
                continue
            which[index], offsets[index], lengths[index] = number, offset, len(line)
            key = (record.get("world"), record.get("rank"))
            stats = ranks.setdefault(key, {"rank": key[1], "world": key[0], "prompts": 0, "tokens": 0, "seconds": 0.0})
            stats["prompts"] += 1
            stats["tokens"] += int(record.get("tokens") or 0)
            stats["seconds"] += float(record.get("seconds") or 0.0)
    missing = [i for i in range(count) if which[i] < 0]
    if missing:
        return False, missing
    handles = [open(path, "rb") for path in files]  # pylint: disable=consider-using-with
    try:
        with atomic_file(Path(out) / GENERATIONS) as target:
            for index in range(count):
                source = handles[which[index]]
                source.seek(offsets[index])
                target.write(source.read(lengths[index]))
    finally:
        for handle in handles:
            handle.close()
    per_rank = sorted(ranks.values(), key=lambda s: (s["world"] or 0, s["rank"] or 0))
    for stats in per_rank:
        stats["seconds"] = round(stats["seconds"], 3)
        stats["tokens_per_second"] = round(stats["tokens"] / stats["seconds"], 3) if stats["seconds"] else None
    tokens = sum(s["tokens"] for s in per_rank)
    busiest = max((s["seconds"] for s in per_rank), default=0.0)
    summary = {"prompts": count, "tokens": tokens, "seconds": round(sum(s["seconds"] for s in per_rank), 3),
               "busiest_rank_seconds": busiest, "ranks": len(per_rank),
               # what the allocation made: every rank at work at once, the busiest one sets the pace
               "tokens_per_second": round(tokens / busiest, 3) if busiest else None,
               "tokens_per_second_per_rank": round(tokens / busiest / len(per_rank), 3) if busiest else None,
               "duplicates": duplicates, "per_rank": per_rank}
    with atomic_file(Path(out) / SUMMARY, "w") as handle:
        handle.write(json.dumps(summary, indent=1) + "\n")
    return True, summary


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m trainer.batch", description=__doc__.split("\n\n", maxsplit=1)[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--prompts", required=True, metavar="FILE", help="JSON lines, one prompt each")
    p.add_argument("--out", required=True, metavar="DIR", help="the batch's directory: part files, generations, summary")
    p.add_argument("--merge", action="store_true", help="write generations.jsonl and summary.json once all ranks ended")
    p.add_argument("--model", metavar="DIR", help="a Hugging Face model directory (trainer.export's)")
    p.add_argument("--max-new-tokens", type=int, default=200, help="a prompt's default, and the most any prompt gets")
    p.add_argument("--temperature", type=float, default=0.8, help=f"a prompt's default: {TEMPERATURES}")
    p.add_argument("--top-k", type=int, default=50, help="a prompt's default; sample from the k most likely tokens, 0 all")
    p.add_argument("--seed", type=int, default=1337, help="a prompt's default seed")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: the rank's GPU if there is one")
    p.add_argument("--rank", type=int, default=int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))))
    p.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1"))))
    args = p.parse_args(argv)
    if not args.merge and not args.model:
        p.error("--model DIR is needed to generate (or --merge)")
    for name in ("temperature", "top_k", "seed"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative (got {getattr(args, name)})")
    if not temperature_ok(args.temperature):
        p.error(f"--temperature must be {TEMPERATURES} (got {args.temperature})")
    if args.max_new_tokens < 1:
        p.error(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
    if not 0 <= args.rank < args.world:
        p.error(f"--rank {args.rank} is not a rank of --world {args.world}")
    return p, args


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        if not args.merge:
            return run_rank(args)
        complete, result = merge(args.prompts, args.out)
    except (ValueError, OSError) as e:  # BatchError, and a model or tokenizer that cannot be read
        parser.error(str(e))
    if not complete:
        print(f"batch: {len(result)} prompt(s) have no record yet (first: line {result[0] + 1}): run the batch again, "
              "it generates only those", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({k: v for k, v in result.items() if k != "per_rank"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
