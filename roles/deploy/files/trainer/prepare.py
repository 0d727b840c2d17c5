"""Text files -> byte-level tokens (vocab 256) in train.bin / val.bin + meta.json.

    python -m trainer.prepare --input PATH [PATH ...] --out DIR [--val-fraction F] [--max-bytes N]

PATH may be a file, a directory (all files below it, hidden ones skipped), a glob, or
``stdlib``: the .py files of this interpreter's standard library (the default), so a
demo model learns to write Python. Files are streamed in chunks, so memory does not grow
with the corpus. The corpus is cut into segments of about 1 MiB and the last
val-fraction of each segment goes to val.bin, so validation samples the whole corpus.

Running again on unchanged input does nothing (the meta keeps a fingerprint of the file
paths, sizes and modification times). The token files are written under temporary names
and renamed; meta.json is removed first and written last, so it only ever describes
complete token files.
"""

import argparse
import glob
import hashlib
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

from .fsio import atomic_file, remove_temp_files

FORMAT = 1
VOCAB_SIZE = 256
DTYPE = "uint8"
CHUNK_SIZE = 1 << 20
VAL_SEGMENT = 1 << 20
STDLIB = "stdlib"
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "__pycache__"}


META_FILE = "meta.json"
SPLITS = ("train", "val")
ITEMSIZE = {"uint8": 1, "uint16": 2}


class PrepareError(ValueError):
    pass


class DataError(ValueError):
    """A prepared data directory cannot be used; the message says what to fix."""


def token_file(data_dir, split):
    return Path(data_dir) / f"{split}.bin"


def read_meta(data_dir):
    """The meta of a prepared data directory, after checking that its token files are complete.

    This is the format contract with trainer.train: train.bin and val.bin hold flat token
    arrays of meta["dtype"]; meta.json is written last, so it only describes complete files.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"--data {data_dir}: no such directory")
    meta_path = data_dir / META_FILE
    if not meta_path.is_file():
        raise DataError(f"--data {data_dir}: no {META_FILE}; prepare it first with python -m trainer.prepare --out {data_dir}")
    try:
        meta = json.loads(meta_path.read_text())
        sizes = {split: int(meta[f"{split}_tokens"]) * ITEMSIZE[meta["dtype"]] for split in SPLITS}
        int(meta["vocab_size"])
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"--data {data_dir}: unreadable {META_FILE} ({e!r}); run python -m trainer.prepare again") from None
    for split, size in sizes.items():
        path = token_file(data_dir, split)
        if not path.is_file() or path.stat().st_size != size:
            raise DataError(f"--data {data_dir}: {path.name} does not match {META_FILE}; run python -m trainer.prepare again")
    return meta


def stdlib_files():
    """The standard library's own .py files (not installed packages, not its test suite)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in STDLIB_SKIP_DIRS]
        found += [Path(dirpath, name) for name in filenames if name.endswith(".py")]
    return found


def files_below(directory):
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found += [Path(dirpath, name) for name in filenames if not name.startswith(".")]
    return found


def expand_inputs(specs):
    """Files named by specs (files, directories, globs, 'stdlib'), absolute, sorted, each once."""
    files = []
    for spec in specs:
        if spec == STDLIB:
            files += stdlib_files()
            continue
        matches = sorted(glob.glob(spec, recursive=True)) if glob.has_magic(spec) else [spec]
        matches = [Path(m) for m in matches if Path(m).exists()]
        if not matches:
            raise PrepareError(f"--input {spec}: no such file, directory or glob match")
        for match in matches:
            files += files_below(match) if match.is_dir() else [match]
    files = sorted({f.resolve() for f in files if f.is_file()})
    if not files:
        raise PrepareError(f"--input {' '.join(specs)}: no files found")
    return files


def fingerprint(files, val_fraction, max_bytes):
    """Hash of what decides the output: file paths, sizes and mtimes, and the split settings."""
    h = hashlib.sha256(json.dumps([FORMAT, val_fraction, max_bytes]).encode())
    for path in files:
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def is_prepared(out_dir, expected_fingerprint):
    """True when out_dir holds complete token files made from input with this fingerprint."""
    try:
        return read_meta(out_dir).get("fingerprint") == expected_fingerprint
    except DataError:
        return False


def split_boundaries(total, val_fraction):
    """Stream offsets where the destination alternates train -> val -> train ... .

    The stream is cut into about-VAL_SEGMENT-sized segments; each ends with its val share.
    """
    segments = max(1, -(-total // VAL_SEGMENT))
    bounds = []
    for i in range(segments):
        start, end = total * i // segments, total * (i + 1) // segments
        bounds += [end - round((end - start) * val_fraction), end]
    return bounds


class SplitWriter:
    """Route a byte stream to the train and val files at precomputed boundaries."""

    def __init__(self, train_file, val_file, bounds):
        self.outputs = (train_file, val_file)
        self.bounds = bounds
        self.region = 0
        self.offset = 0
        self.counts = [0, 0]

    def write(self, data):
        view = memoryview(data)
        while view:
            room = self.bounds[self.region] - self.offset
            if room == 0:
                self.region += 1
                continue
            piece = view[:room]
            self.outputs[self.region % 2].write(piece)
            self.counts[self.region % 2] += len(piece)
            self.offset += len(piece)
            view = view[len(piece):]


def write_tokens(files, out_dir, val_fraction, max_bytes, chunk_size):
    """Stream files into train.bin / val.bin; return (train_tokens, val_tokens, bytes_read)."""
    sizes = [path.stat().st_size for path in files]
    total = min(sum(sizes), max_bytes) if max_bytes else sum(sizes)
    with atomic_file(token_file(out_dir, "train")) as train_f, atomic_file(token_file(out_dir, "val")) as val_f:
        writer = SplitWriter(train_f, val_f, split_boundaries(total, val_fraction))
        remaining = total
        for path, size in zip(files, sizes):
            if remaining == 0:
                break
            with open(path, "rb") as f:
                left_in_file = min(size, remaining)  # a file that grew since stat is read as it was
                while left_in_file:
                    chunk = f.read(min(chunk_size, left_in_file))
                    if not chunk:
                        break
                    writer.write(chunk)
                    left_in_file -= len(chunk)
                    remaining -= len(chunk)
    train_tokens, val_tokens = writer.counts
    return train_tokens, val_tokens, train_tokens + val_tokens


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m trainer.prepare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", nargs="+", default=[STDLIB], metavar="PATH",
                   help="files, directories, globs, or 'stdlib' (default: the Python standard library)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for train.bin, val.bin, meta.json")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of the corpus for validation (default: 0.1)")
    p.add_argument("--max-bytes", type=int, default=0, help="use at most this many bytes of input; 0: all")
    p.add_argument("--chunk-size", type=int, default=CHUNK_SIZE, help="bytes read per chunk (default: 1 MiB)")
    p.add_argument("--force", action="store_true", help="prepare again even if the input is unchanged")
    args = p.parse_args(argv)
    if not 0.0 < args.val_fraction < 1.0:
        p.error(f"--val-fraction must be between 0 and 1 (got {args.val_fraction})")
    if args.max_bytes < 0:
        p.error(f"--max-bytes must not be negative (got {args.max_bytes})")
    if args.chunk_size <= 0:
        p.error(f"--chunk-size must be positive (got {args.chunk_size})")
    return p, args


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        files = expand_inputs(args.input)
    except PrepareError as e:
        parser.error(str(e))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_temp_files(out_dir)
    digest = fingerprint(files, args.val_fraction, args.max_bytes)
    if not args.force and is_prepared(out_dir, digest):
        print(f"prepare: {out_dir} is up to date ({len(files)} files, fingerprint {digest[:12]}); skipped")
        return 0

    (out_dir / META_FILE).unlink(missing_ok=True)  # from here until the end, no meta: not prepared
    started = time.time()
    train_tokens, val_tokens, bytes_read = write_tokens(files, out_dir, args.val_fraction, args.max_bytes, args.chunk_size)
    meta = {
        "format": FORMAT,
        "tokenizer": "bytes",
        "vocab_size": VOCAB_SIZE,
        "dtype": DTYPE,
        "train_tokens": train_tokens,
        "val_tokens": val_tokens,
        "val_fraction": args.val_fraction,
        "max_bytes": args.max_bytes,
        "files": len(files),
        "inputs": args.input,
        "fingerprint": digest,
    }
    with atomic_file(out_dir / META_FILE, "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"prepare: {len(files)} files, {bytes_read:,} bytes -> train {train_tokens:,} + val {val_tokens:,} "
          f"tokens ({DTYPE}) in {out_dir} ({time.time() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
