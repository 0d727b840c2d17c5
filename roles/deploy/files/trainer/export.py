"""Export a checkpoint as a Hugging Face model directory (trainer.hf says what it holds).

    python -m trainer.export --checkpoint PATH --out DIR

--checkpoint is a run directory, its checkpoints/ directory, or one checkpoint (a step_*.pt file
or an FSDP step_*/ directory, read in this one process). The model goes to DIR/step_<N>/, written
as a hidden directory beside it and renamed into place once complete, so a reader never sees half
of one. An export that is already there, of the same checkpoint, is kept: nothing is written.
It prints one line of JSON: {"export", "step", "checkpoint", "exported", "bytes", "seconds"}.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from .checkpoint import NAME, TRAINER_STATE, CheckpointError, find_checkpoint, is_sharded, load_sharded_model
from .fsio import TEMP_MARK, atomic_file, fsync_dir
from .hf import (CONFIG, EXPORT_RECORD, GENERATION_CONFIG, WEIGHTS, gpt2_config, generation_config, read_json,
                 tokenizer_files, to_gpt2_weights, write_safetensors, ExportError)
from .model import GPT, GPTConfig
from .tokenizer import Codec, TokenizerError


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m trainer.export", description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--checkpoint", required=True, metavar="PATH",
                   help="run dir, checkpoints dir, checkpoint file or sharded checkpoint dir")
    p.add_argument("--out", required=True, metavar="DIR", help="the exports' directory: the model goes to DIR/step_<N>/")
    return p, p.parse_args(argv)


def identity(path):
    """What tells a checkpoint from another of the same name without reading it: its resolved path,
    step, and its file's (a sharded one's trainer state's) size and modification time."""
    path = Path(path).resolve()
    stat = (path / TRAINER_STATE if is_sharded(path) else path).stat()
    return {"checkpoint": str(path), "step": int(NAME.match(path.name).group(1)), "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns}


def export_record(path, state):
    return dict(identity(path), tokens_seen=int(state.get("tokens_seen") or 0), model_config=state["model_config"],
                tokenizer=(state.get("tokenizer") or {"kind": "bytes"}).get("kind"))


def existing(target, path):
    """Whether target is a complete export of the checkpoint at path (its record names the same
    identity): then nothing is read."""
    try:
        record = read_json(Path(target) / EXPORT_RECORD, EXPORT_RECORD)
        return {k: record.get(k) for k in ("checkpoint", "step", "size", "mtime_ns")} == identity(path) and \
            (Path(target) / WEIGHTS).is_file()
    except (ExportError, OSError):
        return False


def weights_of(path, state):
    """GPT-2's tensors of the checkpoint: from its state dict as it is (a DDP file's), or through a
    model the sharded checkpoint is loaded into."""
    model_config = state["model_config"]
    if not is_sharded(path):
        return to_gpt2_weights(state.pop("model"), model_config)
    model = GPT(GPTConfig(**model_config))
    load_sharded_model(path, model)
    return to_gpt2_weights(model.state_dict(), model_config)


def write_export(target, path, state, record):
    """Write the export of the checkpoint (path, state) to target, through a hidden temp directory.
    What the checkpoint holds is read (ExportError, CheckpointError) before anything is written."""
    codec = Codec(state.get("tokenizer"))
    model_config = state["model_config"]
    files = {CONFIG: json.dumps(gpt2_config(model_config, codec), indent=2),
             GENERATION_CONFIG: json.dumps(generation_config(codec, int(model_config["vocab_size"])), indent=2)}
    files.update(tokenizer_files(state.get("tokenizer"), model_config["block_size"]))
    files[EXPORT_RECORD] = json.dumps(record, indent=2)
    tensors = weights_of(path, state)
    temp = target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}")  # removed by remove_temp_files if left
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    write_safetensors(temp / WEIGHTS, tensors, metadata={"format": "pt"})
    del tensors
    for name, text in files.items():
        with atomic_file(temp / name, "w") as handle:
            handle.write(text + "\n")
    fsync_dir(temp)
    if target.exists():  # an export of another checkpoint of the same step (a run trained again)
        shutil.rmtree(target)
    temp.rename(target)
    fsync_dir(target.parent)


def main(argv=None):
    parser, args = parse_args(argv)
    begin = time.monotonic()
    given = Path(args.checkpoint)
    path = given if NAME.match(given.name) and given.exists() else None
    target = Path(args.out) / f"step_{int(NAME.match(given.name).group(1)):06d}" if path else None
    exported = not (path and existing(target, path))
    if exported:
        try:
            path, state = find_checkpoint(args.checkpoint)
            Codec(state.get("tokenizer"))  # a tokenizer that cannot be written fails before anything is
        except (CheckpointError, TokenizerError) as e:
            parser.error(str(e))
        record = export_record(path, state)
        target = Path(args.out) / f"step_{record['step']:06d}"
        exported = not existing(target, path)
        if exported:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                write_export(target, path, state, record)
            except CheckpointError as e:  # its shards, read only now: a crafted value, a shard cut since the check
                parser.error(str(e))
            except ExportError as e:
                parser.error(f"--checkpoint {path}: {e}")
    size = sum(f.stat().st_size for f in target.iterdir() if f.is_file())
    record = identity(path)
    print(json.dumps({"export": str(target), "step": record["step"], "checkpoint": record["checkpoint"],
                      "exported": exported, "bytes": size, "seconds": round(time.monotonic() - begin, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
