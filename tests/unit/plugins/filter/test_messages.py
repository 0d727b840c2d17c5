"""The messages a failed training job ends the play with, word for word."""

from ansible_collections.llmtrain.slurm.plugins.filter.messages import job_failure_message, lost_nodes_message

REQUEUED = dict(job_id="17", restarts=1, reason="ReqNodeNotAvail", partition="debug", waits_for_nodes=True)
DOWN = [dict(name="slurm-worker-1", partitions=["debug"], state="down", state_flags=["not_responding"],
             reason="Not responding"),
        dict(name="slurm-worker-2", partitions=["debug"], state="drain", state_flags=[], reason=None)]
FAILED = dict(job_id="42", state="FAILED", exit_code=1, signal=None, reason="NonZeroExitCode",
              nodes=["slurm-worker-0", "slurm-worker-1"], stdout_path="/w/demo/logs/llmtrain-demo-42.out")
TRACEBACK = ["Traceback (most recent call last):", '  File "trainer/train.py", line 7, in <module>',
             "RuntimeError: fault injected"]
WHERE = ("llmtrain-demo", "/runs/demo", "/w/demo", 2)


def test_lost_nodes_are_named_with_state_and_reason_and_the_log_lines_that_say_so():
    errors = ["srun: error: Node failure on slurm-worker-1", "error: something else", "slurm-worker-1 not responding"]
    assert lost_nodes_message(REQUEUED, "llmtrain-demo", DOWN, errors, "step-000020.pt") == (
        "Training job 17 (llmtrain-demo) lost a node and was requeued by Slurm (restart 1); it is pending (Slurm's "
        "reason: ReqNodeNotAvail) and cannot start while the nodes it needs are out of service.\n"
        "Out of service in partition debug: slurm-worker-1 (down+not_responding: Not responding), slurm-worker-2 (drain).\n"
        "From the log: srun: error: Node failure on slurm-worker-1\n"
        "From the log: slurm-worker-1 not responding\n"
        "The job stays queued: once enough nodes are back it starts again and resumes from the newest checkpoint "
        "(step-000020.pt). Run the playbook again to watch it, or `scancel 17` to give it up.")


def test_no_node_out_of_service_now_and_no_checkpoint_yet():
    lines = lost_nodes_message(dict(REQUEUED, restarts=2), "llmtrain-demo", [], [], "").split("\n")
    assert lines[1] == "Out of service in partition debug: none now (the job should start soon)."
    assert "resumes from the newest checkpoint (none yet)." in lines[2] and len(lines) == 3


def test_the_failing_ranks_traceback_and_node_then_the_log():
    log = dict(traceback=TRACEBACK, failed_rank=3, lost_peer=False, errors=["err1", "err2"], tail=["t1", "t2"])
    assert job_failure_message(FAILED, log, *WHERE) == "\n".join([
        "Training job 42 (llmtrain-demo) ended FAILED, exit code 1, reason: NonZeroExitCode.",
        "What the run left is in /runs/demo; checkpoints stay in /w/demo/checkpoints and a rerun resumes from the newest.",
        "Rank 3 failed first (node slurm-worker-1); its traceback:"] + TRACEBACK + [
        "First error lines of /w/demo/logs/llmtrain-demo-42.out:", "err1", "err2",
        "Last lines:", "t1", "t2"])


def test_a_lost_peer_names_the_rank_that_noticed():
    log = dict(traceback=["Traceback", "RuntimeError: Connection closed by peer"], failed_rank=1, lost_peer=True,
               errors=[], tail=["t"])
    lines = job_failure_message(dict(FAILED, signal=9, reason=None), log, *WHERE).split("\n")
    assert lines[0] == "Training job 42 (llmtrain-demo) ended FAILED, exit code 1, signal 9."
    assert lines[2:5] == [
        "No rank left a traceback of its own: a process ended without one (killed, out of memory, its node lost) and "
        "the others lost it.",
        "The first to notice was rank 1 (node slurm-worker-0):", "Traceback"]


def test_a_traceback_of_no_known_rank_or_node():
    log = dict(traceback=["Traceback", "ValueError: y"], failed_rank=None, lost_peer=False, errors=["e"], tail=["t"])
    assert job_failure_message(FAILED, log, *WHERE).split("\n")[2:4] == ["The first traceback:", "Traceback"]
    log = dict(log, failed_rank=9)  # more ranks than the job's nodes hold
    assert job_failure_message(FAILED, log, *WHERE).split("\n")[2] == "Rank 9 failed first; its traceback:"


def test_a_log_that_was_not_read():
    assert job_failure_message(dict(FAILED, state="TIMEOUT", reason=None), None, *WHERE).split("\n")[2:] == [
        "First error lines of /w/demo/logs/llmtrain-demo-42.out:", "(none)", "Last lines:", "(not readable)"]
