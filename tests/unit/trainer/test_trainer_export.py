"""trainer.export and trainer.evaluate on the tiny reference run: the Hugging Face directory, read
back into the reference model with the same logits; a rerun exports nothing; the evaluation over
two ranks equals one rank's and sits within the trainer's own val loss noise. That transformers
loads the export with the same logits is the integration test's (test_after_training.py), where
transformers is installed."""

import json
import struct
from dataclasses import asdict

import pytest
import torch
from trainer import evaluate, export
from trainer.checkpoint import find_checkpoint
from trainer.hf import ExportError, byte_tokenizer_json, load_gpt2, read_safetensors, write_safetensors
from trainer.model import GPT, GPTConfig
from trainer_testing import read_metrics, run_module, trainer_env

STEP_DIR = "step_000024"


@pytest.fixture(scope="module")
def exported(reference_run, tmp_path_factory):
    out, _result = reference_run
    exports = tmp_path_factory.mktemp("exports")
    result = run_module("export", "--checkpoint", out, "--out", exports)
    assert result.returncode == 0, result.stderr
    return out, exports, json.loads(result.stdout)


def reference_logits(run_dir, idx):
    _path, state = find_checkpoint(run_dir)
    model = GPT(GPTConfig(**state["model_config"]))
    model.load_state_dict(state["model"])
    with torch.no_grad():
        return model.eval()(idx)[0]


def test_the_export_is_a_gpt2_directory_with_the_checkpoints_weights(exported):
    run_dir, exports, line = exported
    target = exports / STEP_DIR
    assert line["export"] == str(target) and line["step"] == 24 and line["exported"] is True
    assert line["checkpoint"].endswith("step_000024.pt") and line["bytes"] > 0
    assert sorted(p.name for p in target.iterdir()) == [
        "config.json", "generation_config.json", "llmtrain_export.json", "model.safetensors",
        "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["model_type"] == "gpt2"
    assert (config["n_layer"], config["n_head"], config["n_embd"], config["n_positions"]) == (2, 2, 32, 32)
    tensors, metadata = read_safetensors(target / "model.safetensors")
    assert metadata == {"format": "pt"} and "lm_head.weight" not in tensors  # tied: stored once
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D: (in, out)
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    model, codec, _config = load_gpt2(target)
    with torch.no_grad():
        assert torch.equal(model(idx)[0], reference_logits(run_dir, idx))
    assert codec.encode("def f(x): é") == list("def f(x): é".encode())


def test_the_byte_tokenizer_file_gives_the_bytes_as_ids():
    tokenizers = pytest.importorskip("tokenizers", reason="the venv's tokenizers reads the file")
    tokenizer = tokenizers.Tokenizer.from_str(json.dumps(byte_tokenizer_json()))
    text = "  def f(x):\n\treturn 'é✓'\x00\x7f"
    assert tokenizer.encode(text).ids == list(text.encode())
    assert tokenizer.decode(list(text.encode())) == text
    assert tokenizer.get_vocab_size() == 256


def test_a_rerun_exports_nothing_and_a_missing_checkpoint_is_an_error(exported, tmp_path):
    run_dir, exports, _line = exported
    before = (exports / STEP_DIR / "model.safetensors").stat().st_mtime_ns
    again = run_module("export", "--checkpoint", run_dir / "checkpoints", "--out", exports)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["exported"] is False
    assert (exports / STEP_DIR / "model.safetensors").stat().st_mtime_ns == before
    assert not [p.name for p in exports.iterdir() if p.name.startswith(".")]  # no temp dirs left
    missing = run_module("export", "--checkpoint", tmp_path / "none", "--out", tmp_path / "exports")
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr


def test_a_sharded_checkpoint_exports_the_same_model_as_its_ddp_twin(tmp_path):
    """An FSDP checkpoint is read in one process (load_sharded_model); a model without biases
    gets GPT-2's zero biases, and computes the same."""
    from torch.distributed import checkpoint as dcp  # pylint: disable=import-outside-toplevel
    cfg = GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16, bias=False)
    model = GPT(cfg)
    sharded = tmp_path / "run" / "checkpoints" / "step_000003"
    sharded.mkdir(parents=True)
    dcp.save({"model": model.state_dict()}, checkpoint_id=str(sharded), no_dist=True)
    torch.save({"format": 1, "step": 3, "model_config": asdict(cfg), "tokenizer": None}, sharded / "trainer_state.pt")
    result = run_module("export", "--checkpoint", sharded, "--out", tmp_path / "exports")
    assert result.returncode == 0, result.stderr
    tensors, _meta = read_safetensors(tmp_path / "exports" / "step_000003" / "model.safetensors")
    assert torch.equal(tensors["transformer.h.0.mlp.c_fc.bias"], torch.zeros(64))
    back, _codec, _config = load_gpt2(tmp_path / "exports" / "step_000003")
    idx = torch.arange(16).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(back(idx)[0], model.eval()(idx)[0], atol=1e-6)


@pytest.mark.parametrize("damage", ["huge header", "offset past the end", "not json"])
def test_a_damaged_safetensors_file_is_refused_not_read(tmp_path, damage):
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"a": torch.ones(4)})
    raw = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    if damage == "huge header":
        raw[:8] = struct.pack("<Q", 1 << 40)
    elif damage == "offset past the end":
        raw[8:8 + length] = raw[8:8 + length].replace(b"[0,16]", b"[0,99]").ljust(length)
    else:
        raw[8] = ord("x")
    path.write_bytes(bytes(raw))
    with pytest.raises(ExportError):
        read_safetensors(path)


def evaluate_on(ranks, exports, data_dir, out, job="41"):
    """Each rank in turn, as srun's tasks; the last one adds the parts up."""
    for rank in range(ranks):
        assert not (out / f"{STEP_DIR}.json").exists()  # not before every rank is done
        env = {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(ranks), "SLURM_JOB_ID": job}
        result = run_module("evaluate", "--model", exports, "--data", data_dir, "--out", out, "--batch-size", "3",
                            env=trainer_env(**env))
        assert result.returncode == 0, result.stderr
    return json.loads((out / f"{STEP_DIR}.json").read_text())


def test_the_evaluation_over_two_ranks_equals_one_ranks_and_the_trainers_val_loss(exported, data_dir, tmp_path):
    run_dir, exports, _line = exported
    one = evaluate_on(1, exports, data_dir, tmp_path / "one")
    two = evaluate_on(2, exports, data_dir, tmp_path / "two")
    assert one["tokens"] == two["tokens"] > 0 and two["ranks"] == 2 and two["step"] == 24
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-6)
    assert two["perplexity"] == pytest.approx(2.718281828 ** two["loss"], rel=1e-6)
    assert not list((tmp_path / "two").glob(".*"))  # the ranks' parts and the merge's lock are gone once merged
    val = [r["val_loss"] for r in read_metrics(run_dir) if r.get("step") == 24 and "val_loss" in r][0]
    # the trainer's estimate: 2 batches of 4 random windows; this: every window of the split
    assert two["loss"] == pytest.approx(val, abs=0.15), (two["loss"], val)


def test_the_merge_refuses_a_missing_rank_or_another_jobs_part(exported, data_dir, tmp_path):
    _run_dir, exports, _line = exported

    def rank(index, job):
        env = trainer_env(SLURM_PROCID=str(index), SLURM_NTASKS="2", SLURM_JOB_ID=job)
        assert run_module("evaluate", "--model", exports, "--data", data_dir, "--out", tmp_path, env=env).returncode == 0

    def merge(job):
        return run_module("evaluate", "--merge", "--model", exports, "--out", tmp_path, "--ranks", 2,
                          env=trainer_env(SLURM_JOB_ID=job))

    rank(1, "7")  # an earlier job's rank 1, whose rank 0 never wrote
    rank(0, "8")  # this job's rank 0 does not take job 7's part for its rank 1
    assert not (tmp_path / f"{STEP_DIR}.json").exists()
    merged = merge("8")
    assert merged.returncode == 2 and "is of another job or number of ranks (7, 2)" in merged.stderr
    (tmp_path / f".{STEP_DIR}.rank-1.json").unlink()
    merged = merge("8")
    assert merged.returncode == 2 and "rank 1 left no result" in merged.stderr
    assert not (tmp_path / f"{STEP_DIR}.json").exists()
    rank(1, "8")  # its own rank 1 completes the set
    assert json.loads((tmp_path / f"{STEP_DIR}.json").read_text())["job_id"] == "8"


def test_the_newest_export_is_the_one_evaluated_and_text_files_work(exported, tmp_path):
    _run_dir, exports, _line = exported
    assert evaluate.model_dir_of(exports) == exports / STEP_DIR
    text = tmp_path / "held_out.txt"
    text.write_text("def f3(x):\n    return x * 2 + 1\n\n" * 20)
    env = trainer_env(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_JOB_ID="9")
    evaluated = run_module("evaluate", "--model", exports / STEP_DIR, "--text", text, "--out", tmp_path, env=env)
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout)  # one rank: it merged its own part
    assert result == json.loads((tmp_path / f"{STEP_DIR}.json").read_text())
    assert result["text"] == str(text) and result["tokens"] == (len(text.read_text()) - 1) // 32 * 32


def nested_normalizers(depth):
    """A normalizer of `depth` Sequences one inside the other: a tokenizer.json the tokenizers package reads."""
    normalizer = {"type": "Sequence", "normalizers": []}
    for _level in range(depth):
        normalizer = {"type": "Sequence", "normalizers": [normalizer]}
    return normalizer


@pytest.mark.parametrize("spoil", ["over 64 MiB", "nested 20 Sequences deep"])
def test_a_checkpoints_tokenizer_json_past_the_bounds_of_a_file_is_refused_naming_it(tmp_path, capsys, spoil):
    pytest.importorskip("tokenizers", reason="a checkpoint's tokenizer.json is read with tokenizers first")
    if spoil == "over 64 MiB":  # JSON's blanks: a file the tokenizers package reads
        text = json.dumps(byte_tokenizer_json()) + " " * (64 * 1024 * 1024)
        message = f"its tokenizer.json holds {len(text)} bytes, more than the 67108864 of a tokenizer"
    else:
        text = json.dumps(dict(byte_tokenizer_json(), normalizer=nested_normalizers(20)))
        message = "its tokenizer.json is not readable JSON (it nests deeper than 32 levels)"
    cfg = GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16)
    path = tmp_path / "step_000003.pt"
    torch.save({"format": 1, "step": 3, "model": GPT(cfg).state_dict(), "model_config": asdict(cfg),
                "tokenizer": {"kind": "file", "vocab_size": 256, "json": text}}, path)
    with pytest.raises(SystemExit) as exit_info:
        export.main(["--checkpoint", str(path), "--out", str(tmp_path / "exports")])
    assert exit_info.value.code == 2
    assert f"--checkpoint {path}: {message}" in capsys.readouterr().err
    assert not list((tmp_path / "exports").iterdir())  # not even a temporary directory
