import json
import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils import slurm

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def job(name):
    records = slurm.parse_records(fixture("scontrol_job_%s.txt" % name), "JobId")
    assert len(records) == 1
    return slurm.job_from_scontrol(records[0])


# Recorded from the local cluster's Slurm 22.05.8 (no accounting).

def test_running_job():
    j = job("running")
    assert (j["job_id"], j["name"], j["state"], j["active"]) == ("18", "fx-running", "RUNNING", True)
    assert j["nodelist"] == "slurm-worker-2" and j["nodes"] == ["slurm-worker-2"]
    assert j["stdout_path"] == j["stderr_path"] == "/tmp/fx/slurm-18.out"
    assert j["start_time"] == "2026-11-29T21:44:31" and j["restarts"] == 0
    assert j["elapsed"] == 16 and j["reason"] is None and j["success"] is False


def test_pending_held_job():
    j = job("pending")
    assert (j["state"], j["reason"], j["active"]) == ("PENDING", "JobHeldUser", True)
    assert j["nodelist"] is None and j["nodes"] == [] and j["start_time"] is None
    assert j["stdout_path"] == "/tmp/fx/fx-pending-21.out"  # %x-%j expanded by scontrol


def test_completed_job_with_identity_comment():
    j = job("completed")
    assert (j["state"], j["active"], j["success"], j["exit_code"]) == ("COMPLETED", False, True, 0)
    assert j["comment"] == "llmtrain:aaaa" and j["fingerprint"] == "aaaa"


def test_failed_job():
    j = job("failed")
    assert (j["state"], j["exit_code"], j["signal"], j["reason"]) == ("FAILED", 3, 0, "NonZeroExitCode")
    assert slurm.failure_message(j) == "job 17 (fx-failed) ended FAILED, exit code 3, reason: NonZeroExitCode"


def test_cancelled_job_ends_by_signal_15():
    j = job("cancelled")
    assert (j["state"], j["exit_code"], j["signal"], j["active"]) == ("CANCELLED", 0, 15, False)
    assert j["end_time"] == "2026-11-29T21:44:47" and j["elapsed"] == 13
    assert "signal 15" in slurm.failure_message(j)


def test_timed_out_job():
    j = job("timeout")
    assert (j["state"], j["reason"], j["active"], j["time_limit"]) == ("TIMEOUT", "TimeLimit", False, "00:01:00")


def test_name_and_comment_with_newline_spaces_and_metacharacters_survive():
    j = job("metachar_name")
    assert j["name"] == 'we,ird\nna"me $(touch /tmp/fx/MARK)'
    assert j["comment"] == "llmtrain:x y"
    assert j["command"] == "/tmp/fx/ok.sh" and j["workdir"] == "/tmp/fx"


def test_squeue_records_keep_names_with_newlines():
    jobs = slurm.parse_squeue(fixture("squeue_all.txt"))
    by_id = {j["job_id"]: j for j in jobs}
    assert by_id["16"] == dict(job_id="16", state="COMPLETED", name="fx-completed", comment="llmtrain:aaaa")
    assert by_id["23"]["name"] == 'we,ird\nna"me $(touch /tmp/fx/MARK)'
    assert by_id["23"]["comment"] == "llmtrain:x y"
    assert by_id["17"]["state"] == "FAILED" and by_id["18"]["state"] == "RUNNING"


def test_values_with_spaces_and_keys_with_separators():
    rec = slurm.parse_kv_line(
        "NodeName=gpu1 State=DOWN+DRAIN Reason=gres/gpu count reported lower than configured (0 < 2) "
        "[slurm@2024-05-01T10:00:00] Comment=two words Command=/a b/run.sh --x=1 CPUs/Task=2 "
        "AllocNode:Sid=login:42 CfgTRES=cpu=2,mem=1G")
    assert rec["Reason"] == "gres/gpu count reported lower than configured (0 < 2) [slurm@2024-05-01T10:00:00]"
    assert rec["Comment"] == "two words"
    assert rec["Command"] == "/a b/run.sh --x=1"
    assert rec["CPUs/Task"] == "2" and rec["AllocNode:Sid"] == "login:42"
    assert rec["CfgTRES"] == "cpu=2,mem=1G"


def test_nodes_and_partitions():
    nodes = slurm.parse_nodes(fixture("scontrol_show_node.txt"))
    assert [n["name"] for n in nodes] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
    assert nodes[0]["cpus"] == 4 and nodes[0]["memory_mb"] == 4096 and nodes[0]["gres"] == {}
    assert nodes[0]["partitions"] == ["debug"] and nodes[0]["features"] == [] and nodes[0]["reason"] is None
    assert nodes[0]["version"] == "22.05.8"
    parts = slurm.parse_partitions(fixture("scontrol_show_partition.txt"))
    assert parts == [dict(name="debug", default=True, state="up", nodelist="slurm-worker-[0-2]",
                          nodes=["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"], total_nodes=3,
                          total_cpus=12, time_limit="UNLIMITED", time_limit_s=None, default_time=None)]
    assert slurm.parse_version(fixture("scontrol_version.txt")) == "22.05.8"


def test_drained_gpu_node():
    line = fixture("scontrol_show_node.txt").splitlines()[0]
    line = line.replace("Gres=(null)", "Gres=gpu:a100:4(S:0-1),gpu:2").replace("State=IDLE", "State=IDLE+DRAIN")
    line = line.replace("AvailableFeatures=(null)", "AvailableFeatures=ib,a100")
    line += " Reason=gres/gpu count reported lower than configured (0 < 2) [root@2026-11-29T21:00:00]"
    node = slurm.parse_nodes(line)[0]
    assert node["state"] == "idle" and node["state_flags"] == ["drain"]
    assert node["gres"] == {"gpu": dict(total=6, types={"a100": 4}, untyped=2)}
    assert node["features"] == ["ib", "a100"]
    assert node["reason"].startswith("gres/gpu count reported lower than configured (0 < 2)")


@pytest.mark.parametrize("text, hosts", [
    ("slurm-worker-[0-2,5]", ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2", "slurm-worker-5"]),
    ("n[01-03]", ["n01", "n02", "n03"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("gpu[1-2],cpu[07,09],login", ["gpu1", "gpu2", "cpu07", "cpu09", "login"]),
    ("node1", ["node1"]),
    ("(null)", []),
    ("", []),
])
def test_hostlists(text, hosts):
    assert slurm.expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["n[1-", "n[3-1]", "n[a-b]"])
def test_bad_hostlists(bad):
    with pytest.raises(ValueError):
        slurm.expand_hostlist(bad)


@pytest.mark.parametrize("text, gres", [
    ("gpu:a100:4(S:0-1),gpu:2", {"gpu": dict(total=6, types={"a100": 4}, untyped=2)}),
    ("gpu:4", {"gpu": dict(total=4, types={}, untyped=4)}),
    ("gpu:h100:8(S:0-1),mps:800", {"gpu": dict(total=8, types={"h100": 8}, untyped=0),
                                   "mps": dict(total=800, types={}, untyped=800)}),
    ("gpu:tesla", {"gpu": dict(total=1, types={"tesla": 1}, untyped=0)}),
    ("(null)", {}),
])
def test_gres(text, gres):
    assert slurm.parse_gres(text) == gres


@pytest.mark.parametrize("text, state", [
    ("CANCELLED by 0", "CANCELLED"), ("CANCELLED+", "CANCELLED"), ("OOM", "OUT_OF_MEMORY"),
    ("OUT_OF_MEMORY", "OUT_OF_MEMORY"), ("CD", "COMPLETED"), ("running", "RUNNING"), ("", "UNKNOWN"),
])
def test_state_names(text, state):
    assert slurm.normalize_state(text) == state


def test_state_map_is_complete():
    active = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
              "REQUEUE_FED", "RESIZING"}
    finished = {"PREEMPTED", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}
    assert active <= slurm.ACTIVE_STATES
    assert not finished & slurm.ACTIVE_STATES and finished <= set(slurm.JOB_STATES)
    assert [s for s in slurm.JOB_STATES if s != "COMPLETED" and slurm.JOB_STATES[s].get("success")] == []


@pytest.mark.parametrize("text, seconds", [
    ("00:00:13", 13), ("1-02:03:04", 93784), ("05:30", 330), ("45", 2700), ("UNLIMITED", None), ("N/A", None),
])
def test_durations(text, seconds):
    assert slurm.parse_duration(text) == seconds


def test_unknown_job_and_errors():
    assert "Invalid job id" in fixture("scontrol_job_invalid.txt")
    j = slurm.unknown_job(99)
    assert (j["job_id"], j["state"], j["active"], j["known"], j["success"]) == ("99", "UNKNOWN", False, False, None)
    assert "Invalid partition name" in fixture("sbatch_invalid_partition.txt")


def test_sacct_rows():
    row = slurm.FIELD_SEP.join(["77", "train", "CANCELLED by 0", "0:15", "00:01:05", "n[1-2]", "2026-01-01T00:00:00",
                                "2026-01-01T00:00:01", "2026-01-01T00:01:06", "gpu", "llmtrain:abc", "None"])
    j = slurm.parse_sacct(row + "\n")[0]
    assert (j["job_id"], j["state"], j["signal"], j["elapsed"], j["nodes"]) == ("77", "CANCELLED", 15, 65, ["n1", "n2"])
    assert j["fingerprint"] == "abc" and j["known"] and j["source"] == "sacct"


def test_parsable_output():
    assert slurm.parse_parsable(fixture("sbatch_parsable.txt")) == "16"
    assert slurm.parse_parsable("42;cluster2\n") == "42"
    with pytest.raises(ValueError):
        slurm.parse_parsable("")


def test_fingerprint_depends_on_every_part():
    base = dict(name="a", content="#!/bin/sh\n", options={"nodes": 1}, env={"X": "1"}, chdir=None)
    fp = slurm.fingerprint(**base)
    assert len(fp) == 16 and fp == slurm.fingerprint(**dict(base))
    for key, value in [("name", "b"), ("content", "#!/bin/bash\n"), ("options", {"nodes": 2}),
                       ("env", {"X": "2"}), ("chdir", "/tmp")]:
        assert slurm.fingerprint(**dict(base, **{key: value})) != fp
    assert slurm.fingerprint_of_comment(slurm.identity_comment(fp)) == fp
    assert slurm.fingerprint_of_comment("something else") is None


def test_option_argv():
    assert slurm.option_argv({"cpus_per_task": 2, "exclusive": True, "hold": False, "time": "00:05:00",
                              "partition": "debug;touch x"}) == [
        "--cpus-per-task=2", "--exclusive", "--partition=debug;touch x", "--time=00:05:00"]


@pytest.mark.parametrize("options, message", [
    ({"bogus": 1}, "bogus is not an sbatch option"),
    ({"nodes;rm": 1}, "is not an option name"),
    ({"--nodes": 1}, "is not an option name"),
    ({"Nodes": 1}, "is not an option name"),
    ({"job-name": "x"}, "name option"),
    ({"comment": "x"}, "identity"),
    ({"nodes": [1, 2]}, "must be a string"),
])
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        slurm.option_argv(options)


def test_export_argv():
    env = {"B": "x,y", "A": "1"}
    assert slurm.export_argv(None, env) == ["--export=ALL"]
    assert slurm.export_argv("ALL,FOO", env) == ["--export=ALL,FOO"]
    assert slurm.export_argv("NONE", env) == ["--export=A,B"]
    assert slurm.export_argv("NONE", {}) == ["--export=NONE"]
    assert slurm.export_argv("PATH,HOME", env) == ["--export=PATH,HOME,A,B"]
    with pytest.raises(ValueError, match="not a valid variable name"):
        slurm.export_argv(None, {"A=B": "1"})


def test_tail_lines_reads_from_the_end(tmp_path):
    path = tmp_path / "out"
    path.write_text("".join("line %d\n" % i for i in range(5000)))
    assert slurm.tail_lines(str(path), 3, block=64) == ["line 4997", "line 4998", "line 4999"]
    assert slurm.tail_lines(str(path), 0) == []
    short = tmp_path / "short"
    short.write_text("a\nb")
    assert slurm.tail_lines(str(short), 5) == ["a", "b"]
    (tmp_path / "empty").write_text("")
    assert slurm.tail_lines(str(tmp_path / "empty"), 5) == []


def test_last_metrics_record_skips_a_half_written_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records = [dict(step=i, total_steps=100, loss=4.0 - i / 100, lr=3e-4, tokens_per_s=5000.0, elapsed_s=i,
                    eta_s=100 - i) for i in range(1, 51)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 51, "lo')
    progress = slurm.progress_of(slurm.last_json_records(str(path)))
    assert progress["step"] == 50 and progress["loss"] == 3.5 and progress["percent"] == 50.0
    assert progress["val_loss"] is None and progress["event"] is None
    assert slurm.progress_of([]) is None


def test_progress_keeps_the_last_metrics_and_names_the_last_event(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [dict(step=100, total_steps=100, loss=2.1, lr=1e-4, tokens_per_s=9000.0, elapsed_s=16.0, eta_s=0.0),
             dict(event="checkpoint", step=100, path="x"), dict(event="done", step=100, tokens_seen=921600)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    progress = slurm.progress_of(slurm.last_json_records(str(path)))
    assert progress["loss"] == 2.1 and progress["step"] == 100 and progress["percent"] == 100.0
    assert progress["event"] == "done" and progress["event_step"] == 100


class FakeModule:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def get_bin_path(self, name, required=False):
        return "/usr/bin/" + name

    def run_command(self, argv, **kwargs):
        self.calls.append(argv)
        return self.answers.pop(0)


def test_wait_queries_once_per_interval_until_the_job_ends():
    running, done = fixture("scontrol_job_running.txt"), fixture("scontrol_job_completed.txt")
    module = FakeModule([(0, running, ""), (0, running, ""), (0, done, "")])
    now = [0.0]
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        now[0] += seconds

    j, timed_out = slurm.Slurm(module).wait("16", 60, 1.0, clock=lambda: now[0], sleep=sleep)
    assert not timed_out and j["state"] == "COMPLETED"
    assert sleeps == [1.0, 1.0]
    assert module.calls == [["/usr/bin/scontrol", "show", "job", "-o", "16"]] * 3


def test_wait_times_out():
    running = fixture("scontrol_job_running.txt")
    module = FakeModule([(0, running, "")] * 4)
    now = [0.0]
    j, timed_out = slurm.Slurm(module).wait(
        "18", 2.5, 1.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert timed_out and j["state"] == "RUNNING" and len(module.calls) == 4


def test_forgotten_job_without_accounting_is_unknown():
    module = FakeModule([(1, "", fixture("scontrol_job_invalid.txt")), (1, "", fixture("sacct_disabled.txt"))])
    j = slurm.Slurm(module).show_job("5")
    assert j["state"] == "UNKNOWN" and not j["known"] and not j["active"]
    assert module.calls[1][:2] == ["/usr/bin/sacct", "-X"]


def test_controller_unreachable_names_the_command():
    module = FakeModule([(1, "", fixture("squeue_no_config.txt"))])
    with pytest.raises(slurm.SlurmError, match="(?s)squeue .* failed \\(rc 1\\): .*Could not establish a configuration source"):
        slurm.Slurm(module).jobs_of_user()


# ---------------------------------------------------------------- failed job logs

GLOO_LOST_PEER = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                  "[10.213.0.11]:43521")


def rank_traceback(rank, exception, call="train(cfg, args.data, args.out, meta, dist, stop)"):
    """A traceback as torch.distributed.run prints it for a rank ("[rankN]: " before each line)."""
    prefix = "" if rank is None else "[rank%s]: " % rank
    return [prefix + line for line in [
        "Traceback (most recent call last):",
        '  File "/shared/work/trainer/train.py", line 503, in main',
        "    status = " + call,
        "             " + "^" * len(call),
        exception]]


LAUNCHER_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/shared/venv/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    "             ^^^^^^",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "trainer.train FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "  <NO_OTHER_FAILURES>",
    "srun: error: slurm-worker-1: task 1: Exited with exit code 1",
]


def write_log(tmp_path, lines):
    path = tmp_path / "slurm-42.out"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_log_summary_names_the_rank_that_failed_first_not_the_peers_that_lost_it(tmp_path):
    lines = ["step 10/100 loss 2.5000 lr 3.00e-04 1,000 tok/s eta 1m"] + rank_traceback(3, "RuntimeError: boom")
    for rank in (0, 1, 2):
        lines += rank_traceback(rank, GLOO_LOST_PEER)
    lines += LAUNCHER_TRACEBACK
    summary = slurm.log_summary(write_log(tmp_path, lines), tail=3)
    assert summary["failed_rank"] == "3"
    assert summary["traceback"] == rank_traceback(None, "RuntimeError: boom")  # the "[rank3]: " prefixes gone
    assert summary["traceback"][0] == "Traceback (most recent call last):"
    assert summary["traceback"][-1] == "RuntimeError: boom"
    assert summary["path"] == str(tmp_path / "slurm-42.out")
    assert summary["tail"] == ["Failures:", "  <NO_OTHER_FAILURES>",
                               "srun: error: slurm-worker-1: task 1: Exited with exit code 1"]
    lost_peers = ["[rank%d]: %s" % (r, GLOO_LOST_PEER) for r in (0, 1, 2)]
    assert summary["errors"] == ["[rank3]: RuntimeError: boom"] + lost_peers + [
        "Traceback (most recent call last):", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "srun: error: slurm-worker-1: task 1: Exited with exit code 1"]


def test_log_summary_picks_the_cause_even_when_the_lost_peers_are_printed_first(tmp_path):
    lines = rank_traceback(1, GLOO_LOST_PEER) + rank_traceback(0, GLOO_LOST_PEER)
    lines += rank_traceback(2, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    lines += LAUNCHER_TRACEBACK
    summary = slurm.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] == "2"
    assert summary["traceback"][-1] == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_log_summary_with_only_lost_peers_takes_the_first(tmp_path):
    lines = rank_traceback(5, "RuntimeError: Connection reset by peer") + rank_traceback(0, GLOO_LOST_PEER)
    summary = slurm.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] == "5" and summary["traceback"][-1] == "RuntimeError: Connection reset by peer"
    assert summary["lost_peer"] is True  # nobody raised first: a process died without a traceback


def test_log_summary_of_a_log_without_a_traceback(tmp_path):
    lines = ["step %d/100 loss 2.0" % i for i in range(1, 51)] + ["slurmstepd: error: *** JOB 42 ON n1 CANCELLED ***"]
    summary = slurm.log_summary(write_log(tmp_path, lines), tail=2, errors=8)
    assert summary["failed_rank"] is None and summary["traceback"] == []
    assert summary["tail"] == ["step 50/100 loss 2.0", "slurmstepd: error: *** JOB 42 ON n1 CANCELLED ***"]
    assert summary["errors"] == ["slurmstepd: error: *** JOB 42 ON n1 CANCELLED ***"]
    assert slurm.log_summary(write_log(tmp_path, lines), tail=0)["tail"] == []


def test_log_summary_of_a_single_process_traceback(tmp_path):
    lines = ["train: 7,000 parameters"] + rank_traceback(None, "ValueError: bad value") + ["done?"]
    summary = slurm.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] is None and summary["lost_peer"] is False
    assert summary["traceback"] == rank_traceback(None, "ValueError: bad value")


def test_log_summary_keeps_the_first_error_lines_only(tmp_path):
    lines = ["srun: error: n%d: task %d: Exited with exit code 1" % (i, i) for i in range(20)]
    summary = slurm.log_summary(write_log(tmp_path, lines), errors=3)
    assert summary["errors"] == lines[:3]
    assert len(slurm.log_summary(write_log(tmp_path, lines))["errors"]) == 8  # the default


def test_log_summary_shortens_a_deep_traceback_keeping_both_ends(tmp_path):
    frames = ['  File "m.py", line %d, in f%d' % (i, i) for i in range(100)]
    lines = ["[rank1]: " + line for line in ["Traceback (most recent call last):"] + frames + ["RecursionError: deep"]]
    traceback = slurm.log_summary(write_log(tmp_path, lines))["traceback"]
    assert len(traceback) == 60 and traceback[0] == "Traceback (most recent call last):"
    assert traceback[20] == "  ..." and traceback[-1] == "RecursionError: deep"


def test_log_summary_follows_a_chained_exception_to_the_one_raised_last(tmp_path):
    chain = rank_traceback(None, "KeyError: 'step'") + [
        "", "During handling of the above exception, another exception occurred:", ""] + rank_traceback(
        None, "RuntimeError: boom")
    summary = slurm.log_summary(write_log(tmp_path, ["starting"] + chain + ["after"]))
    assert summary["failed_rank"] is None and summary["traceback"] == chain


def test_log_summary_of_a_rank_whose_exception_was_raised_from_another(tmp_path):
    disk_full = rank_traceback(0, "OSError: [Errno 28] No space left on device") + [
        "[rank0]: ", "[rank0]: The above exception was the direct cause of the following exception:", "[rank0]: "
    ] + rank_traceback(0, "trainer.checkpoint.CheckpointError: could not write the checkpoint of step 40; "
                          "step_000030.pt is the newest complete one")
    lost_peer = rank_traceback(1, GLOO_LOST_PEER)
    # The ranks' lines interleave in the job's log.
    lines = disk_full[:6] + lost_peer[:2] + disk_full[6:9] + lost_peer[2:] + disk_full[9:] + LAUNCHER_TRACEBACK
    summary = slurm.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] == "0"
    assert summary["traceback"] == [line[len("[rank0]: "):] for line in disk_full]
    assert summary["traceback"][4] == "OSError: [Errno 28] No space left on device"
    assert summary["traceback"][-1].startswith("trainer.checkpoint.CheckpointError: could not write")


def test_log_summary_does_not_join_tracebacks_without_a_chain_line(tmp_path):
    first, second = rank_traceback(None, "ValueError: first"), rank_traceback(None, "KeyError: 'second'")
    summary = slurm.log_summary(write_log(tmp_path, first + [""] + second))
    assert summary["traceback"] == first


# ---------------------------------------------------------------- nodes out of service, controller down

@pytest.mark.parametrize("state, reason, waits", [
    ("PENDING", "ReqNodeNotAvail,_UnavailableNodes:slurm-worker-1", True),
    ("PENDING", "ReqNodeNotAvail", True),
    ("PENDING", "NodeDown", True),
    ("PENDING", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions", True),
    ("PENDING", "Resources", False),
    ("PENDING", "Priority", False),
    ("PENDING", "BeginTime", False),
    ("PENDING", "JobHeldUser", False),
    ("PENDING", None, False),
    ("RUNNING", "ReqNodeNotAvail", False),
    ("RUNNING", None, False),
])
def test_waits_for_nodes(state, reason, waits):
    assert slurm.waits_for_nodes(state, reason) is waits


def pending_record(**fields):
    """The recorded pending job with some fields changed."""
    rec = slurm.parse_records(fixture("scontrol_job_pending.txt"), "JobId")[0]
    rec.update(fields)
    return rec


def test_job_from_scontrol_gives_the_node_count_and_whether_it_waits_for_nodes():
    assert job("pending")["num_nodes"] == 1 and job("pending")["waits_for_nodes"] is False
    j = slurm.job_from_scontrol(pending_record(NumNodes="3", Reason="ReqNodeNotAvail,_UnavailableNodes:slurm-worker-1"))
    assert j["num_nodes"] == 3 and j["waits_for_nodes"] is True
    j = slurm.job_from_scontrol(pending_record(NumNodes="3-3", Reason="Resources"))
    assert j["num_nodes"] == 3 and j["waits_for_nodes"] is False
    assert slurm.job_from_scontrol(pending_record(NumNodes="2-4"))["num_nodes"] == 2  # the minimum it asked for
    running = job("running")
    assert running["num_nodes"] == 1 and running["waits_for_nodes"] is False
    assert slurm.unknown_job(5)["num_nodes"] is None and slurm.unknown_job(5)["waits_for_nodes"] is False


UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"


def test_an_unanswering_controller_is_its_own_error():
    assert issubclass(slurm.ControllerUnreachable, slurm.SlurmError)
    err = slurm.slurm_error(["/usr/bin/squeue", "--noheader"], 1, "", UNREACHABLE)
    assert err.__class__ is slurm.ControllerUnreachable
    assert str(err) == ("/usr/bin/squeue --noheader failed (rc 1): "
                        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    timed_out = slurm.slurm_error(["scontrol"], 1, "Socket timed out on send/recv operation", "")
    assert timed_out.__class__ is slurm.ControllerUnreachable  # what stdout says when stderr is empty
    other = slurm.slurm_error(["scontrol"], 1, "", "scontrol: error: Access/permission denied\n")
    assert other.__class__ is slurm.SlurmError
    assert slurm.slurm_error(["squeue"], 1, "", fixture("squeue_no_config.txt")).__class__ is slurm.SlurmError


def test_show_job_raises_controller_unreachable_and_still_knows_forgotten_jobs():
    module = FakeModule([(1, "", UNREACHABLE)])
    with pytest.raises(slurm.ControllerUnreachable, match=r"^scontrol show job -o 7 failed \(rc 1\): slurm_load_jobs"):
        slurm.Slurm(module).show_job("7")

    module = FakeModule([(1, "", "scontrol: error: Access/permission denied\n")])
    with pytest.raises(slurm.SlurmError) as info:
        slurm.Slurm(module).show_job("7")
    assert info.value.__class__ is slurm.SlurmError and "Access/permission denied" in str(info.value)

    row = slurm.FIELD_SEP.join(["7", "train", "COMPLETED", "0:0", "00:01:05", "n1", "2026-01-01T00:00:00",
                                "2026-01-01T00:00:01", "2026-01-01T00:01:06", "gpu", "None", "None"])
    module = FakeModule([(1, "", fixture("scontrol_job_invalid.txt")), (0, row + "\n", "")])
    j = slurm.Slurm(module).show_job("7")
    assert (j["job_id"], j["state"], j["source"], j["waits_for_nodes"]) == ("7", "COMPLETED", "sacct", False)
    assert len(module.calls) == 2 and module.calls[1][-1] == "--jobs=7"


def test_any_command_raises_controller_unreachable(monkeypatch):
    monkeypatch.setattr(slurm.Slurm, "user", lambda self: "alice")
    module = FakeModule([(1, "", "squeue: error: " + UNREACHABLE)])
    with pytest.raises(slurm.ControllerUnreachable, match="^/usr/bin/squeue --noheader --states=all --user=alice"):
        slurm.Slurm(module).jobs_of_user()


def test_nodes_are_scontrol_show_node():
    module = FakeModule([(0, fixture("scontrol_show_node.txt"), "")])
    nodes = slurm.Slurm(module).nodes()
    assert module.calls == [["/usr/bin/scontrol", "show", "node", "-o"]]
    assert [n["name"] for n in nodes] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
