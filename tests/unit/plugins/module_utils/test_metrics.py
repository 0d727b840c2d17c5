import json

from ansible_collections.llmtrain.slurm.plugins.module_utils import metrics


def test_last_metrics_record_skips_a_half_written_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [dict(step=i, total_steps=100, loss=4.0 - i / 100, lr=3e-4, tokens_per_s=5000.0, elapsed_s=i,
                    eta_s=100 - i) for i in range(1, 51)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 51, "lo')
    progress = metrics.progress_of(metrics.last_json_records(str(path)))
    assert progress["step"] == 50 and progress["loss"] == 3.5 and progress["percent"] == 50.0
    assert progress["val_loss"] is None and progress["event"] is None
    assert metrics.progress_of([]) is None


def test_progress_keeps_the_last_metrics_and_names_the_last_event(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [dict(step=100, total_steps=100, loss=2.1, lr=1e-4, tokens_per_s=9000.0, elapsed_s=16.0, eta_s=0.0),
             dict(event="checkpoint", step=100, path="x"), dict(event="done", step=100, tokens_seen=921600)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    progress = metrics.progress_of(metrics.last_json_records(str(path)))
    assert progress["loss"] == 2.1 and progress["step"] == 100 and progress["percent"] == 100.0
    assert progress["event"] == "done" and progress["event_step"] == 100
