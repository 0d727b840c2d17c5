"""The messages a failed training job ends the play with, word for word."""

import json
import os
import re

import pytest

from ansible_collections.llmtrain.slurm.plugins.filter import messages
from ansible_collections.llmtrain.slurm.plugins.filter.messages import job_failure_message, lost_nodes_message
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import job_from_scontrol, parse_records

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
    assert job_failure_message(dict(FAILED, state="CANCELLED", reason=None), None, *WHERE).split("\n")[2:] == [
        "First error lines of /w/demo/logs/llmtrain-demo-42.out:", "(none)", "Last lines:", "(not readable)"]


NODE_CHECK = dict(job_id="42", restart=0, time="2026-11-30T10:00:00Z", file="/w/demo/node_check/llmtrain-demo.json",
                  checked=2, bad_count=2,
                  bad={"slurm-worker-1": "no network interface ib0 on slurm-worker-1 (it has eth0, lo)",
                       "slurm-worker-0": "slurm-worker-0 did not answer the node check within 60 s"},
                  table=["NODE            VERDICT", "slurm-worker-0  NO ANSWER", "slurm-worker-1  BAD"])
CHECK_FAILED = dict(FAILED, exit_code=78, reason="NonZeroExitCode")


def test_a_job_whose_node_check_failed_names_each_bad_node():
    log = dict(traceback=[], errors=["llmtrain: node check: slurm-worker-1 is bad"], tail=["t"])
    assert job_failure_message(CHECK_FAILED, log, *WHERE, node_check=NODE_CHECK).split("\n") == [
        "Training job 42 (llmtrain-demo) ended FAILED, exit code 78, reason: NonZeroExitCode.",
        "What the run left is in /runs/demo; checkpoints stay in /w/demo/checkpoints and a rerun resumes from the newest.",
        "Its node check found bad node(s) and started nothing (run_bad_node_policy=fail, or run_requeue_max "
        "requeues used up); they are recorded in /w/demo/bad_nodes.json and later jobs of the run keep off them:",
        "  slurm-worker-0: slurm-worker-0 did not answer the node check within 60 s",
        "  slurm-worker-1: no network interface ib0 on slurm-worker-1 (it has eth0, lo)",
        "Node check:",
        "  NODE            VERDICT",
        "  slurm-worker-0  NO ANSWER",
        "  slurm-worker-1  BAD",
        "First error lines of /w/demo/logs/llmtrain-demo-42.out:", "llmtrain: node check: slurm-worker-1 is bad",
        "Last lines:", "t"]


def test_the_node_check_is_left_out_unless_it_explains_this_failure():
    plain = job_failure_message(CHECK_FAILED, None, *WHERE)
    assert "node check" not in plain and "bad_nodes.json" not in plain
    # a check of another job (an earlier one of the run), a check with no bad node, or another exit code
    for job, check in ((CHECK_FAILED, dict(NODE_CHECK, job_id="41")), (CHECK_FAILED, dict(NODE_CHECK, bad={})),
                       (FAILED, NODE_CHECK), (CHECK_FAILED, "not a record")):
        assert job_failure_message(job, None, *WHERE, node_check=check) == job_failure_message(job, None, *WHERE)
    # the job id may come back as a number from JSON
    assert "  slurm-worker-1: no network interface" in job_failure_message(
        dict(CHECK_FAILED, job_id=42), None, *WHERE, node_check=NODE_CHECK)


def test_the_bad_nodes_a_summary_only_counts_are_counted_with_where_each_is():
    check = dict(NODE_CHECK, checked=2048, bad_count=2048)  # slurm_job_info names 32 of them (here 2)
    lines = job_failure_message(CHECK_FAILED, None, *WHERE, node_check=check).split("\n")
    assert lines[3:7] == ["  slurm-worker-0: slurm-worker-0 did not answer the node check within 60 s",
                          "  slurm-worker-1: no network interface ib0 on slurm-worker-1 (it has eth0, lo)",
                          "  ... and 2046 more (every node's record: /w/demo/node_check/llmtrain-demo.json)",
                          "Node check:"]


def test_a_job_stopped_at_its_time_limit_says_the_script_did_not_stop_on_sigusr2():
    job = dict(FAILED, state="TIMEOUT", exit_code=0, signal=None, reason="TimeLimit", time_limit="00:01:00")
    lines = job_failure_message(job, dict(errors=[], tail=["iter 90: loss 1.2"]), *WHERE).split("\n")
    assert lines[0] == "Training job 42 (llmtrain-demo) ended TIMEOUT, exit code 0, reason: TimeLimit."
    assert lines[2] == (
        "Slurm stopped it at its time limit (00:01:00): it sent SIGUSR2 pretrain_signal_lead seconds before, and the "
        "script did not stop on it. A script that saves a checkpoint, writes LLMTRAIN_PREEMPT_MARKER and exits on "
        "SIGUSR2 is requeued and continues instead (docs/own-script.md); the steps after its newest "
        "checkpoint are lost. Raise slurm_time_limit, or make the script stop on SIGUSR2.")
    assert not any("time limit" in line for line in job_failure_message(FAILED, {}, *WHERE).split("\n"))


NETWORK_CHECK = dict(job_id="42", restart=0, time="2026-11-30T10:00:10Z", busbw=3.0, limit=50.0, fraction=0.06,
                     min_fraction=0.5, slow_fabric=None,
                     slow={"slurm-worker-2": "3.1 GB/s with its ring neighbours, 6.2% of its 50 GB/s link (expected at "
                                             "least 50%)"},
                     table=["NODE            BUSBW(GB/s)  VERDICT", "slurm-worker-2  3.1          SLOW"])
NETWORK_FAILED = dict(FAILED, exit_code=79, reason="NonZeroExitCode")


def test_a_job_whose_network_check_failed_names_the_slow_node_measured_and_expected():
    lines = job_failure_message(NETWORK_FAILED, None, *WHERE, network_check=NETWORK_CHECK).split("\n")
    assert lines[2:9] == [
        "Its network check found the fabric below pretrain_network_min_fraction=0.5 and started nothing "
        "(pretrain_network_policy=fail); all-reduce bus bandwidth 3 GB/s, 6% of the slowest link's 50 GB/s:",
        "  slurm-worker-2: 3.1 GB/s with its ring neighbours, 6.2% of its 50 GB/s link (expected at least 50%)",
        "Network check:",
        "  NODE            BUSBW(GB/s)  VERDICT",
        "  slurm-worker-2  3.1          SLOW",
        "Fix: repair or leave out the slow node (slurm_exclude_nodes), check the interface settings "
        "(nccl_env_socket_ifname, nccl_env_ib_hca), or set pretrain_network_policy=exclude or warn.",
        "First error lines of /w/demo/logs/llmtrain-demo-42.out:"]
    # another job's check, or another exit code: not the explanation
    for job, check in ((NETWORK_FAILED, dict(NETWORK_CHECK, job_id="41")), (FAILED, NETWORK_CHECK),
                       (NETWORK_FAILED, dict(NETWORK_CHECK, slow={}))):
        assert job_failure_message(job, None, *WHERE, network_check=check) == job_failure_message(job, None, *WHERE)


def test_a_job_stopped_on_request_says_so_and_how_to_resume():
    stopped = dict(FAILED, exit_code=81, reason="NonZeroExitCode")
    lines = job_failure_message(stopped, dict(tail=["llmtrain: stopped"]), *WHERE).split("\n")
    assert lines[2] == ("It was stopped on request (playbooks/stop.yml) with a checkpoint and not requeued: "
                        "playbooks/pretrain.yml resumes the run from its newest checkpoint.")
    assert "stopped on request" not in job_failure_message(FAILED, {}, *WHERE)


@pytest.mark.parametrize("release", ["22.05", "26.05"])
def test_a_training_job_held_for_good_by_a_failed_data_job_says_so(release):
    """scontrol's record of the training job once the data job it waited for failed, as each release wrote it."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm", "dependency.json")) as handle:
        recorded = json.load(handle)["releases"][release]
    job = job_from_scontrol(parse_records(recorded["never_scontrol"], "JobId")[0])
    failed = re.search(r"afterok:(\d+)\(failed\)", recorded["never_scontrol"]).group(1)
    text = messages.never_starts_message(job, "llmtrain-probe", "probe").split("\n")
    assert text == [
        "Training job %s (llmtrain-probe) never starts: job %s, which it waits for (afterok:%s(failed)), failed, and Slurm "
        "holds it queued for good (reason DependencyNeverSatisfied)." % (job["job_id"], failed, failed),
        "That job's log: ansible-playbook playbooks/status.yml -e run_name=probe -e status_log_lines=40. Fix what it says and "
        "run the playbook again: it submits that job again and puts this training job behind it (it keeps its place in the "
        "queue), or `scancel %s` to give it up." % job["job_id"]]
