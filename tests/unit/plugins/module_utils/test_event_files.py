"""event_files: a run's progress from TensorBoard event files (written here by the real writers:
torch.utils.tensorboard's and TensorBoard's own, and by Lightning 2.6.6 and the Hugging Face
Trainer 5.25.0, tests/unit/fixtures/trainers/SOURCES.md) and Lightning's metrics.csv."""

import glob
import gzip
import json
import os
import shutil
import struct
import time

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers")


def torch_writer(log_dir, steps, histograms=False):
    """Scalars (and histograms) as torch.utils.tensorboard writes them; the file's path."""
    import torch
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(str(log_dir))
    generator = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        writer.add_scalar("train_loss", 10.0 / step, step)
        writer.add_scalar("lr-AdamW", 0.001 * step, step)
        if step % 10 == 0:
            writer.add_scalar("val_loss", 20.0 / step, step)
            if histograms:
                writer.add_histogram("weights", torch.arange(step * 10.0), step)
                # an image of noise: a record far larger than a scalar event, stepped over unread
                writer.add_image("noise", torch.rand(3, 256, 256, generator=generator), step)
    writer.add_text("note", "a text summary is a tensor of strings", steps)
    writer.close()
    return glob.glob(os.path.join(str(log_dir), "events.out.tfevents.*"))[0]


def losses(events, tag="train_loss"):
    return [(step, value) for _wall, step, scalars in events for name, value in scalars if name == tag]


def test_every_scalar_of_torch_s_writer_is_read_at_its_step_and_other_records_are_stepped_over(tmp_path):
    path = torch_writer(tmp_path, 60, histograms=True)
    events, unreadable = event_files.records(path)
    assert unreadable == 0
    assert losses(events) == [(step, pytest.approx(10.0 / step, rel=1e-6)) for step in range(1, 61)]
    assert losses(events, "val_loss") == [(step, pytest.approx(20.0 / step, rel=1e-6)) for step in range(10, 61, 10)]
    # the float32 the writer stored, with the digits it was logged with
    assert losses(events)[1] == (2, 5.0) and losses(events, "lr-AdamW")[2] == (3, 0.003)


def test_tensorboard_s_own_writer_and_scalars_kept_as_tensors(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util
    writer = EventFileWriter(str(tmp_path))
    for step in range(3):
        value = summary_pb2.Summary.Value(tag="loss", simple_value=1.5 + step)
        tensor = summary_pb2.Summary.Value(tag="train/lr", tensor=tensor_util.make_tensor_proto(0.25 * step))
        wide = summary_pb2.Summary.Value(tag="vector", tensor=tensor_util.make_tensor_proto([1.0, 2.0]))
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                         summary=summary_pb2.Summary(value=[value, tensor, wide])))
    writer.close()
    path = glob.glob(str(tmp_path / "events.out.tfevents.*"))[0]
    events, unreadable = event_files.records(path)
    assert unreadable == 0
    assert [s for _w, _s, s in events if s] == [[("loss", 1.5 + step), ("train/lr", 0.25 * step)] for step in range(3)]
    progress, _state, warnings = event_files.poll([str(tmp_path)], {})
    assert (progress["step"], progress["loss"], progress["lr"], progress["tag"]) == (2, 3.5, 0.5, "loss")
    assert warnings == []


def copy_fixture(name, directory, as_name):
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, as_name)
    shutil.copy(os.path.join(FIXTURES, name), target)
    return target


def test_lightning_s_default_logger_gives_its_loss_steps_and_learning_rate(tmp_path):
    """Lightning 2.6.6's own file: train_loss every 5 steps (it counts from 0), val_loss at each
    validation, lr-SGD from LearningRateMonitor; under Slurm in lightning_logs/version_<job>/."""
    path = copy_fixture("lightning_2.6.6.tfevents", str(tmp_path / "lightning_logs" / "version_4242"),
                        "events.out.tfevents.1796465968.vm.23609.0")
    events, unreadable = event_files.records(path)
    assert unreadable == 0
    assert [step for step, _loss in losses(events)] == [4, 9, 14, 19, 24, 29]
    progress, _state, _warnings = event_files.poll([str(tmp_path)], {})
    assert progress["step"] == 29 and progress["tag"] == "train_loss" and progress["source"] == "events"
    assert progress["val_loss"] == losses(events, "val_loss")[-1][1] and progress["lr"] == 0.1
    found = event_files.metrics_of([path], total_steps=30)
    assert found["source"] == "events" and found["tag"] == "train_loss"
    assert [(r["step"], r["total_steps"], "val_loss" in r) for r in found["records"]] == [
        (4, 30, False), (9, 30, True), (14, 30, False), (19, 30, True), (24, 30, False), (29, 30, True)]


def test_the_hugging_face_trainer_s_event_file_gives_the_steps_it_logged(tmp_path):
    path = copy_fixture("hf_trainer_5.25.0.tfevents", str(tmp_path / "out" / "runs" / "Dec05_10-20-46_vm"),
                        "events.out.tfevents.1796466046.vm.1.0")
    found = event_files.metrics_of([path])
    assert found["tag"] == "train/loss" and found["unreadable"] == 0
    assert [r["step"] for r in found["records"]] == [5, 10]
    assert all(set(r) >= {"loss", "lr", "val_loss", "tokens_per_s"} for r in found["records"]), found["records"]
    # its end-of-training average (train/train_loss) is not the loss
    events, _unreadable = event_files.records(path)
    assert [r["loss"] for r in found["records"]] == [value for _step, value in losses(events, "train/loss")]


def test_lightning_s_csv_logger(tmp_path):
    directory = tmp_path / "lightning_logs" / "version_0"
    directory.mkdir(parents=True)
    with gzip.open(os.path.join(FIXTURES, "lightning_2.6.6.metrics.csv.gz"), "rb") as handle:
        (directory / "metrics.csv").write_bytes(handle.read())
    progress, _state, _warnings = event_files.poll([str(tmp_path)], {})
    assert progress["source"] == "csv" and progress["step"] == 29 and progress["lr"] == 0.1
    found = event_files.metrics_of([str(directory / "metrics.csv")])
    assert found["source"] == "csv" and [r["step"] for r in found["records"]] == [4, 9, 14, 19, 24, 29]
    # a metrics.csv that is not in a version_* directory is none of Lightning's
    other = tmp_path / "data"
    other.mkdir()
    (other / "metrics.csv").write_text("step,train_loss\n1,2.0\n")
    assert [os.path.basename(os.path.dirname(p)) for _m, p in event_files.find([str(tmp_path)])] == ["version_0"]


def record(step, scalars, wall_time=None):
    """A serialized Event with a summary of simple values (the reference trainer's writer)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "trainer_events", os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "deploy", "files",
                                       "trainer", "events.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tf_record(module.event(wall_time or 1.0e9 + step, step=step, scalars=scalars))


def test_a_torn_last_record_is_left_for_the_next_poll_and_each_poll_reads_only_what_was_appended(tmp_path):
    log_dir = tmp_path / "tb"
    log_dir.mkdir()
    path = log_dir / "events.out.tfevents.1.host.1.0"
    whole = b"".join(record(step, {"train/loss": 1.0 / step, "train/lr": 0.5}) for step in range(1, 21))
    nxt = record(21, {"train/loss": 0.04})
    path.write_bytes(whole + nxt[:len(nxt) - 5])  # being written: cut in its data
    progress, state, warnings = event_files.poll([str(tmp_path)], {})
    assert (progress["step"], progress["loss"], warnings) == (20, 0.05, [])
    state = json.loads(json.dumps(state))  # as the watch keeps it between polls
    assert state["read"][str(path)]["offset"] == len(whole)
    # what was read is never read again: garbage there now is not seen
    path.write_bytes(b"\xff" * len(whole) + nxt + record(22, {"train/loss": 0.03}))
    progress, state, warnings = event_files.poll([str(tmp_path)], state)
    assert (progress["step"], progress["loss"], progress["lr"], warnings) == (22, 0.03, 0.5, [])
    # every cut of a record is no error
    for cut in range(1, len(nxt)):
        path.write_bytes(whole + nxt[:cut])
        events, unreadable = event_files.records(str(path))
        assert (len(events), unreadable) == (20, 0)


def test_a_file_of_a_week_s_scalars_is_read_from_its_end_where_the_first_record_is_found_by_its_crcs(tmp_path):
    path = tmp_path / "events.out.tfevents.1.host.1.0"
    block = b"".join(record(step, {"train/loss": 2.0, "train/tokens_per_s": 1000.0}) for step in range(1, 1001))
    with open(str(path), "wb") as handle:
        handle.write(b"\x00" * 3 + b"\xff" * 1000)  # what a poll never reads
        for _repeat in range(60):  # about 4.5 MB: the end's read begins inside a record
            handle.write(block)
        handle.write(record(99999, {"train/loss": 1.25, "train/tokens_per_s": 2000.0}))
    size = os.path.getsize(str(path))
    assert size > 4 * event_files.POLL_MAX_BYTES
    progress, state, _warnings = event_files.poll([str(tmp_path)], {})
    assert (progress["step"], progress["loss"], progress["tokens_per_s"]) == (99999, 1.25, 2000.0)
    assert state["read"][str(path)]["offset"] == size and state["read"][str(path)]["bad"] == 0


def test_an_event_file_whose_name_has_no_time_in_digits_0_to_9_is_taken_as_the_oldest(tmp_path):
    """Records come in the files' order, oldest first (in the report a later record of a step replaces an
    earlier one): Arabic-Indic 9 was read as time 9, a superscript 2 made int() raise."""
    newer = tmp_path / "events.out.tfevents.5.host.1.0"
    newer.write_bytes(record(1, {"loss": 2.0}))
    for name in ("events.out.tfevents.\u0669.host.1.0", "events.out.tfevents.\u00b2.host.1.0"):
        (tmp_path / name).write_bytes(record(1, {"loss": 1.0}))
        found = event_files.metrics_of([str(newer), str(tmp_path / name)])
        assert [(r["step"], r["loss"]) for r in found["records"]] == [(1, 1.0), (1, 2.0)]
        (tmp_path / name).unlink()


def test_a_damaged_record_is_counted_said_and_stepped_over(tmp_path):
    path = tmp_path / "events.out.tfevents.1.host.1.0"
    records = [record(step, {"loss": float(step)}) for step in range(1, 11)]
    damaged = bytearray(b"".join(records))
    at = sum(len(r) for r in records[:4]) + 20  # in the data of step 5
    damaged[at] ^= 0x55
    path.write_bytes(bytes(damaged))
    events, unreadable = event_files.records(str(path))
    assert [step for step, _v in losses(events, "loss")] == [1, 2, 3, 4, 6, 7, 8, 9, 10] and unreadable == 1
    progress, _state, warnings = event_files.poll([str(tmp_path)], {})
    assert progress["step"] == 10 and len(warnings) == 1 and "CRC" in warnings[0]
    # any bytes at all: no exception, no record
    path.write_bytes(os.urandom(200000) + b"\x00" * 64 + struct.pack("<Q", 2 ** 62))
    events, unreadable = event_files.records(str(path))
    assert events == []


def test_the_tag_set_wins_and_scalars_without_a_known_loss_tag_are_named(tmp_path):
    path = tmp_path / "events.out.tfevents.1.host.1.0"
    path.write_bytes(b"".join(record(step, {"objective": 3.0 / step, "acc": 0.5}) for step in range(1, 6)))
    progress, state, _warnings = event_files.poll([str(tmp_path)], {})
    assert progress is None and event_files.tags_seen(state) == ["objective", "acc"]
    progress, _state, _warnings = event_files.poll([str(tmp_path)], {}, tag="objective")
    assert (progress["step"], progress["loss"], progress["tag"]) == (5, 0.6, "objective")
    assert event_files.metrics_of([str(path)])["tags"] == ["objective", "acc"]
    assert [r["loss"] for r in event_files.metrics_of([str(path)], "objective")["records"]] == [3.0, 1.5, 1.0, 0.75, 0.6]


def test_files_are_found_newest_first_within_bounds_and_not_in_checkpoints_links_or_others_files(tmp_path):
    older = tmp_path / "src" / "lightning_logs" / "version_1"
    newer = tmp_path / "checkpoints" / "runs" / "Dec05_host"
    for directory in (older, newer, tmp_path / "checkpoints" / "checkpoint-20" / "runs",
                      tmp_path / "a" / "b" / "c" / "d"):
        directory.mkdir(parents=True)
        (directory / "events.out.tfevents.1.host.1.0").write_bytes(record(1, {"loss": 1.0}))
    os.utime(str(older / "events.out.tfevents.1.host.1.0"), (1000, 1000))
    os.symlink(str(older), str(tmp_path / "link"))
    found = [p for _mtime, p in event_files.find([str(tmp_path)])]
    assert found == [str(newer / "events.out.tfevents.1.host.1.0"), str(older / "events.out.tfevents.1.host.1.0")]
    assert event_files.find([str(tmp_path)], uid=os.getuid() + 1) == []
    assert len(event_files.find([str(tmp_path)], max_entries=3)) < 2


def test_a_fifo_or_a_link_put_where_a_file_was_found_is_refused_not_waited_on(tmp_path):
    """The watch keeps the files it found for a minute: what stands there when it reads is checked again."""
    fifo, link = str(tmp_path / "metrics.csv"), str(tmp_path / "events.out.tfevents.1.host.1.0")
    os.mkfifo(fifo)
    os.symlink("/etc/passwd", link)
    for path in (fifo, link):
        with pytest.raises(OSError):
            event_files.open_regular(path)
    state = dict(files=[fifo, link], found_at=time.time())
    assert event_files.poll([str(tmp_path)], state)[0] is None
