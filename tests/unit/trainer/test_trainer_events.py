"""TensorBoard event files of the trainer, read back by TensorBoard's own reader: the metrics
records as scalars, and one trajectory after a resume."""

import shutil

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from trainer.events import EventWriter, crc32c, masked_crc32c
from trainer_testing import losses, read_metrics, run_module


def scalars(log_dir, tag):
    """{step: value} of a tag as TensorBoard shows it (orphaned data after a restart purged)."""
    accumulator = EventAccumulator(str(log_dir), purge_orphaned_data=True)
    accumulator.Reload()
    return {e.step: e.value for e in accumulator.Scalars(tag)}


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc32c(b"") == 0 and masked_crc32c(b"") == 0xA282EAD8


def test_the_metrics_records_are_tensorboard_scalars(reference_run):
    out, _result = reference_run
    records = [r for r in read_metrics(out) if "loss" in r]
    log_dir = out / "tensorboard"
    assert list(log_dir.iterdir())[0].name.startswith("events.out.tfevents.")
    loss = scalars(log_dir, "train/loss")
    assert loss.keys() == {r["step"] for r in records}
    assert all(loss[r["step"]] == pytest.approx(r["loss"], rel=1e-6) for r in records)  # float32 in the file
    assert scalars(log_dir, "train/lr") == {r["step"]: pytest.approx(r["lr"], rel=1e-6) for r in records}
    grad_norm = scalars(log_dir, "train/grad_norm")
    assert all(grad_norm[r["step"]] == pytest.approx(r["grad_norm"], rel=1e-4) and r["grad_norm"] > 0 for r in records)
    assert scalars(log_dir, "val/loss").keys() == {r["step"] for r in records if "val_loss" in r} != set()
    assert set(scalars(log_dir, "train/tokens_per_s")) == loss.keys()


def test_a_resumed_run_shows_one_trajectory(train_args, tmp_path):
    out = tmp_path / "run"
    first = run_module("train", *train_args, "--out", out, "--steps", 12, "--checkpoint-interval", 4,
                       "--keep-checkpoints", 5, timeout=180)
    assert first.returncode == 0, first.stderr
    shutil.copytree(out, tmp_path / "uninterrupted")
    for step in (8, 12):  # as if it had stopped after step 9, with its checkpoint of step 4 the newest
        (out / "checkpoints" / f"step_{step:06d}.pt").unlink()
    again = run_module("train", *train_args, "--out", out, "--steps", 12, "--checkpoint-interval", 4, timeout=180)
    assert again.returncode == 0, again.stderr
    assert len(list((out / "tensorboard").iterdir())) == 2  # one file per start
    shown = scalars(out / "tensorboard", "train/loss")
    # steps 5-12 of the first start are gone from the display; the resumed steps are the same losses
    assert sorted(shown) == list(range(1, 13))
    assert shown == pytest.approx(losses(read_metrics(tmp_path / "uninterrupted")))


def test_no_tensorboard_writes_no_event_files(train_args, tmp_path):
    result = run_module("train", *train_args, "--out", tmp_path, "--steps", 2, "--no-tensorboard", timeout=120)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "tensorboard").exists()


def test_a_writer_leaves_out_unknown_values_and_never_reuses_a_file(tmp_path):
    first = EventWriter(tmp_path)
    first.scalars(1, {"train/loss": 2.5, "train/mfu": None})
    second = EventWriter(tmp_path)  # the same second and process: another file
    assert first.path != second.path
    first.close()
    second.close()
    assert scalars(tmp_path, "train/loss") == {1: 2.5}
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    assert accumulator.Tags()["scalars"] == ["train/loss"]
