"""BPE and token-file data: prepare trains a byte-level BPE offline (or takes a tokenizer.json,
or flat uint16 token files written elsewhere), the trainer pads the vocabulary and carries the
tokenizer in its checkpoints, and generate decodes with it."""

import json
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from trainer import prepare
from trainer.model import GPT, GPTConfig, padded_vocab
from trainer.prepare import DataError, read_meta
from trainer.tokenizer import Codec, TokenizerError
from trainer_testing import TINY_MODEL, TINY_TRAINING, run_module


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    # varied text (the json package's source) to learn merges from, and some that is not ASCII
    shutil.copytree(Path(sysconfig.get_paths()["stdlib"]) / "json", root / "text" / "a", ignore=shutil.ignore_patterns("__pycache__"))
    write(root / "text" / "b.txt", "Grüße, naïve café — ünïcode ✓\n" * 40)
    assert prepare.main(["--input", str(root / "text"), "--out", str(root / "data"), "--tokenizer", "bpe",
                         "--vocab-size", "600"]) == 0
    return root


def corpus_of(root):
    """The text prepare reads: the files below text/, sorted by path, end to end."""
    return "".join(path.read_text(encoding="utf-8") for path in sorted((root / "text").rglob("*")) if path.is_file())


def tokens(data_dir, split, meta):
    return np.fromfile(data_dir / f"{split}.bin", dtype=meta["dtype"])


def test_bpe_prepare_writes_its_tokenizer_and_the_tokens_decode_to_the_corpus(bpe_data, capsys):
    data = bpe_data / "data"
    meta = read_meta(data)
    assert meta["tokenizer"] == "bpe" and meta["tokenizer_file"] == "tokenizer.json" and meta["dtype"] == "uint16"
    assert meta["vocab_size"] == 600  # as asked: the corpus has enough pairs to merge
    codec = Codec({"kind": "bpe", "vocab_size": meta["vocab_size"], "json": (data / "tokenizer.json").read_text()})
    train, val = tokens(data, "train", meta), tokens(data, "val", meta)
    assert len(train) == meta["train_tokens"] and len(val) == meta["val_tokens"] > 0
    assert max(train.max(), val.max()) < meta["vocab_size"]
    # one segment (the corpus is under 1 MiB): the train part, then the val part, exactly the text
    corpus = corpus_of(bpe_data)
    assert codec.decode(train.tolist()) + codec.decode(val.tolist()) == corpus
    # merges learnt: far fewer tokens than bytes
    assert meta["train_tokens"] + meta["val_tokens"] < len(corpus.encode()) / 2


def test_the_val_split_is_cut_where_the_bytes_are(bpe_data):
    meta = read_meta(bpe_data / "data")
    corpus = corpus_of(bpe_data).encode()
    codec = Codec({"kind": "bpe", "vocab_size": 600, "json": (bpe_data / "data" / "tokenizer.json").read_text()})
    val_text = codec.decode(tokens(bpe_data / "data", "val", meta).tolist()).encode()
    assert len(val_text) == round(len(corpus) * 0.1)


def test_a_tokenizer_file_gives_the_same_tokens_and_an_unchanged_input_is_skipped(bpe_data, tmp_path, capsys):
    out = tmp_path / "data"
    argv = ["--input", str(bpe_data / "text"), "--out", str(out), "--tokenizer", str(bpe_data / "data" / "tokenizer.json")]
    assert prepare.main(argv) == 0
    meta = read_meta(out)
    assert meta["tokenizer"] == "file" and meta["tokenizer_source"] == str(bpe_data / "data" / "tokenizer.json")
    for split in ("train", "val"):
        assert (out / f"{split}.bin").read_bytes() == (bpe_data / "data" / f"{split}.bin").read_bytes()
    capsys.readouterr()
    assert prepare.main(argv) == 0 and "is up to date" in capsys.readouterr().out
    # another vocabulary size is another tokenizer: prepared again
    assert prepare.main(["--input", str(bpe_data / "text"), "--out", str(out), "--tokenizer", "bpe",
                         "--vocab-size", "700"]) == 0
    assert "up to date" not in capsys.readouterr().out and read_meta(out)["tokenizer"] == "bpe"
    (out / "tokenizer.json").unlink()
    with pytest.raises(DataError, match="tokenizer.json is missing"):
        read_meta(out)


def test_bpe_train_and_generate_round_trip(bpe_data, tmp_path):
    config = write(tmp_path / "tiny.json", json.dumps(TINY_MODEL))
    out = tmp_path / "run"
    result = run_module("train", "--data", bpe_data / "data", "--config", config, *TINY_TRAINING, "--out", out,
                        "--steps", "16", "--checkpoint-interval", "8", timeout=180)
    assert result.returncode == 0, result.stderr
    state = torch.load(out / "checkpoints" / "step_000016.pt", map_location="cpu", weights_only=False)
    assert state["model_config"]["vocab_size"] == 640 == padded_vocab(600)  # a multiple of 64
    assert state["tokenizer"]["kind"] == "bpe" and state["tokenizer"]["vocab_size"] == 600
    assert state["tokenizer"]["json"] == (bpe_data / "data" / "tokenizer.json").read_text()
    generated = run_module("generate", "--checkpoint", out, "--prompt", "def f1(x):", "--prompt", "Grüße",
                           "--max-new-tokens", "40", "--temperature", "1.0", "--top-k", "0", "--json", timeout=120)
    assert generated.returncode == 0, generated.stderr
    assert "tokenizer bpe BPE, 600 tokens" in generated.stderr
    completions = [r["completion"] for r in json.loads(generated.stdout)]
    assert all(len(c) >= 20 for c in completions), completions  # 40 tokens of one or more characters each
    codec = Codec(state["tokenizer"])  # what generate decodes with: the data's tokenizer, from the checkpoint
    for prompt in ("def f1(x):", "Grüße"):
        assert codec.decode(codec.encode(prompt)) == prompt
    assert len(codec.encode("def f1(x):\n    return x")) < len("def f1(x):\n    return x") / 2


def test_sampling_never_picks_a_padding_token():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=padded_vocab(70), block_size=8, n_layer=1, n_head=1, n_embd=8)).eval()
    with torch.no_grad():
        model.lm_head.weight[70:] += 100.0  # the padding rows would win every draw
        out = model.generate(torch.zeros((1, 1), dtype=torch.long), 50, temperature=1.0, top_k=0,
                             generator=torch.Generator().manual_seed(1), vocab_size=70)
    assert int(out.max()) < 70


def test_token_files_from_elsewhere_are_checked_and_adopted(tmp_path, capsys):
    flat = tmp_path / "flat"
    flat.mkdir()
    rng = np.random.default_rng(0)
    rng.integers(0, 300, 5000, dtype=np.uint16).tofile(flat / "train.bin")
    rng.integers(0, 300, 500, dtype=np.uint16).tofile(flat / "val.bin")
    out = tmp_path / "data"
    assert prepare.main(["--tokens", str(flat), "--vocab-size", "300", "--out", str(out)]) == 0
    meta = read_meta(out)
    assert (meta["tokenizer"], meta["vocab_size"], meta["dtype"], meta["train_tokens"], meta["val_tokens"]) == (
        "none", 300, "uint16", 5000, 500)
    assert (out / "train.bin").read_bytes() == (flat / "train.bin").read_bytes()
    # in place: only the meta is written
    assert prepare.main(["--tokens", str(flat), "--vocab-size", "300", "--out", str(flat)]) == 0
    assert read_meta(flat)["train_tokens"] == 5000
    with pytest.raises(SystemExit):
        prepare.main(["--tokens", str(flat), "--vocab-size", "256", "--out", str(tmp_path / "other")])
    assert "holds token id 29" in capsys.readouterr().err  # an id of 256 or more: named with the fix
    with pytest.raises(TokenizerError, match="--tokenizer PATH"):
        Codec({"kind": "none", "vocab_size": 300, "json": None})


@pytest.mark.parametrize("argv, message", [
    (["--tokenizer", "bpe", "--vocab-size", "100"], "--vocab-size must be at least 512 for --tokenizer bpe"),
    (["--vocab-size", "1000"], "--vocab-size is for --tokenizer bpe or --tokens: bytes have 256"),
    (["--tokenizer", "/nonexistent/tokenizer.json"], "--tokenizer /nonexistent/tokenizer.json: not bytes, bpe"),
    (["--tokens", "/tmp"], "--tokens needs --vocab-size"),
    (["--tokens", "/tmp", "--vocab-size", "300", "--input", "x"], "--tokens and --input: give one"),
    (["--tokens", "/tmp", "--vocab-size", "300", "--tokenizer", "bpe"], "--tokens with --tokenizer bpe"),
])
def test_bad_tokenizer_arguments_name_their_flag(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        prepare.main(["--out", str(tmp_path / "data"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_vocabulary_sizes_pick_the_token_type_and_the_padding():
    assert [prepare.token_dtype(n) for n in (256, 50257, 65536, 65537, 200000)] == [
        "uint16", "uint16", "uint16", "uint32", "uint32"]
    assert [padded_vocab(n) for n in (256, 257, 50257, 600)] == [256, 320, 50304, 640]


def test_checkpoints_of_another_tokenizer_are_not_resumed_on_this_data(bpe_data, data_dir, tmp_path):
    config = write(tmp_path / "tiny.json", json.dumps(TINY_MODEL))
    out = tmp_path / "run"
    first = run_module("train", "--data", data_dir, "--config", config, *TINY_TRAINING, "--out", out, "--steps", "4",
                       timeout=120)
    assert first.returncode == 0, first.stderr
    again = run_module("train", "--data", bpe_data / "data", "--config", config, *TINY_TRAINING, "--out", out,
                       "--steps", "8", timeout=120)
    assert again.returncode == 2
    assert "were trained on tokens of another tokenizer (bytes, 256 tokens) than --data" in again.stderr
    assert "(bpe, 600 tokens): prepare the data as before, or train into another --out" in again.stderr
