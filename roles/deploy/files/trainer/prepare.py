"""Text files -> tokens in train.bin / val.bin + meta.json (and tokenizer.json for BPE).

    python -m trainer.prepare --input PATH [PATH ...] --out DIR [--tokenizer bytes|bpe|FILE]
        [--vocab-size N] [--val-fraction F] [--max-bytes N]
    python -m trainer.prepare --tokens DIR --vocab-size N --out DIR [--tokenizer FILE]

PATH may be a file, a directory (all files below it, hidden ones skipped), a glob, or
``stdlib``: the .py files of this interpreter's standard library (the default), so a
demo model learns to write Python. Files are streamed in chunks, so memory does not grow
with the corpus. The corpus is cut into segments of about 1 MiB and the last
val-fraction of each segment goes to val.bin, so validation samples the whole corpus.

--tokenizer: ``bytes`` (the default) stores each byte as a token (vocabulary 256, uint8);
``bpe`` trains a byte-level BPE tokenizer of --vocab-size tokens on the training part of the
corpus, here and offline, and saves it as DIR/tokenizer.json; a FILE (a Hugging Face
tokenizer.json) is copied there and used. BPE token files are uint16, or uint32 for a
vocabulary over 65,536; text is read as UTF-8 (invalid bytes become U+FFFD). --tokens takes
flat train.bin / val.bin uint16 token files written elsewhere (as popular public trainers
write them) with their vocabulary size, checks them and writes the meta (and copies them when
DIR is not --out); with --tokenizer FILE, samples can be decoded.

Running again on unchanged input does nothing (the meta keeps a fingerprint of the file
paths, sizes and modification times and of the tokenizer settings). The token files are
written under temporary names and renamed; meta.json is removed first and written last, so it
only ever describes complete token files.
"""

import argparse
import bisect
import codecs
import glob
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from .fsio import atomic_file, remove_temp_files
from .tokenizer import BYTE_VOCAB, TOKENIZER_FILE, TokenizerError, load_tokenizer_file, train_bpe

FORMAT = 1
VOCAB_SIZE = BYTE_VOCAB
DTYPE = "uint8"
DEFAULT_BPE_VOCAB = 8192
MIN_BPE_VOCAB = 512
PIECE_CHARS = 1 << 16  # text tokenized at a time (cut after a newline where there is one)
ENCODE_BATCH = 128  # pieces encoded together, on every core
CHUNK_SIZE = 1 << 20
VAL_SEGMENT = 1 << 20
STDLIB = "stdlib"
STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "__pycache__"}


META_FILE = "meta.json"
SPLITS = ("train", "val")
ITEMSIZE = {"uint8": 1, "uint16": 2, "uint32": 4}


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
    if meta.get("tokenizer", "bytes") in ("bpe", "file") and not (data_dir / TOKENIZER_FILE).is_file():
        raise DataError(f"--data {data_dir}: {META_FILE} names a tokenizer but {TOKENIZER_FILE} is missing; "
                        "run python -m trainer.prepare again")
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


def fingerprint(files, val_fraction, max_bytes, tokenizer_key=()):
    """Hash of what decides the output: file paths, sizes and mtimes, the split settings and
    (other than bytes) the tokenizer's."""
    h = hashlib.sha256(json.dumps([FORMAT, val_fraction, max_bytes] + list(tokenizer_key)).encode())
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


def corpus_bytes(sizes, max_bytes):
    """The bytes of the corpus that are read: all the files' sizes, or at most max_bytes of them."""
    return min(sum(sizes), max_bytes) if max_bytes else sum(sizes)


def write_tokens(files, out_dir, val_fraction, max_bytes, chunk_size):
    """Stream files into train.bin / val.bin; return (train_tokens, val_tokens, bytes_read)."""
    sizes = [path.stat().st_size for path in files]
    total = corpus_bytes(sizes, max_bytes)
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


def token_dtype(vocab_size):
    """The narrowest unsigned type that holds every id of a vocabulary of vocab_size tokens."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def text_pieces(files, total, bounds):
    """(region, text) pieces of the first `total` bytes of files, in order, read as UTF-8 (invalid
    bytes become U+FFFD). Region r lies between bounds[r-1] and bounds[r] (split_boundaries):
    train when r is even, val when odd. No piece crosses a region's end, and a piece ends after a
    newline where there is one, so tokens are not cut mid-line."""
    offset = 0
    for path in files:
        if offset >= total:
            break
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        carry = ""
        with open(path, "rb") as f:
            left = min(path.stat().st_size, total - offset)
            while left:
                region = bisect.bisect_right(bounds, offset)
                chunk = f.read(min(PIECE_CHARS, left, bounds[region] - offset))
                if not chunk:  # the file shrank since it was listed: what was read is what it has
                    break
                offset += len(chunk)
                left -= len(chunk)
                text = carry + decoder.decode(chunk)
                if offset == bounds[region] or not left:
                    carry = ""
                    yield region, text
                    continue
                cut = text.rfind("\n") + 1
                if cut == 0 and len(text) < 4 * PIECE_CHARS:
                    carry = text
                    continue
                cut = cut or len(text)
                carry = text[cut:]
                yield region, text[:cut]
        tail = carry + decoder.decode(b"", final=True)
        if tail:
            yield bisect.bisect_right(bounds, max(0, offset - 1)), tail


def write_bpe_tokens(files, out_dir, total, bounds, tokenizer, dtype):
    """Tokenize the first `total` bytes of files with tokenizer into train.bin / val.bin of dtype,
    split at bounds (split_boundaries) as the bytes are; return (train_tokens, val_tokens, bytes_read)."""
    counts = [0, 0]
    with atomic_file(token_file(out_dir, "train")) as train_f, atomic_file(token_file(out_dir, "val")) as val_f:
        outputs, batch = (train_f, val_f), []
        # (encode_batch_fast leaves out the character offsets, which are not needed here)
        encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

        def flush():
            for (region, _text), encoding in zip(batch, encode([text for _region, text in batch])):
                ids = np.asarray(encoding.ids, dtype=dtype)
                outputs[region % 2].write(ids.tobytes())
                counts[region % 2] += len(ids)
            batch.clear()

        for piece in text_pieces(files, total, bounds):
            batch.append(piece)
            if len(batch) == ENCODE_BATCH:
                flush()
        flush()
    return counts[0], counts[1], total


def adopt_tokens(tokens_dir, out_dir, vocab_size):
    """Check flat uint16 train.bin / val.bin token files written elsewhere (every id below
    vocab_size) and copy them to out_dir unless they are there; return (train_tokens, val_tokens)."""
    counts = []
    for split in SPLITS:
        path = token_file(tokens_dir, split)
        size = path.stat().st_size
        if size % 2:
            raise PrepareError(f"--tokens {tokens_dir}: {path.name} has {size} bytes, not a whole number of uint16 tokens")
        tokens = np.memmap(path, dtype=np.uint16, mode="r") if size else np.zeros(0, dtype=np.uint16)
        for start in range(0, len(tokens), 1 << 24):
            highest = int(tokens[start:start + (1 << 24)].max())
            if highest >= vocab_size:
                raise PrepareError(f"--tokens {tokens_dir}: {path.name} holds token id {highest}, not below "
                                   f"--vocab-size {vocab_size}: give the vocabulary size its tokenizer has")
        counts.append(len(tokens))
        del tokens
        if Path(out_dir).resolve() != Path(tokens_dir).resolve():
            with open(path, "rb") as source, atomic_file(token_file(out_dir, split)) as target:
                shutil.copyfileobj(source, target, 1 << 22)
    return tuple(counts)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m trainer.prepare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", nargs="+", metavar="PATH",
                   help="files, directories, globs, or 'stdlib' (default: the Python standard library)")
    p.add_argument("--tokens", metavar="DIR", help="flat uint16 train.bin / val.bin written elsewhere, instead of --input")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for train.bin, val.bin, meta.json")
    p.add_argument("--tokenizer", default="bytes", metavar="bytes|bpe|FILE",
                   help="bytes (vocabulary 256), bpe (trained here on the corpus), or a tokenizer.json (default: bytes)")
    p.add_argument("--vocab-size", type=int, default=0,
                   help=f"tokens of the BPE to train (default {DEFAULT_BPE_VOCAB}), or of the --tokens files")
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
    named_file = args.tokenizer not in ("bytes", "bpe")
    if args.tokens:
        if args.input:
            p.error("--tokens and --input: give one (token files written elsewhere, or text to tokenize)")
        if args.tokenizer == "bpe":
            p.error("--tokens with --tokenizer bpe: token files are already tokenized; give their tokenizer.json, or none")
        if not 0 < args.vocab_size <= 1 << 16:
            p.error(f"--tokens needs --vocab-size, the vocabulary of its uint16 token files (1 to 65536; got {args.vocab_size})")
    elif args.tokenizer == "bpe":
        args.vocab_size = args.vocab_size or DEFAULT_BPE_VOCAB
        if not MIN_BPE_VOCAB <= args.vocab_size <= 1 << 31:
            p.error(f"--vocab-size must be at least {MIN_BPE_VOCAB} for --tokenizer bpe (the 256 bytes, the merges "
                    f"and <|endoftext|>; got {args.vocab_size})")
    elif args.vocab_size:
        p.error("--vocab-size is for --tokenizer bpe or --tokens: "
                + ("a tokenizer file has its own vocabulary" if named_file else "bytes have 256"))
    if named_file and not Path(args.tokenizer).is_file():
        p.error(f"--tokenizer {args.tokenizer}: not bytes, bpe, or a tokenizer.json file")
    args.input = args.input or ([] if args.tokens else [STDLIB])
    return p, args


def main(argv=None):
    parser, args = parse_args(argv)
    tokenizer_path = None if args.tokenizer in ("bytes", "bpe") else Path(args.tokenizer)
    try:
        if args.tokens:
            files = [token_file(args.tokens, split) for split in SPLITS]
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise PrepareError(f"--tokens {args.tokens}: no {' or '.join(missing)}")
        else:
            files = expand_inputs(args.input)
        tokenizer = load_tokenizer_file(tokenizer_path) if tokenizer_path else None
    except (PrepareError, TokenizerError) as e:
        parser.error(str(e))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_temp_files(out_dir)
    key = []
    if args.tokens or args.tokenizer != "bytes":
        file_digest = hashlib.sha256(tokenizer_path.read_bytes()).hexdigest() if tokenizer_path else None
        key = ["tokens" if args.tokens else "text", args.tokenizer if not tokenizer_path else "file", file_digest,
               args.vocab_size]
    digest = fingerprint(files, args.val_fraction, args.max_bytes, key)
    if not args.force and is_prepared(out_dir, digest):
        print(f"prepare: {out_dir} is up to date ({len(files)} files, fingerprint {digest[:12]}); skipped")
        return 0

    (out_dir / META_FILE).unlink(missing_ok=True)  # from here until the end, no meta: not prepared
    started = time.time()
    meta = {"format": FORMAT}
    trained_s = None
    try:
        if args.tokens:
            train_tokens, val_tokens = adopt_tokens(Path(args.tokens), out_dir, args.vocab_size)
            bytes_read, vocab_size, dtype = sum(f.stat().st_size for f in files), args.vocab_size, "uint16"
            meta.update(tokenizer="file" if tokenizer else "none")
            if tokenizer and tokenizer.get_vocab_size() > vocab_size:
                raise PrepareError(f"--tokenizer {tokenizer_path} has {tokenizer.get_vocab_size()} tokens, more than "
                                   f"--vocab-size {vocab_size}")
        elif args.tokenizer == "bytes":
            train_tokens, val_tokens, bytes_read = write_tokens(files, out_dir, args.val_fraction, args.max_bytes,
                                                                args.chunk_size)
            vocab_size, dtype = VOCAB_SIZE, DTYPE
            meta.update(tokenizer="bytes")
        else:
            total = corpus_bytes([f.stat().st_size for f in files], args.max_bytes)
            bounds = split_boundaries(total, args.val_fraction)
            if tokenizer is None:
                trained_s = time.time()
                tokenizer = train_bpe((text for region, text in text_pieces(files, total, bounds) if region % 2 == 0),
                                      args.vocab_size)
                trained_s = time.time() - trained_s
            vocab_size = tokenizer.get_vocab_size()
            dtype = token_dtype(vocab_size)
            train_tokens, val_tokens, bytes_read = write_bpe_tokens(files, out_dir, total, bounds, tokenizer, dtype)
            meta.update(tokenizer="file" if tokenizer_path else "bpe")
        if tokenizer is not None:
            with atomic_file(out_dir / TOKENIZER_FILE, "w") as f:
                f.write(tokenizer.to_str())
            meta.update(tokenizer_file=TOKENIZER_FILE, tokenizer_source=str(tokenizer_path) if tokenizer_path else None)
    except (PrepareError, TokenizerError) as e:
        parser.error(str(e))
    meta.update({
        "vocab_size": vocab_size,
        "dtype": dtype,
        "train_tokens": train_tokens,
        "val_tokens": val_tokens,
        "val_fraction": args.val_fraction,
        "max_bytes": args.max_bytes,
        "files": len(files),
        "inputs": [args.tokens] if args.tokens else args.input,
        "fingerprint": digest,
    })
    with atomic_file(out_dir / META_FILE, "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    seconds = time.time() - started
    print(f"prepare: {len(files)} files, {bytes_read:,} bytes -> train {train_tokens:,} + val {val_tokens:,} "
          f"tokens ({meta['tokenizer']}, vocabulary {vocab_size:,}, {dtype}) in {out_dir} ({seconds:.1f}s, "
          f"{bytes_read / 1e6 / max(seconds, 1e-9):.1f} MB/s"
          + (f"; the tokenizer trained in {trained_s:.1f}s" if trained_s is not None else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
