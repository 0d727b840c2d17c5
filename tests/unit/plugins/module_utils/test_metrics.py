import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import metrics


def loss_records(count, **extra):
    return [dict(step=i, total_steps=100, loss=4.0 - i / 100, lr=3e-4, tokens_per_s=5000.0, elapsed_s=i,
                 eta_s=100 - i, **extra) for i in range(1, count + 1)]


def jsonl(records):
    return "".join(json.dumps(r) + "\n" for r in records)


def test_last_metrics_record_skips_a_half_written_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(jsonl(loss_records(50)) + '{"step": 51, "lo')
    records, unreadable = metrics.tail_records(str(path))
    assert [r["step"] for r in records] == list(range(35, 51)) and unreadable == 0
    progress = metrics.progress_of(records)
    assert progress["step"] == 50 and progress["loss"] == 3.5 and progress["percent"] == 50.0
    assert progress["val_loss"] is None and progress["event"] is None
    assert metrics.progress_of([]) is None


def test_progress_keeps_the_last_metrics_and_names_the_last_event(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [dict(step=100, total_steps=100, loss=2.1, lr=1e-4, tokens_per_s=9000.0, elapsed_s=16.0, eta_s=0.0),
             dict(event="checkpoint", step=100, path="x"), dict(event="done", step=100, tokens_seen=921600)]
    path.write_text(jsonl(lines))
    progress = metrics.progress_of(metrics.tail_records(str(path))[0])
    assert progress["loss"] == 2.1 and progress["step"] == 100 and progress["percent"] == 100.0
    assert progress["event"] == "done" and progress["event_step"] == 100


def test_a_long_record_is_read_whole(tmp_path):
    # a script's own per-node map: 5,000 characters and more in one loss record
    nodes = dict(("node-%03d" % i, dict(work_ms=200.0 + i, wait_ms=10.0)) for i in range(120))
    path = tmp_path / "metrics.jsonl"
    path.write_text(jsonl(loss_records(20, nodes=nodes)))
    records, unreadable = metrics.tail_records(str(path), block=4096)
    assert len(json.dumps(records[-1])) > 5000 and unreadable == 0
    assert [r["step"] for r in records] == list(range(5, 21)) and records[-1]["nodes"] == nodes


def test_lines_that_are_no_record_are_counted(tmp_path):
    path = tmp_path / "metrics.jsonl"
    too_long = json.dumps(dict(step=9, loss=1.0, pad="x" * metrics.MAX_RECORD_BYTES))
    path.write_text(jsonl(loss_records(3)) + "step 4 loss 3.9\n" + too_long + "\n[1, 2]\n\n" + jsonl(loss_records(1))
                    + '{"step": 6, "lo')
    records, unreadable = metrics.tail_records(str(path))
    assert [r["step"] for r in records] == [1, 2, 3, 1] and unreadable == 3
    message = metrics.unreadable_message(str(path), unreadable)
    assert message.startswith("%s: 3 of its last lines hold no complete JSON object, nest deeper than 32 levels, "
                              "hold an integer beyond 64 bits or are longer than 1024 KiB" % path)
    assert "LLMTRAIN_METRICS_FILE" in message


def test_a_line_longer_than_what_is_read_is_counted(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("x" * (metrics.MAX_TAIL_BYTES + 10) + "\n" + jsonl(loss_records(2)))
    records, unreadable = metrics.tail_records(str(path))
    assert [r["step"] for r in records] == [1, 2] and unreadable == 1
    path.write_text("x" * (metrics.MAX_TAIL_BYTES + 10))  # no line break at all
    assert metrics.tail_records(str(path)) == ([], 1)
    path.write_text("")
    assert metrics.tail_records(str(path)) == ([], 0)


def test_records_from_the_start_read_past_an_overlong_line_in_bounded_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_RECORD_BYTES", 100)
    reads = []
    real_open = open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def readline(self, size=-1):
            line = self.handle.readline(size)
            reads.append(len(line))
            return line

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(metrics, "open", lambda path, mode: Counting(real_open(path, mode)), raising=False)
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "loss": 2.0}\n' + b"x" * 1000 + b'\n\n{"step": 2, "loss": 1.5}\n' + b"y" * 450)
    state = {}
    found = list(metrics.records_from_start(str(path), 10000, state))
    assert found == [{"step": 1, "loss": 2.0}, None, {"step": 2, "loss": 1.5}, None] and not state
    assert max(reads) <= 101  # no line held whole
    # past max_bytes: the line that crosses it is not given, and it says so
    found = list(metrics.records_from_start(str(path), 30, state))
    assert found == [{"step": 1, "loss": 2.0}] and state == {"truncated": True}
