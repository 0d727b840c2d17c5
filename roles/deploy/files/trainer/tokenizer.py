"""Tokenizers: bytes (vocabulary 256, no file), or a byte-level BPE kept as ``tokenizer.json``
(Hugging Face ``tokenizers`` format), trained offline on the corpus by ``trainer.prepare`` or
given as a file.

A prepared data directory says which in its meta (``tokenizer``: ``bytes``, ``bpe``, ``file``,
or ``none`` for token files prepared elsewhere with no tokenizer given), and holds
``tokenizer.json`` unless it is ``bytes`` or ``none``. The trainer copies that into every
checkpoint (:func:`tokenizer_record`), so ``trainer.generate`` needs nothing but the checkpoint.
"""

from pathlib import Path

TOKENIZER_FILE = "tokenizer.json"
BYTE_VOCAB = 256
END_OF_TEXT = "<|endoftext|>"


class TokenizerError(ValueError):
    """A tokenizer cannot be made or loaded; the message says what to do."""


def _tokenizers():
    try:
        import tokenizers  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise TokenizerError("a BPE tokenizer needs the Python package 'tokenizers' in the interpreter that runs the "
                             "trainer (pip install tokenizers; with the collection's venv, add it to "
                             "deploy_venv_packages)") from None
    return tokenizers


def train_bpe(texts, vocab_size):
    """A byte-level BPE tokenizer with `vocab_size` tokens (the 256 byte symbols, END_OF_TEXT and
    the merges learnt from `texts`, an iterable of str), trained here with no download."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[END_OF_TEXT],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_tokenizer_file(path):
    """The Hugging Face tokenizer saved as `path` (a tokenizer.json)."""
    tk = _tokenizers()
    try:
        return tk.Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises its own exception types
        raise TokenizerError(f"{path} is not a readable tokenizer.json ({e})") from None


def tokenizer_record(data_dir, meta):
    """What decodes the model's tokens, as a checkpoint keeps it: {kind, vocab_size, json}, json
    being the text of the data directory's tokenizer.json (None for bytes and none)."""
    kind = meta.get("tokenizer", "bytes")
    path = Path(data_dir) / TOKENIZER_FILE
    text = path.read_text(encoding="utf-8") if kind not in ("bytes", "none") and path.is_file() else None
    return {"kind": kind, "vocab_size": int(meta["vocab_size"]), "json": text}


class Codec:
    """Text <-> token ids with the tokenizer a checkpoint recorded."""

    def __init__(self, record=None):
        record = record or {"kind": "bytes", "vocab_size": BYTE_VOCAB, "json": None}  # checkpoints from before BPE
        self.kind, self.vocab_size = record["kind"], int(record["vocab_size"])
        self._hf = None
        if self.kind != "bytes":
            if not record.get("json"):
                raise TokenizerError("the checkpoint's data was prepared from token files with no tokenizer: give "
                                     "its tokenizer.json (--tokenizer PATH)")
            tk = _tokenizers()
            self._hf = tk.Tokenizer.from_str(record["json"])

    @classmethod
    def from_file(cls, path):
        """A codec for the tokenizer.json at `path`."""
        tokenizer = load_tokenizer_file(path)
        return cls({"kind": "file", "vocab_size": tokenizer.get_vocab_size(),
                    "json": Path(path).read_text(encoding="utf-8")})

    def encode(self, text):
        if self._hf is None:
            return list(text.encode("utf-8"))
        return self._hf.encode(text).ids

    def decode(self, ids):
        if self._hf is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self._hf.decode(list(ids), skip_special_tokens=False)

    def token_id(self, token):
        """The id of a special token (END_OF_TEXT) in this tokenizer, or None (the byte tokenizer has none)."""
        return None if self._hf is None else self._hf.token_to_id(token)

    def describe(self):
        return "bytes" if self._hf is None else f"{self.kind} BPE, {self.vocab_size} tokens"
