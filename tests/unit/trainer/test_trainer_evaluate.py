"""trainer.evaluate's merge of the ranks' part files: the parts of a job add up; a part that is no
rank's sums (unreadable, nested past json's recursion, numbers no sum takes) is named, never a traceback;
a rank whose loss is no number says so and writes no part."""

import json

import pytest
from tiny_gpt2 import tiny_gpt2_dir
from trainer import evaluate

JOB = "5"


def part(rank, **changes):
    return dict({"job": JOB, "rank": rank, "world": 2, "loss_sum": 10.0 * (rank + 1), "tokens": 20, "windows": 2,
                 "block_size": 8, "text": "held_out.txt", "seconds": 0.5 + rank}, **changes)


@pytest.fixture(name="model_dir")
def model_dir_fixture(tmp_path):
    """What --merge reads of a model directory: that it is one (and, without an export record, its name)."""
    path = tmp_path / "step_000024"
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


def merge(model_dir, out, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", JOB)
    return evaluate.main(["--merge", "--model", str(model_dir), "--out", str(out), "--ranks", "2"])


def test_the_parts_of_a_job_add_up(model_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for rank in range(2):
        evaluate.part_path(out, model_dir.name, rank).write_text(json.dumps(part(rank)) + "\n")
    assert merge(model_dir, out, monkeypatch) == 0
    result = json.loads((out / f"{model_dir.name}.json").read_text())
    assert json.loads(capsys.readouterr().out) == result
    assert (result["loss"], result["tokens"], result["windows"], result["ranks"], result["seconds"]) == (0.75, 40, 4, 2, 1.5)
    assert not list(out.glob(".*"))


@pytest.mark.parametrize("text, message", [
    pytest.param("[" * 50000, "it nests deeper than 32 levels", id="50000 [ (a part is at most 64 KiB)"),
    (json.dumps(part(1)).replace("20.0", "1e309"), "loss_sum: not what a rank writes"),
    (json.dumps(part(1)).replace("20.0", "NaN"), "NaN is no number JSON allows"),
    (json.dumps(part(1, tokens="20", windows=-2)), "tokens, windows: not what a rank writes"),
    (json.dumps(part(1, block_size=2 ** 63)), "block_size: not what a rank writes"),
    (json.dumps({k: v for k, v in part(1).items() if k != "text"}), "text: not what a rank writes"),
    ('{"job": "5", "world": 2, "loss_sum": ', "Expecting value"),
    ("[]", "not a JSON object"),
    (b'{"job": "\xff"}', "'utf-8' codec can't decode byte 0xff"),
])
def test_a_part_that_is_no_ranks_sums_is_named(model_dir, tmp_path, monkeypatch, capsys, text, message):
    out = tmp_path / "out"
    out.mkdir()
    evaluate.part_path(out, model_dir.name, 0).write_text(json.dumps(part(0)) + "\n")
    bad = evaluate.part_path(out, model_dir.name, 1)
    if isinstance(text, bytes):
        bad.write_bytes(text)
    else:
        bad.write_text(text)
    assert merge(model_dir, out, monkeypatch) == 2
    assert f"evaluate: rank 1 left no readable result ({bad}: {message}" in capsys.readouterr().err
    assert not (out / f"{model_dir.name}.json").exists()


def test_a_rank_whose_loss_is_not_finite_says_so_and_writes_no_part(tmp_path, monkeypatch, capsys):
    model_dir, _model = tiny_gpt2_dir(tmp_path / "step_000003", fill=float("nan"))
    text = tmp_path / "held_out.txt"
    text.write_text("def f(x):\n    return x\n" * 4)
    for name, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": JOB}.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    assert evaluate.main(["--model", str(model_dir), "--text", str(text), "--out", str(out), "--device", "cpu"]) == 2
    assert (f"evaluate: rank 0: the loss over 88 tokens of {text} is nan: the model's logits are not finite numbers"
            in capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.parametrize("name", ["step_\u0669\u0669", "step_\u00b2"])  # "٩٩": Arabic-Indic 99; "²": a digit int() refuses
def test_an_export_numbered_in_digits_of_another_script_is_not_the_newest(model_dir, name):
    other = model_dir.parent / name
    other.mkdir()
    (other / "config.json").write_text("{}")
    (other / "model.safetensors").write_bytes(b"")
    assert evaluate.model_dir_of(model_dir.parent) == model_dir
