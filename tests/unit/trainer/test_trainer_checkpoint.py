import collections
import dataclasses
import io
import os
import pickle
import shlex
import shutil
import warnings
from dataclasses import asdict

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict
from trainer.checkpoint import (
    FORMAT,
    CheckpointError,
    CorruptCheckpoint,
    MetadataReader,
    checkpoint_path,
    clean_checkpoint_dir,
    find_checkpoint,
    list_checkpoints,
    load_latest,
    load_sharded,
    load_sharded_model,
    save_checkpoint,
    save_sharded,
    sharded_temp_path,
    strip_wrapper_prefixes,
)
from trainer.model import GPT, GPTConfig
from trainer_testing import run_module, torchrun

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


def save_sharded_here(step, ckpt_dir, keep, model=None, barrier=None, tensors=None):
    """A sharded checkpoint written by this one process (no process group: one shard)."""
    model = model or GPT(TINY)
    trainer_state = {k: v for k, v in state(step, model).items() if k != "model"}
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        return save_sharded(tensors or {"model": model.state_dict()}, trainer_state, ckpt_dir, keep, is_main=True,
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


class RunsShell:
    """Pickles as a call of os.system that creates marker: what a crafted .metadata holds."""

    def __init__(self, marker):
        self.command = f"touch {shlex.quote(str(marker))}"

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_crafted_sharded_metadata_is_refused_unrun_and_the_previous_checkpoint_resumed(tmp_path, capsys):
    ckpt_dir, marker = tmp_path / "run" / "checkpoints", tmp_path / "marker"
    save_sharded_here(4, ckpt_dir, keep=5)
    crafted = save_sharded_here(8, ckpt_dir, keep=5)
    (crafted / ".metadata").write_bytes(pickle.dumps(RunsShell(marker)))

    path, loaded = load_latest(ckpt_dir, move_aside=True)  # what a resuming run does
    assert (path.name, loaded["step"]) == ("step_000004", 4)
    assert not marker.exists()
    assert (f"{crafted} has a corrupt .metadata (UnpicklingError: it names the global posix.system, which is not "
            "one of DCP's metadata types)") in capsys.readouterr().err
    assert (ckpt_dir / "step_000008.bad").is_dir() and steps(ckpt_dir) == [4]


def test_generate_refuses_a_crafted_sharded_metadata_without_running_it(tmp_path):
    marker = tmp_path / "marker"
    path = save_sharded_here(8, tmp_path, keep=5)
    (path / ".metadata").write_bytes(pickle.dumps(RunsShell(marker)))
    result = run_module("generate", "--checkpoint", path, "--prompt", "def ")
    assert result.returncode == 2 and not marker.exists()
    assert f"{path} has a corrupt .metadata" in result.stderr and "posix.system" in result.stderr


def test_loading_the_shards_reads_the_metadata_as_strictly_as_the_check(tmp_path):
    # the .metadata replaced after the checkpoint was checked: loading reads it again
    marker = tmp_path / "marker"
    path = save_sharded_here(8, tmp_path, keep=5)
    find_checkpoint(path)
    (path / ".metadata").write_bytes(pickle.dumps(RunsShell(marker)))
    with pytest.raises(CorruptCheckpoint) as refused:
        load_sharded_model(path, GPT(TINY))
    assert str(refused.value) == (f"{path} has a corrupt .metadata (UnpicklingError: it names the global posix.system, "
                                  "which is not one of DCP's metadata types)")
    assert not marker.exists()


def test_a_shard_cut_short_after_the_check_is_refused_as_corrupt_not_as_torchs_error(tmp_path):
    path = save_sharded_here(8, tmp_path, keep=5)
    find_checkpoint(path)
    shard = path / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CorruptCheckpoint) as refused:
        load_sharded_model(path, GPT(TINY))
    assert str(refused.value).startswith(f"{path} does not load (RuntimeError: PytorchStreamReader failed")


def crafted_value(marker):
    """A value of a shard as a crafted checkpoint holds it: torch.save's pickle of a call of os.system."""
    value = io.BytesIO()
    torch.save(RunsShell(marker), value)
    return value.getvalue()


def replace_value(path, fqn, data):
    """Make the value fqn of the sharded checkpoint at path the pickle data (appended to its shard),
    its .metadata pointing there."""
    metadata = MetadataReader(path).read_metadata()
    index = next(index for index in metadata.storage_data if index.fqn == fqn)
    info = metadata.storage_data[index]
    shard = path / info.relative_path
    offset = shard.stat().st_size
    with shard.open("ab") as f:
        f.write(data)
    metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(data))
    (path / ".metadata").write_bytes(pickle.dumps(metadata))


def test_a_resume_refuses_a_crafted_optimizer_value_in_the_shards_without_running_it(tmp_path, train_args):
    out, marker = tmp_path / "run", tmp_path / "marker"
    args = [*train_args, "--parallel", "fsdp", "--out", out, "--checkpoint-interval", "4", "--no-tensorboard"]
    first = torchrun(1, *args, "--steps", 4)
    assert first.returncode == 0, first.stdout + first.stderr
    path = out / "checkpoints" / "step_000004"
    replace_value(path, "optimizer.param_groups.0.lr", crafted_value(marker))

    resumed = torchrun(1, *args, "--steps", 8)
    assert resumed.returncode != 0 and not marker.exists()
    assert (f"CorruptCheckpoint: {path}: its shard value optimizer.param_groups.0.lr names the global posix.system, "
            "which is not plain data") in resumed.stderr


def test_the_model_of_a_sharded_checkpoint_with_a_crafted_value_is_refused_without_running_it(tmp_path):
    # what generate and export load: the model's values alone
    marker = tmp_path / "marker"
    model = GPT(TINY)
    path = save_sharded_here(8, tmp_path, keep=5, tensors={"model": {**model.state_dict(), "lm_head.weight": RunsShell(marker)}})
    find_checkpoint(path)  # its metadata is DCP's
    with pytest.raises(CorruptCheckpoint) as refused:
        load_sharded_model(path, GPT(TINY))
    assert str(refused.value) == (f"{path}: its shard value model.lm_head.weight names the global posix.system, "
                                  "which is not plain data")
    assert not marker.exists()


def test_the_plain_values_of_a_sharded_optimizer_state_load_as_saved(tmp_path):
    model = GPT(TINY)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    _model_state, optimizer_state = get_state_dict(model, optimizer)
    path = save_sharded_here(8, tmp_path, keep=5, model=model, tensors={"optimizer": optimizer_state})
    target = GPT(TINY)
    _model_state, loaded = get_state_dict(target, torch.optim.AdamW(target.parameters(), lr=5.0))
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        load_sharded({"optimizer": loaded}, path)
    assert loaded["param_groups"] == optimizer_state["param_groups"]


@pytest.mark.parametrize("name", ["../outside.distcp", "{outside}", "sub/__0_0.distcp", "..", "\x1b]0;owned\x07.distcp"])
def test_a_sharded_metadata_naming_a_shard_outside_its_directory_is_refused_before_it_is_read(tmp_path, name):
    path = save_sharded_here(8, tmp_path / "checkpoints", keep=5)
    outside = tmp_path / "outside.distcp"
    (path / "__0_0.distcp").rename(outside)  # without the refusal, the checkpoint would load from it
    name = name.format(outside=outside)
    metadata = MetadataReader(path).read_metadata()
    metadata.storage_data = {index: dataclasses.replace(info, relative_path=name)
                             for index, info in metadata.storage_data.items()}
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    shown = ascii(name)[1:-1]
    expected = f"{path} has a corrupt .metadata (ValueError: its shard file {shown} is not a file name in the checkpoint directory)"
    for load in (find_checkpoint, lambda path: load_sharded_model(path, GPT(TINY))):
        with pytest.raises(CorruptCheckpoint) as refused:
            load(path)
        assert str(refused.value) == expected


def test_a_sharded_metadata_naming_a_class_outside_dcps_metadata_is_refused_with_its_name(tmp_path):
    path = save_sharded_here(8, tmp_path, keep=5)
    metadata = MetadataReader(path).read_metadata()
    metadata.planner_data = collections.OrderedDict(metadata.planner_data)
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CorruptCheckpoint, match=r"step_000008 has a corrupt \.metadata \(UnpicklingError: it names the "
                       r"global collections\.OrderedDict, which is not one of DCP's metadata types\)"):
        find_checkpoint(path)


def test_the_metadata_of_a_model_and_optimizer_checkpoint_reads_as_torchs_reader_reads_it(tmp_path):
    model = GPT(TINY)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long))[1].backward()
    optimizer.step()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    path = save_sharded_here(8, tmp_path, keep=5, tensors={"model": model_state, "optimizer": optimizer_state})
    reader = MetadataReader(path)
    ours, torchs = reader.read_metadata(), FileSystemReader(path).read_metadata()
    assert ours.storage_meta.load_id == reader.load_id
    ours.storage_meta.load_id = torchs.storage_meta.load_id
    assert ours == torchs
    assert any(key.startswith("optimizer.param_groups.") for key in ours.state_dict_metadata)


def test_the_refused_global_is_shown_with_its_control_characters_escaped(tmp_path):
    path = save_sharded_here(8, tmp_path, keep=5)
    (path / ".metadata").write_bytes(b"c\x1b]0;owned\x07os\nsystem\n(S'true'\ntR.")  # a terminal title, then os.system
    with pytest.raises(CorruptCheckpoint) as refused:
        find_checkpoint(path)
    assert r"it names the global \x1b]0;owned\x07os.system," in str(refused.value)
    assert "\x1b" not in str(refused.value) and "\x07" not in str(refused.value)


def garble_shard(path):
    """Overwrite the shard of the sharded checkpoint at path with zeros: as long as its metadata says, unreadable."""
    shard = path / "__0_0.distcp"
    shard.write_bytes(bytes(shard.stat().st_size))


@pytest.mark.parametrize("module", ["generate", "export"])
@pytest.mark.parametrize("spoil, message", [
    ("crafted", ": its shard value model.lm_head.weight names the global posix.system, which is not plain data"),
    ("garbled", " does not load ("),
])
def test_a_shard_refused_as_it_loads_ends_generate_and_export_with_the_reason_not_a_traceback(tmp_path, module, spoil, message):
    # the checkpoint's metadata and sizes are right, so it passes the check; its shard fails only as it loads
    marker, exports = tmp_path / "marker", tmp_path / "exports"
    tensors = {"model": {**GPT(TINY).state_dict(), "lm_head.weight": RunsShell(marker)}} if spoil == "crafted" else None
    path = save_sharded_here(8, tmp_path / "run" / "checkpoints", keep=5, tensors=tensors)
    if spoil == "garbled":
        garble_shard(path)
    args = ["--prompt", "def "] if module == "generate" else ["--out", exports]
    result = run_module(module, "--checkpoint", path, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"{path}{message}" in result.stderr and result.stdout == ""
    assert not marker.exists()
    if module == "export":
        assert not exports.exists() or not list(exports.iterdir())  # not even a temporary directory


def test_a_checkpoint_whose_value_names_a_global_is_refused_with_it_escaped_and_bounded(tmp_path):
    path = tmp_path / "step_000008.pt"
    path.write_bytes(b"c\x1b]0;owned\x07os\nsystem\n(S'true'\ntR.")  # a terminal title, then os.system
    with pytest.raises(CorruptCheckpoint) as refused:
        find_checkpoint(path)
    assert str(refused.value) == rf"{path} names the global \x1b]0;owned\x07os.system, which is not plain data"


@pytest.mark.parametrize("field, value", [("offset", "0"), ("offset", -1), ("offset", 1.0), ("length", True), ("length", [16])])
def test_a_sharded_metadata_with_a_shard_offset_or_length_that_is_no_whole_number_is_refused(tmp_path, field, value):
    path = save_sharded_here(8, tmp_path, keep=5)
    metadata = MetadataReader(path).read_metadata()
    metadata.storage_data = {index: dataclasses.replace(info, **{field: value}) for index, info in metadata.storage_data.items()}
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    expected = (f"{path} has a corrupt .metadata (ValueError: its shard file __0_0.distcp has the {field} {value!r}, "
                "not a whole number >= 0)")
    for load in (find_checkpoint, lambda path: load_sharded_model(path, GPT(TINY))):
        with pytest.raises(CorruptCheckpoint) as refused:
            load(path)
        assert str(refused.value) == expected


@pytest.mark.parametrize("name", ["__0_0.distcp", ".metadata", "trainer_state.pt"])
def test_a_sharded_checkpoint_file_that_links_elsewhere_is_refused_naming_it(tmp_path, name, capsys):
    ckpt_dir = tmp_path / "checkpoints"
    save_sharded_here(4, ckpt_dir, keep=5)
    path = save_sharded_here(8, ckpt_dir, keep=5)
    outside = tmp_path / name
    (path / name).rename(outside)
    (path / name).symlink_to(outside)  # the same bytes: without the refusal, the checkpoint loads
    with pytest.raises(CorruptCheckpoint) as refused:
        find_checkpoint(path)
    assert str(refused.value) == f"{path}: {name} is a symbolic link; a checkpoint's files are its own"
    found, loaded = load_latest(ckpt_dir, move_aside=True)  # what a resuming run does: the one before
    assert (found.name, loaded["step"]) == ("step_000004", 4)
    assert f"{path}: {name} is a symbolic link" in capsys.readouterr().err


def test_a_checkpoint_numbered_in_digits_of_another_script_is_not_one(tmp_path):
    save_checkpoint(state(4), tmp_path, keep=5)
    save_sharded_here(8, tmp_path, keep=5)
    # "٩٩" (Arabic-Indic 99) and "٨" (8): int() reads them, so without ASCII digits they would be step 99 and 8
    (tmp_path / "step_\u0669\u0669.pt").write_bytes((tmp_path / "step_000004.pt").read_bytes())
    shutil.copytree(tmp_path / "step_000008", tmp_path / "step_\u0668")
    assert steps(tmp_path) == [4, 8]
    found, loaded = load_latest(tmp_path)
    assert (found.name, loaded["step"]) == ("step_000008", 8)
