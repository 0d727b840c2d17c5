import warnings
from dataclasses import asdict

import pytest
import torch
from trainer.checkpoint import (
    FORMAT,
    CheckpointError,
    checkpoint_path,
    clean_checkpoint_dir,
    find_checkpoint,
    list_checkpoints,
    load_latest,
    load_sharded_model,
    save_checkpoint,
    save_sharded,
    sharded_temp_path,
    strip_wrapper_prefixes,
)
from trainer.model import GPT, GPTConfig

TINY = GPTConfig(vocab_size=256, block_size=16, n_layer=1, n_head=2, n_embd=16)


def state(step, model=None):
    model = model or GPT(TINY)
    return {"format": FORMAT, "step": step, "model": model.state_dict(), "model_config": asdict(TINY)}


def steps(ckpt_dir):
    return [s for s, _path in list_checkpoints(ckpt_dir)]


def test_save_keeps_the_newest_and_leaves_no_temp_files(tmp_path):
    for step in (10, 20, 30, 40, 50):
        path = save_checkpoint(state(step), tmp_path, keep=2)
        assert path == checkpoint_path(tmp_path, step) == tmp_path / f"step_{step:06d}.pt"
    assert steps(tmp_path) == [40, 50]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000040.pt", "step_000050.pt"]


def test_saving_an_earlier_step_never_removes_the_later_ones(tmp_path):
    for step in (10, 20, 30):
        save_checkpoint(state(step), tmp_path, keep=5)
    save_checkpoint(state(25), tmp_path, keep=2)
    assert steps(tmp_path) == [20, 25, 30]  # keep-K counts up to the step saved


def test_numbering_past_six_digits_sorts_by_value(tmp_path):
    save_checkpoint(state(999_999), tmp_path, keep=5)
    save_checkpoint(state(1_000_000), tmp_path, keep=5)
    path, loaded = load_latest(tmp_path)
    assert loaded["step"] == 1_000_000 and path.name == "step_1000000.pt"


def test_a_truncated_newest_checkpoint_falls_back_to_the_previous(tmp_path, capsys):
    model = GPT(TINY)
    save_checkpoint(state(10, model), tmp_path, keep=5)
    save_checkpoint(state(20), tmp_path, keep=5)
    newest = checkpoint_path(tmp_path, 20)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    (tmp_path / "step_000030.pt").write_bytes(b"not a checkpoint")

    path, loaded = load_latest(tmp_path)
    assert path == checkpoint_path(tmp_path, 10) and loaded["step"] == 10
    assert all(torch.equal(loaded["model"][k], v) for k, v in model.state_dict().items())
    err = capsys.readouterr().err
    assert "step_000030.pt does not load" in err and "step_000020.pt does not load" in err


def test_a_dict_that_is_not_a_checkpoint_does_not_load(tmp_path, capsys):
    save_checkpoint(state(1), tmp_path, keep=5)
    torch.save({"step": 2}, tmp_path / "step_000002.pt")
    assert load_latest(tmp_path)[1]["step"] == 1
    assert "not a trainer checkpoint" in capsys.readouterr().err


def test_no_loadable_checkpoint_is_an_error_not_a_fresh_start(tmp_path):
    assert load_latest(tmp_path / "missing") == (None, None)
    (tmp_path / "step_000005.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="none of the 1 checkpoints"):
        load_latest(tmp_path)


def test_partial_writes_are_cleaned_and_never_listed(tmp_path):
    save_checkpoint(state(4), tmp_path, keep=5)
    (tmp_path / ".step_000008.pt.tmp-4242").write_bytes(b"half")
    assert steps(tmp_path) == [4]
    clean_checkpoint_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["step_000004.pt"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # emitted by importing torch.compile's machinery
def test_compiled_and_ddp_state_dicts_load_into_a_plain_model(tmp_path):
    source = GPT(TINY)
    compiled = torch.compile(source)  # lazy: nothing is compiled until it is called
    compiled_keys = compiled.state_dict()
    assert all(k.startswith("_orig_mod.") for k in compiled_keys)
    ddp_of_compiled = {"module." + k: v for k, v in compiled_keys.items()}
    for i, sd in enumerate((compiled_keys, ddp_of_compiled)):
        torch.save({"format": FORMAT, "step": i + 1, "model": sd, "model_config": asdict(TINY)},
                   tmp_path / f"step_00000{i + 1}.pt")
        _path, loaded = find_checkpoint(tmp_path / f"step_00000{i + 1}.pt")
        target = GPT(TINY)
        target.load_state_dict(loaded["model"])  # strict: every key must match
        assert all(torch.equal(a, b) for a, b in zip(target.state_dict().values(), source.state_dict().values()))
    assert strip_wrapper_prefixes({"_orig_mod.module.lm_head.weight": 1}) == {"lm_head.weight": 1}


def test_find_checkpoint_accepts_run_dir_checkpoints_dir_and_file(tmp_path):
    ckpt_dir = tmp_path / "run" / "checkpoints"
    save_checkpoint(state(3), ckpt_dir, keep=5)
    save_checkpoint(state(6), ckpt_dir, keep=5)
    assert find_checkpoint(tmp_path / "run")[1]["step"] == 6
    assert find_checkpoint(ckpt_dir)[1]["step"] == 6
    assert find_checkpoint(ckpt_dir / "step_000003.pt")[1]["step"] == 3
    with pytest.raises(CheckpointError, match="no checkpoints"):
        find_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no such file"):
        find_checkpoint(tmp_path / "nope")


def save_sharded_here(step, ckpt_dir, keep, model=None, barrier=None):
    """A sharded checkpoint written by this one process (no process group: one shard)."""
    model = model or GPT(TINY)
    trainer_state = {k: v for k, v in state(step, model).items() if k != "model"}
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        return save_sharded({"model": model.state_dict()}, trainer_state, ckpt_dir, keep, is_main=True,
                            barrier=barrier)


def test_no_rank_writes_a_sharded_checkpoint_before_rank_0_has_cleared_its_temporary_directory(tmp_path):
    # A rank that reaches the checkpoint before rank 0 makes the temporary directory; rank 0's
    # clearing of a stale one must come before that (the ranks wait for each other in between),
    # or it removes the directory under the other ranks' shards.
    stale = sharded_temp_path(tmp_path, 8)
    stale.mkdir()
    (stale / "__0_0.distcp").write_bytes(b"half")
    seen = []
    save_sharded_here(8, tmp_path, keep=2, barrier=lambda: seen.append(stale.exists()))
    assert seen == [False]  # the barrier came once, after the stale directory was gone
    assert [p.name for _s, p in list_checkpoints(tmp_path)] == ["step_000008"]


def test_keep_counts_files_and_sharded_directories_alike(tmp_path):
    save_checkpoint(state(4), tmp_path, keep=2)
    save_sharded_here(8, tmp_path, keep=2)
    assert [p.name for _s, p in list_checkpoints(tmp_path)] == ["step_000004.pt", "step_000008"]
    save_sharded_here(12, tmp_path, keep=2)
    save_checkpoint(state(16), tmp_path, keep=2)
    assert [p.name for _s, p in list_checkpoints(tmp_path)] == ["step_000012", "step_000016.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000012", "step_000016.pt"]  # no temp left


def test_a_sharded_checkpoint_loads_into_a_plain_model_without_a_process_group(tmp_path):
    source = GPT(TINY)
    path = save_sharded_here(3, tmp_path / "run" / "checkpoints", keep=2, model=source)
    found, loaded = find_checkpoint(tmp_path / "run")
    assert (found, loaded["step"], "model" in loaded) == (path, 3, False)  # the weights stay in the shards
    assert find_checkpoint(path)[0] == path
    target = GPT(TINY)
    load_sharded_model(path, target)
    assert all(torch.equal(a, b) for a, b in zip(target.state_dict().values(), source.state_dict().values()))


def test_a_sharded_checkpoint_with_a_truncated_shard_is_moved_aside(tmp_path, capsys):
    save_sharded_here(4, tmp_path, keep=5)
    save_sharded_here(8, tmp_path, keep=5)
    shard = tmp_path / "step_000008" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    path, loaded = load_latest(tmp_path, move_aside=True)
    assert (path.name, loaded["step"]) == ("step_000004", 4)
    assert "step_000008: shard __0_0.distcp has 100 bytes of" in capsys.readouterr().err
    assert (tmp_path / "step_000008.bad" / "__0_0.distcp").exists()
    assert steps(tmp_path) == [4]


def test_a_partial_sharded_directory_is_cleaned_and_never_listed(tmp_path):
    save_sharded_here(4, tmp_path, keep=5)
    partial = tmp_path / ".step_000008.tmp-sharded"
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"half")
    assert steps(tmp_path) == [4]
    clean_checkpoint_dir(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["step_000004"]
