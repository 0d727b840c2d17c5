import json
import os
import sysconfig
import tracemalloc
from pathlib import Path

import pytest
from trainer import prepare
from trainer.prepare import VAL_SEGMENT, DataError, read_meta


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def prepared_bytes(out):
    return (out / "train.bin").read_bytes(), (out / "val.bin").read_bytes()


def test_files_dirs_and_globs_become_one_sorted_byte_stream(tmp_path, capsys):
    a = write(tmp_path / "in" / "b" / "a.txt", b"alpha\n" * 50)
    b = write(tmp_path / "in" / "b" / "c.txt", "gamma \u00e9\n".encode() * 50)
    c = write(tmp_path / "other" / "z.md", b"zeta\n" * 50)
    write(tmp_path / "in" / ".hidden", b"never")
    out = tmp_path / "data"
    assert prepare.main(["--input", str(tmp_path / "in"), str(tmp_path / "oth*" / "*.md"), str(a),
                         "--out", str(out), "--val-fraction", "0.2"]) == 0
    train, val = prepared_bytes(out)
    stream = a.read_bytes() + b.read_bytes() + c.read_bytes()  # each file once, in path order
    assert train + val == stream
    assert len(val) == round(len(stream) * 0.2)
    meta = read_meta(out)
    assert meta["vocab_size"] == 256 and meta["dtype"] == "uint8" and meta["files"] == 3
    assert (meta["train_tokens"], meta["val_tokens"]) == (len(train), len(val))
    assert "3 files" in capsys.readouterr().out


def test_output_does_not_depend_on_the_chunk_size_and_val_spans_the_corpus(tmp_path):
    # three segments of distinct letters: the val split takes the tail of each
    corpus = write(tmp_path / "big.txt", b"".join(bytes([ord("a") + i]) * VAL_SEGMENT for i in range(3)))
    prepare.main(["--input", str(corpus), "--out", str(tmp_path / "one_chunk"), "--chunk-size", str(4 * VAL_SEGMENT)])
    prepare.main(["--input", str(corpus), "--out", str(tmp_path / "small_chunks"), "--chunk-size", "4093"])
    assert prepared_bytes(tmp_path / "one_chunk") == prepared_bytes(tmp_path / "small_chunks")
    _train, val = prepared_bytes(tmp_path / "small_chunks")
    assert set(val) == {ord("a"), ord("b"), ord("c")}
    assert len(val) == pytest.approx(0.1 * 3 * VAL_SEGMENT, abs=3)


def test_memory_stays_flat_while_streaming_a_large_file(tmp_path):
    corpus = write(tmp_path / "big.txt", os.urandom(16 << 20))
    tracemalloc.start()
    try:
        prepare.main(["--input", str(corpus), "--out", str(tmp_path / "data"), "--chunk-size", str(64 << 10)])
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"peak Python allocation {peak} bytes for a 16 MiB corpus"
    train, val = prepared_bytes(tmp_path / "data")
    assert len(train) + len(val) == 16 << 20


def test_unchanged_input_is_skipped_and_changed_input_redone(tmp_path, capsys):
    src = write(tmp_path / "in" / "a.txt", b"hello world\n" * 100)
    out = tmp_path / "data"
    argv = ["--input", str(tmp_path / "in"), "--out", str(out)]
    prepare.main(argv)
    meta_before = (out / "meta.json").read_bytes()
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    capsys.readouterr()

    assert prepare.main(argv) == 0
    assert "up to date" in capsys.readouterr().out
    assert (out / "meta.json").read_bytes() == meta_before
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps

    src.write_bytes(b"changed text\n" * 100)
    assert prepare.main(argv) == 0
    assert "up to date" not in capsys.readouterr().out
    assert json.loads((out / "meta.json").read_text())["fingerprint"] != json.loads(meta_before)["fingerprint"]
    assert b"".join(prepared_bytes(out)) == b"changed text\n" * 100

    prepare.main(argv + ["--val-fraction", "0.5"])  # a different split is different output
    assert len(prepared_bytes(out)[1]) == 650


def test_an_interrupted_prepare_leaves_no_meta_and_no_temp_files(tmp_path, monkeypatch):
    write(tmp_path / "in" / "a.txt", b"x" * 5000)
    out = tmp_path / "data"
    argv = ["--input", str(tmp_path / "in"), "--out", str(out), "--chunk-size", "1000"]
    prepare.main(argv)
    write(tmp_path / "in" / "b.txt", b"y" * 5000)  # new input: the old meta must not survive a failed redo

    calls = []

    def write_then_die(self, data):
        calls.append(len(data))
        if len(calls) == 3:
            raise KeyboardInterrupt
        original_write(self, data)

    original_write = prepare.SplitWriter.write
    monkeypatch.setattr(prepare.SplitWriter, "write", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        prepare.main(argv)
    assert not (out / "meta.json").exists()
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]
    with pytest.raises(DataError, match="no meta.json"):
        read_meta(out)

    monkeypatch.setattr(prepare.SplitWriter, "write", original_write)
    prepare.main(argv)
    assert sum(map(len, prepared_bytes(out))) == 10000


def test_temp_files_of_a_killed_prepare_are_removed(tmp_path):
    write(tmp_path / "in" / "a.txt", b"x" * 500)
    out = tmp_path / "data"
    write(out / ".train.bin.tmp-999", b"partial")
    prepare.main(["--input", str(tmp_path / "in"), "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train.bin", "val.bin"]


def test_default_input_is_the_standard_library(tmp_path):
    out = tmp_path / "data"
    assert prepare.main(["--out", str(out), "--max-bytes", "20000"]) == 0
    meta = read_meta(out)
    assert meta["inputs"] == ["stdlib"] and meta["train_tokens"] + meta["val_tokens"] == 20000
    files = prepare.stdlib_files()
    root = Path(sysconfig.get_paths()["stdlib"])
    assert len(files) > 100 and all(f.suffix == ".py" for f in files)
    assert not any(set(f.relative_to(root).parts) & {"site-packages", "test"} for f in files)
    first = min(f.resolve() for f in files)
    assert (out / "train.bin").read_bytes()[:100] == first.read_bytes()[:100]


@pytest.mark.parametrize("argv, message", [
    (["--input", "/nonexistent/x.txt"], "--input /nonexistent/x.txt: no such file"),
    (["--input", "/nonexistent/*.txt"], "--input /nonexistent/*.txt: no such file, directory or glob match"),
    (["--val-fraction", "0"], "--val-fraction must be between 0 and 1"),
    (["--max-bytes", "-1"], "--max-bytes must not be negative"),
])
def test_bad_arguments_name_their_flag(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        prepare.main(["--out", str(tmp_path / "data"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_read_meta_rejects_token_files_that_do_not_match(tmp_path):
    write(tmp_path / "in" / "a.txt", b"abc" * 100)
    out = tmp_path / "data"
    prepare.main(["--input", str(tmp_path / "in"), "--out", str(out)])
    with open(out / "train.bin", "ab") as f:
        f.write(b"extra")
    with pytest.raises(DataError, match="train.bin does not match meta.json"):
        read_meta(out)
