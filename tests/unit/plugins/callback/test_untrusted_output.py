"""What a job wrote reaches the user's terminal printable: the progress callback's lines and the
failure messages composed for the play hold no escape sequence or other control character of a
metrics record, a hang summary, a rank's exception, a check's table or a log line (the stdout
callback's results: test_default.py). Here, not beside module_utils' tests: ansible-test gives
those no callback."""

import re

from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import event_lines, final_line, progress_line
from ansible_collections.llmtrain.slurm.plugins.filter.messages import job_failure_message, lost_nodes_message
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import metrics

# OSC 52 writes the clipboard, CSI 2J clears the screen, OSC 8 draws a link, U+202E reverses what follows,
# U+009B is CSI in 8 bits
EVIL = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\\u202eexe.\x9b2J\rok"
# what no line may hold
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(lines):
    return all(not CONTROL.search(line) for line in lines)


def test_a_metrics_record_with_escapes_in_every_field_prints_no_control_character():
    record = dict((key, "7" + EVIL) for key in metrics.METRIC_KEYS)
    record.update(event="checkpoint" + EVIL)
    progress = metrics.progress_of([record])
    result = dict(jobs=[dict(job_id="42", state="RUNNING", nodelist="n[1-2]")], progress=progress, retries=5, attempts=1)
    line = progress_line("login", result)
    assert line == "[login] job 42 RUNNING on n[1-2] (retry 1/4)" and clean([line, final_line("login", result)])
    # a result that holds any type where a number belongs (not from progress_of) prints too
    raw = dict(result, progress=dict(step="7" + EVIL, loss=[1], tokens_per_s="fast", eta_s=float("inf")))
    assert progress_line("login", raw) == "[login] job 42 RUNNING on n[1-2] (retry 1/4)"


def test_events_with_escapes_print_as_text():
    result = dict(
        job_id="42",
        node_check=dict(job_id="42", restart=0, time="t", table=["NODE  VERDICT", "n1" + EVIL + "  ok"]),
        network_check=dict(job_id="42", restart=0, time="t", busbw=0.5, table=["n1  " + EVIL], slow={"n1": EVIL}),
        stragglers=[dict(node="n1" + EVIL, ratio=2.0, work_ms=400.0, median_ms=200.0, since_step=1, step=2)],
        hang=dict(job_id="42", start=1, time="t", suspects={"n1": "rank 3 " + EVIL}, frames={"n1": ["f (x.py:1)" + EVIL]},
                  dir="/w/hangs/42-1"),
        recovery=dict(job_id="42", start=2, nodes="n[1-2]", previous=dict(job_id="42", start=1, nodes="n[1-2]"),
                      left="", requeued=False, lost={}, lost_count=0, unreadable_starts=0,
                      resumed=dict(event="resume", step=10, checkpoint="/c/step_10.pt" + EVIL, restart_in_job=1,
                                   failed_ranks=[dict(rank=3, node="n1", step=12, error="RuntimeError: " + EVIL)])),
        excluded=[dict(job_id="42", restarts=1, message="excluded n1 (" + EVIL + ")")],
        progress_warnings={"p": "pattern " + EVIL})
    lines = event_lines("login", result, set())
    assert len(lines) > 10 and clean(lines)
    assert "        f (x.py:1)linkexe. ok" in lines  # the carriage return a blank: it would overwrite the line
    assert any("failed after step 12 (RuntimeError: linkexe. ok)" in line for line in lines)


def test_the_failure_messages_hold_no_control_character_whatever_callback_prints_them():
    job = dict(job_id="42", state="FAILED", exit_code=1, stdout_path="/w/r/logs/x.out", nodes=["n1"])
    log = dict(tail=["loss 2.0" + EVIL, "\x1b[31mTraceback\x1b[0m"], errors=["error: " + EVIL],
               traceback=["Traceback (most recent call last):", "RuntimeError: " + EVIL], failed_rank=0)
    text = job_failure_message(job, log, "llmtrain-r", "/runs/r", "/w/r", 1,
                               node_check=dict(job_id="42", bad={"n1": EVIL}, table=["n1 " + EVIL]))
    assert clean(text.split("\n")) and "RuntimeError: linkexe. ok" in text.split("\n") and "Traceback" in text
    lost = lost_nodes_message(dict(job_id="42", restarts=1, reason="BeginTime" + EVIL, partition="p"), "llmtrain-r",
                              [dict(name="n1", state="down", state_flags=[], reason=EVIL)],
                              ["slurmstepd: error: NODE FAILURE" + EVIL], "/w/r/checkpoints/step_10.pt")
    assert clean(lost.split("\n")) and "From the log: slurmstepd: error: NODE FAILURElinkexe. ok" in lost
