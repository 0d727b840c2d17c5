import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import job_log


def test_tail_lines_reads_from_the_end(tmp_path):
    path = tmp_path / "out"
    path.write_text("".join("line %d\n" % i for i in range(5000)))
    assert job_log.tail_lines(str(path), 3, block=64) == ["line 4997", "line 4998", "line 4999"]
    assert job_log.tail_lines(str(path), 0) == []
    short = tmp_path / "short"
    short.write_text("a\nb")
    assert job_log.tail_lines(str(short), 5) == ["a", "b"]
    (tmp_path / "empty").write_text("")
    assert job_log.tail_lines(str(tmp_path / "empty"), 5) == []


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
    summary = job_log.log_summary(write_log(tmp_path, lines), tail=3)
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


def test_log_summary_takes_ranks_and_tasks_in_digits_0_to_9_only(tmp_path):
    """A line of the training's own that writes a rank in Arabic-Indic digits names no rank."""
    lines = rank_traceback(None, "RuntimeError: boom")
    lines = ["[rank\u0663]: " + line for line in lines] + ["srun: error: n1: task \u0663: Exited with exit code 1"]
    summary = job_log.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] is None
    lines = rank_traceback(3, "RuntimeError: boom") + ["srun: error: n1: task 3: Exited with exit code 1"]
    assert job_log.log_summary(write_log(tmp_path, lines))["failed_rank"] == "3"


def test_log_summary_picks_the_cause_even_when_the_lost_peers_are_printed_first(tmp_path):
    lines = rank_traceback(1, GLOO_LOST_PEER) + rank_traceback(0, GLOO_LOST_PEER)
    lines += rank_traceback(2, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    lines += LAUNCHER_TRACEBACK
    summary = job_log.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] == "2"
    assert summary["traceback"][-1] == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_log_summary_with_only_lost_peers_takes_the_first(tmp_path):
    lines = rank_traceback(5, "RuntimeError: Connection reset by peer") + rank_traceback(0, GLOO_LOST_PEER)
    summary = job_log.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] == "5" and summary["traceback"][-1] == "RuntimeError: Connection reset by peer"
    assert summary["lost_peer"] is True  # nobody raised first: a process died without a traceback


def test_log_summary_of_a_log_without_a_traceback(tmp_path):
    lines = ["step %d/100 loss 2.0" % i for i in range(1, 51)] + ["slurmstepd: error: *** JOB 42 ON n1 CANCELLED ***"]
    summary = job_log.log_summary(write_log(tmp_path, lines), tail=2, errors=8)
    assert summary["failed_rank"] is None and summary["traceback"] == []
    assert summary["tail"] == ["step 50/100 loss 2.0", "slurmstepd: error: *** JOB 42 ON n1 CANCELLED ***"]
    assert summary["errors"] == ["slurmstepd: error: *** JOB 42 ON n1 CANCELLED ***"]
    assert job_log.log_summary(write_log(tmp_path, lines), tail=0)["tail"] == []


def test_log_summary_of_a_single_process_traceback(tmp_path):
    lines = ["train: 7,000 parameters"] + rank_traceback(None, "ValueError: bad value") + ["done?"]
    summary = job_log.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] is None and summary["lost_peer"] is False
    assert summary["traceback"] == rank_traceback(None, "ValueError: bad value")


def test_log_summary_keeps_the_first_error_lines_only(tmp_path):
    lines = ["srun: error: n%d: task %d: Exited with exit code 1" % (i, i) for i in range(20)]
    summary = job_log.log_summary(write_log(tmp_path, lines), errors=3)
    assert summary["errors"] == lines[:3]
    assert len(job_log.log_summary(write_log(tmp_path, lines))["errors"]) == 8  # the default


def test_log_summary_shortens_a_deep_traceback_keeping_both_ends(tmp_path):
    frames = ['  File "m.py", line %d, in f%d' % (i, i) for i in range(100)]
    lines = ["[rank1]: " + line for line in ["Traceback (most recent call last):"] + frames + ["RecursionError: deep"]]
    traceback = job_log.log_summary(write_log(tmp_path, lines))["traceback"]
    assert len(traceback) == 60 and traceback[0] == "Traceback (most recent call last):"
    assert traceback[20] == "  ..." and traceback[-1] == "RecursionError: deep"


def test_log_summary_follows_a_chained_exception_to_the_one_raised_last(tmp_path):
    chain = rank_traceback(None, "KeyError: 'step'") + [
        "", "During handling of the above exception, another exception occurred:", ""] + rank_traceback(
        None, "RuntimeError: boom")
    summary = job_log.log_summary(write_log(tmp_path, ["starting"] + chain + ["after"]))
    assert summary["failed_rank"] is None and summary["traceback"] == chain


def test_log_summary_of_a_rank_whose_exception_was_raised_from_another(tmp_path):
    disk_full = rank_traceback(0, "OSError: [Errno 28] No space left on device") + [
        "[rank0]: ", "[rank0]: The above exception was the direct cause of the following exception:", "[rank0]: "
    ] + rank_traceback(0, "trainer.checkpoint.CheckpointError: could not write the checkpoint of step 40; "
                          "step_000030.pt is the newest complete one")
    lost_peer = rank_traceback(1, GLOO_LOST_PEER)
    # The ranks' lines interleave in the job's log.
    lines = disk_full[:6] + lost_peer[:2] + disk_full[6:9] + lost_peer[2:] + disk_full[9:] + LAUNCHER_TRACEBACK
    summary = job_log.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] == "0"
    assert summary["traceback"] == [line[len("[rank0]: "):] for line in disk_full]
    assert summary["traceback"][4] == "OSError: [Errno 28] No space left on device"
    assert summary["traceback"][-1].startswith("trainer.checkpoint.CheckpointError: could not write")


def test_log_summary_does_not_join_tracebacks_without_a_chain_line(tmp_path):
    first, second = rank_traceback(None, "ValueError: first"), rank_traceback(None, "KeyError: 'second'")
    summary = job_log.log_summary(write_log(tmp_path, first + [""] + second))
    assert summary["traceback"] == first


class CountingOpen:
    """open() for job_log that counts the bytes its files return."""

    def __init__(self):
        self.read_bytes = 0

    def __call__(self, *args, **kwargs):
        handle = open(*args, **kwargs)
        read = handle.read

        def counting_read(*read_args):
            data = read(*read_args)
            self.read_bytes += len(data)
            return data
        handle.read = counting_read
        return handle


@pytest.fixture
def reads(monkeypatch):
    counter = CountingOpen()
    monkeypatch.setattr(job_log, "open", counter, raising=False)
    return counter


def test_log_summary_reads_from_the_last_start_only(tmp_path, reads):
    filler = b"x" * 1023 + b"\n"
    path = tmp_path / "slurm-42.out"
    with open(str(path), "wb") as handle:
        handle.write(b"llmtrain: job 42 start 1 on n[1-2], master n1:20042\nRuntimeError: from an earlier start\n")
        handle.write(filler * (40 * 1024))
        handle.write(b"llmtrain: job 42 start 2 on n[1-2], master n1:20042\n")
        handle.write(b"".join(line.encode() + b"\n" for line in rank_traceback(1, "RuntimeError: boom")))
    assert path.stat().st_size > 40 * 1024 * 1024
    summary = job_log.log_summary(str(path), tail=2)
    assert reads.read_bytes < 2 * 1024 * 1024  # the start line is found from the end
    assert summary["start"] == "llmtrain: job 42 start 2 on n[1-2], master n1:20042"
    assert summary["errors"] == ["[rank1]: RuntimeError: boom"]
    assert summary["failed_rank"] == "1"
    assert summary["tail"][-1] == "[rank1]: RuntimeError: boom"


@pytest.mark.parametrize("block", [1, 7, 64, 100, 4096])
def test_last_start_finds_a_start_line_cut_by_its_blocks(tmp_path, block):
    starts = [b"llmtrain: job 7 start %d on n1, master n1:20007\n" % i for i in (1, 2)]
    data = starts[0] + b"x\n" * 40 + b"not at a line's start: " + starts[1] + b"y\n" * 3 + starts[1] + b"z\n" * 30
    path = tmp_path / "out"
    path.write_bytes(data)
    with open(str(path), "rb") as handle:
        assert job_log.last_start(handle, block=block) == data.rindex(starts[1])
    path.write_bytes(starts[0] + b"x\n" * 40)
    with open(str(path), "rb") as handle:
        assert job_log.last_start(handle, block=block) == 0
    path.write_bytes(b"no start line\n" * 40)
    with open(str(path), "rb") as handle:
        assert job_log.last_start(handle, block=block) == 0


def test_log_summary_of_a_log_without_a_start_line_reads_it_all(tmp_path):
    lines = ["RuntimeError: early"] + ["step %d" % i for i in range(100)]
    summary = job_log.log_summary(write_log(tmp_path, lines), tail=1)
    assert summary["start"] is None and summary["errors"] == ["RuntimeError: early"]
    assert summary["tail"] == ["step 99"]


def test_log_summary_names_the_node_of_a_process_without_rank_from_srun(tmp_path):
    lines = rank_traceback(None, "ValueError: bad value") + [
        "srun: error: n3: task 0: Exited with exit code 1", "srun: error: n4: task 1: Exited with exit code 1"]
    summary = job_log.log_summary(write_log(tmp_path, lines))
    assert summary["failed_rank"] is None and summary["node"] == "n3"
    assert job_log.log_summary(write_log(tmp_path, lines[:-2]))["node"] is None


def test_tail_of_output_without_newlines_is_one_cut_line(tmp_path, reads):
    path = tmp_path / "out"
    path.write_bytes(b"#" * (8 * 1024 * 1024))
    lines = job_log.tail_lines(str(path), 30)
    assert reads.read_bytes <= job_log.MAX_TAIL_BYTES
    assert len(lines) == 1
    assert lines[0].startswith(job_log.CUT + "####") and lines[0].endswith("####" + job_log.CUT)
    assert len(lines[0]) == job_log.MAX_LINE_CHARS + len(job_log.CUT)


def test_log_summary_cuts_long_lines(tmp_path):
    summary = job_log.log_summary(write_log(tmp_path, ["Error: " + "y" * 10000, "done"]))
    assert summary["errors"] == ["Error: " + "y" * (job_log.MAX_LINE_CHARS - 7) + job_log.CUT]
    assert summary["tail"][-1] == "done"


def test_tail_of_carriage_return_progress_stops_at_the_last_updates(tmp_path, reads):
    path = tmp_path / "out"
    path.write_bytes(b"start\n" + b"\r".join(b"%7d/1000000" % i for i in range(200001)))
    assert job_log.tail_lines(str(path), 2, block=4096) == [" 199999/1000000", " 200000/1000000"]
    assert reads.read_bytes <= 4096
    windows = tmp_path / "crlf"
    windows.write_bytes(b"a\r\nb\r\nc\r\n")
    assert job_log.tail_lines(str(windows), 2, block=2) == ["b", "c"]


def test_nul_runs_left_by_a_crash_are_not_lines(tmp_path):
    path = tmp_path / "out"
    path.write_bytes(b"line 1\nline 2 before the crash" + b"\0" * 100000 + b"line 3 after the requeue\n" + b"\0" * 5000)
    assert job_log.tail_lines(str(path), 2) == ["line 2 before the crash", "line 3 after the requeue"]
    assert job_log.log_summary(str(path))["tail"] == ["line 1", "line 2 before the crash", "line 3 after the requeue"]


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64])
def test_log_summary_reads_the_same_lines_in_any_pieces(tmp_path, monkeypatch, piece):
    path = tmp_path / "out"
    path.write_bytes(b"llmtrain: job 42 start 1 on n1, master n1:20042\r\n" + b"a\r\n\r\nb" + b"\0" * 9 + b"c\n" +
                     b"\0\0\n\n" + b"Error: " + b"y" * 10000 + b"\n" + b"1/3\r2/3\r3/3\n" + "é\n".encode() + b"end")
    whole = job_log.log_summary(str(path), tail=20)
    assert whole["tail"] == ["llmtrain: job 42 start 1 on n1, master n1:20042", "a", "", "b", "c", "",
                             "Error: " + "y" * (job_log.MAX_LINE_CHARS - 7) + job_log.CUT, "1/3", "2/3", "3/3", "é",
                             "end"]
    monkeypatch.setattr(job_log, "READ_BYTES", piece)
    assert job_log.log_summary(str(path), tail=20) == whole


def test_slurm_s_own_lines_of_why_the_job_ended_are_error_lines_in_every_release_and_never_crowded_out(tmp_path):
    """A lost node: the surviving ranks' lost-peer errors come first, Slurm's node-failure lines
    after them. 22.05 and 24.11 write Slurm's lines as "slurmstepd: error: ***", 26.05 begins them
    with a timestamp instead (its prefix as 26.05.5 wrote it here; the rest of each line as 22.05
    writes it)."""
    peers = ["[rank%d]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
             "[10.77.0.2]:4000" % rank for rank in range(12)]
    slurm = ["srun: error: Node failure on slurm-worker-1",
             "slurmstepd: error: *** JOB 21 ON slurm-worker-0 CANCELLED AT 2026-12-05T06:19:51 DUE TO NODE FAILURE, "
             "SEE SLURMCTLD LOG FOR DETAILS ***",
             "[2026-12-05T06:19:51.002] error: *** JOB 23 ON snpn0 CANCELLED AT 2026-12-05T06:19:51 DUE TO NODE FAILURE, "
             "SEE SLURMCTLD LOG FOR DETAILS ***",
             "[2026-12-05T06:21:07.113] error: *** REASON: RaisedSignal:12(User defined signal 2) ***"]
    summary = job_log.log_summary(write_log(tmp_path, peers + slurm + ["srun: error: n1: task 3: Killed"]))
    assert summary["errors"] == peers[:8] + slurm
    assert job_log.ERROR_LINE.search(slurm[3]) and not job_log.ERROR_LINE.search("[rank0]: step 10 error rate 0.1")


JOB_LOGS = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm", "job_logs")


@pytest.mark.parametrize("name, first", [
    # a stray SIGTERM a second into the start: srun tells that task Terminated before it ends the step
    ("stray_sigterm_at_start.out", "srun: error: slurm3-worker-1: task 1: Terminated"),
    # a rank's failure: its task exited first, srun then ended the others (Terminated)
    ("rank_failed.out", None),
    # the time limit: the launchers' death signals come first, but Slurm ended the job
    ("time_limit.out", None),
])
def test_log_summary_tells_a_sigterm_that_ended_the_step_first_from_srun_and_slurm_ending_it(name, first):
    """Real logs (fixtures/slurm/job_logs/SOURCES.md): only a SIGTERM from outside, ending a task before
    any other ended and with the job not ended by Slurm, is sigterm_first."""
    assert job_log.log_summary(os.path.join(JOB_LOGS, name), tail=0)["sigterm_first"] == first


def test_a_launchers_death_signal_before_any_task_ended_is_a_sigterm_first(tmp_path):
    """After torch.distributed.run has its handlers, its SIGTERM is its death-signal line (torch 2.x's
    words, as in time_limit.out), before srun tells the task exited."""
    log = tmp_path / "job.out"
    log.write_text("llmtrain: job 7 start 2 on n[1-2], master n1:20007\n"
                   "[rank0]: step 3 loss 4.1\n"
                   "W1206 08:41:16.450000 28781 torch/distributed/elastic/agent/server/api.py:753] Received 15 death "
                   "signal, shutting down workers\n"
                   "srun: error: n2: task 1: Exited with exit code 1\n")
    assert job_log.log_summary(str(log))["sigterm_first"].endswith("Received 15 death signal, shutting down workers")
    # a rank's own line saying it is no launcher's
    log.write_text("llmtrain: job 7 start 2 on n[1-2], master n1:20007\n"
                   "[rank1]: Received 15 death signal\nsrun: error: n2: task 1: Exited with exit code 1\n")
    assert job_log.log_summary(str(log))["sigterm_first"] is None
