"""The hang watch of the training job (llmtrain_node.hang): when silence is a hang, what each
node's dump holds (real processes, real py-spy), and which node the dumps name."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import hang

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "py_spy")
WAITING = ("allreduce (torch/distributed/distributed_c10d.py:2838)", "wrapper (torch/distributed/c10d_logger.py:81)",
           "train_step (trainer/train.py:301)")


def rank(number, state="S", frames=WAITING, wchan="futex_wait_queue"):
    return dict(pid=1000 + number, rank=number, local_rank=number % 2, state=state, wchan=wchan, frames=list(frames))


def dumps(*per_node):
    """{node: record} of nodes n0, n1, ... with the given ranks each."""
    return {"n%d" % i: dict(node="n%d" % i, ranks=ranks) for i, ranks in enumerate(per_node)}


class Clock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def record(step, **more):
    return json.dumps(dict(step=step, loss=3.5, **more)) + "\n"


def append(path, text):
    with open(path, "a") as handle:
        handle.write(text)


def test_silence_counts_from_this_starts_first_training_record_and_auto_scales_with_the_record_interval(tmp_path):
    metrics, log = tmp_path / "metrics.jsonl", tmp_path / "job.out"
    metrics.write_text(record(10) + record(20))  # an earlier start's records
    log.write_text("step 20/60 | loss 3.1\n")
    clock = Clock()
    silence = hang.Silence([str(metrics), str(log)], "auto", clock)
    # the start-up: the launcher's and the trainer's lines, a resume event, an unfinished line:
    # no progress and no hang, however long
    for at, (path, text) in enumerate([(log, "llmtrain: node check ok\n"), (log, "W1204 torch.distributed.run: *****\n"),
                                       (metrics, json.dumps(dict(event="resume", step=20)) + "\n"),
                                       (log, "compiling the model ... step 30 loss")], 1):
        clock.now = 5000.0 * at
        append(path, text)
        assert not silence.look() and silence.silent_for() is None
    assert silence.waiting_s() == 20000.0
    for at in range(1, 8):
        clock.now = 20000.0 + 60 * at
        append(metrics, record(20 + at))
        assert silence.look()
    assert silence.waiting_s() is None
    clock.now += 400
    assert silence.limit() == 600 and silence.silent_for() == 400  # 10 x 60 s
    append(log, "saving a checkpoint\n")  # from the first record on, any line is progress
    assert silence.look() and silence.silent_for() == 0
    fast = hang.Silence([str(metrics)], "auto", clock)
    for _poll in range(5):
        clock.now += 2
        append(metrics, record(99))
        fast.look()
    assert fast.limit() == hang.AUTO_FLOOR_S
    assert hang.Silence([str(metrics)], 20.0, clock).limit() == 20.0


def test_a_script_that_logs_only_to_tensorboard_has_its_loss_records_as_progress(tmp_path):
    """Lightning's log is silent while it trains (its progress bar is drawn at the end): its
    default logger's event file is its progress, a file an earlier start wrote is not."""
    from torch.utils.tensorboard import SummaryWriter
    metrics, log = tmp_path / "metrics.jsonl", tmp_path / "job.out"
    metrics.write_text("")
    log.write_text("")
    wall = Clock()
    wall.now = time.time() - 100  # this start began then (the files' times are real ones)
    logs = tmp_path / "src" / "lightning_logs" / "version_7"
    earlier = SummaryWriter(str(logs))  # the job's start before this one
    earlier.add_scalar("train_loss", 3.0, 4)
    earlier.close()
    os.utime(str(logs / os.listdir(str(logs))[0]), (wall.now - 60, wall.now - 60))
    events = hang.EventFiles([str(tmp_path / "src"), str(tmp_path)], wall=wall)
    clock = Clock()
    silence = hang.Silence([str(metrics), str(log)], 30.0, clock, events=events)
    clock.now = 10.0
    append(log, "GPU available: False, used: False\n")
    assert not silence.look() and silence.waiting_s() == 10.0
    wall.now += 20  # a search again is due
    clock.now = 40.0
    assert not silence.look() and silence.silent_for() is None  # the earlier start's file
    writer = SummaryWriter(str(tmp_path / "src" / "lightning_logs" / "version_8"))
    for step in (4, 9):
        writer.add_scalar("train_loss", 2.0 / (step + 1), step)
        writer.flush()
        wall.now += 20
        clock.now += 20
        assert silence.look() and silence.silent_for() == 0 and silence.waiting_s() is None and events.step == step
    clock.now += 20
    wall.now += 20
    assert not silence.look() and silence.silent_for() == 20  # nothing new: silence
    writer.close()


def test_after_the_ranks_started_again_the_clock_waits_for_their_first_record_again(tmp_path):
    """torch.distributed.run restarted the ranks inside the job: their start-up (a checkpoint to load,
    a model to compile) is as quiet as the first start's, and no hang."""
    metrics, log = tmp_path / "metrics.jsonl", tmp_path / "job.out"
    metrics.write_text("")
    log.write_text("")
    clock = Clock()
    silence = hang.Silence([str(metrics), str(log)], 30.0, clock)
    clock.now = 10.0
    append(metrics, record(1))
    assert silence.look() and silence.waiting_s() is None
    clock.now = 100.0  # 90 s without a record: over the timeout, and the ranks started again
    silence.rearm()
    for at, text in enumerate(["train: resuming at step 1 from step_000001.pt\n", "compiling ...\n"], 1):
        clock.now = 100.0 + 500 * at
        append(log, text)
        assert not silence.look() and silence.silent_for() is None
    assert silence.waiting_s() == 1000.0
    clock.now = 1200.0
    append(metrics, record(2))
    assert silence.look() and silence.silent_for() == 0 and silence.waiting_s() is None


def fake_proc(tmp_path, ranks):
    """A /proc of this user's processes: {pid: environment}."""
    proc = tmp_path / "proc"
    proc.mkdir()
    for pid, env in ranks.items():
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "environ").write_bytes(b"\0".join(("%s=%s" % kv).encode() for kv in env.items()))
    return str(proc)


def test_the_batch_nodes_ranks_are_this_jobs_on_this_node(tmp_path, monkeypatch):
    job = dict(SLURM_JOB_ID="45", SLURMD_NODENAME="n0", LOCAL_RANK="0", RANK="0")
    monkeypatch.setenv("SLURM_JOB_ID", "45")
    monkeypatch.setenv("SLURMD_NODENAME", "n0")
    proc = fake_proc(tmp_path, {101: job, 102: dict(job, LOCAL_RANK="1", RANK="1"),
                                103: dict(job, SLURMD_NODENAME="n1", RANK="2"), 104: dict(job, SLURM_JOB_ID="46"),
                                105: dict(SLURM_JOB_ID="45", SLURMD_NODENAME="n0")})  # the launcher: no RANK
    assert hang.local_rank_pids(proc) == {101, 102}


def test_numbers_in_an_environment_are_ascii_digits_or_none(tmp_path, monkeypatch):
    """A rank's RANK and the job's SLURM_RESTART_COUNT in other scripts' digits (which int() reads) or
    not digits at all (which made int() raise) count as none."""
    job = dict(SLURM_JOB_ID="45", SLURMD_NODENAME="n0", LOCAL_RANK="0", RANK="0")
    monkeypatch.setenv("SLURM_JOB_ID", "45")
    monkeypatch.setenv("SLURMD_NODENAME", "n0")
    proc = fake_proc(tmp_path, {101: dict(job, RANK="1"), 102: dict(job, RANK="\u0662"), 103: dict(job, RANK="x")})
    found = [pid for pid, _env in hang.ranks_of("45", "n0", proc=proc)]
    assert sorted(found[:2]) == [102, 103] and found[2] == 101  # as rank 0, in the order /proc lists them
    for count, restart in (("2", 2), ("\u0662", 0), ("\uff12", 0), ("1_0", 0), ("x", 0), ("", 0)):
        monkeypatch.setenv("SLURM_RESTART_COUNT", count)
        assert hang.summarize({}, [], {}, 61.2, 60, 41, str(tmp_path))["restart"] == restart


def test_with_restarts_in_the_job_a_silence_is_a_hang_only_when_the_ranks_stay_the_same():
    """torch.distributed.run stops the ranks of every node after a failure and starts new ones: the
    silence until then is no hang. Ranks that stay the same processes past the grace are hung."""
    clock, pids = Clock(), [{101, 102}]
    grace = hang.RestartGrace(60, pids=lambda: pids[0], clock=clock)
    assert grace.check() == "wait"  # the silence went over the limit: the grace begins
    clock.now = 30.0
    assert grace.check() == "wait"
    pids[0] = set()  # the launcher stopped them
    assert grace.check() == "restarted"
    # a hang: the same processes through the grace
    pids[0] = {201, 202}
    clock.now = 100.0
    assert grace.check() == "wait"
    clock.now = 159.0
    assert grace.check() == "wait"
    clock.now = 160.0
    assert grace.check() == "hang"
    # progress in between starts the grace again
    assert grace.check() == "wait"
    grace.reset()
    clock.now = 300.0
    assert grace.check() == "wait" and grace.since == 300.0


@pytest.mark.parametrize("line, patterns, is_record", [
    ("{'loss': '2.346', 'grad_norm': '1.2', 'learning_rate': '5e-05', 'epoch': '0.12'}", None, True),  # HF Trainer 5.x
    ("\x1b[31mstep: 10  \x1b[32mloss:  9.8765  \x1b[33mmemory: 1.2GiB", None, True),  # torchtitan, coloured
    ("iter 100: loss 2.3456, time 41.2ms, mfu 38.1%", None, True),  # nanoGPT
    ("{\"step\": 12, \"loss\": 3.25, \"lr\": 0.0006}", None, True),  # the metrics file
    ("{\"event\": \"resume\", \"step\": 12}", None, False),
    ("Loading checkpoint shards: 100%|##########| 4/4 [00:03<00:00]", None, False),
    ("[rank0]: NCCL WARN Call to ibv_create_qp failed", None, False),
    ("ep 3 it 40 | ce 2.75", [r"it (?P<step>\d+) \| ce (?P<loss>\S+)"], True),  # pretrain_progress_regex
    ("iter 100: loss 2.3456", [r"it (?P<step>\d+) \| ce (?P<loss>\S+)"], False),  # yours replace the known ones
    ("x" * 600 + "it 4 | ce 2.7", [r"it (?P<step>\d+) \| ce (?P<loss>\S+)"], False),  # yours see 512 characters
])
def test_what_is_a_training_record(line, patterns, is_record):
    assert hang.Records(patterns)(line) is is_record


def test_the_lines_a_file_gains_are_read_bounded_and_whole(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("before the watch\n")
    lines = hang.NewLines(str(log))
    append(log, "one\ntw")
    assert lines.read() == ["one"]
    append(log, "o\n")
    assert lines.read() == ["two"]
    append(log, "y" * (2 * hang.READ_MAX_BYTES) + "\nlast\n")  # a burst: its newest READ_MAX_BYTES
    got = lines.read()
    assert got[-1] == "last" and sum(len(line) + 1 for line in got) <= hang.READ_MAX_BYTES
    log.write_text("new\n")  # started again
    assert lines.read() == ["new"]


def test_a_stopped_rank_names_its_node():
    found = hang.judge(dumps([rank(0), rank(1)], [rank(2, "T", ["train_step (trainer/train.py:290)"]), rank(3)],
                             [rank(4), rank(5)]), ["n0", "n1", "n2"])
    assert found == {"n1": "rank 2 stopped (state T)"}


def test_a_rank_in_uninterruptible_sleep_and_a_node_that_did_not_answer_are_named():
    found = hang.judge(dumps([rank(0), rank(1, "D", wchan="nv_wait")], [rank(2), rank(3)]), ["n0", "n1", "n2"])
    assert found == {"n0": "rank 1 in uninterruptible sleep (state D, in nv_wait): a device or file system that "
                           "does not answer",
                     "n2": "no answer to the stack dump within %d s" % hang.STEP_TIMEOUT_S}
    assert hang.judge(dumps([rank(0)], []), ["n0", "n1"]) == {"n1": "no training process of the job left on the node"}


def test_the_rank_outside_the_collective_the_others_wait_in_names_its_node():
    busy = ["load_batch (train.py:120)", "train_step (train.py:301)"]
    found = hang.judge(dumps([rank(0), rank(1)], [rank(2), rank(3, frames=busy)], [rank(4), rank(5)]),
                       ["n0", "n1", "n2"])
    assert found == {"n1": "rank 3 is in load_batch while 5 other rank(s) wait in allreduce"}
    # every rank in the same frame, or the odd ones on half the nodes or more: no node named
    assert hang.judge(dumps([rank(0)], [rank(1)]), ["n0", "n1"]) == {}
    assert hang.judge(dumps([rank(0)], [rank(1, frames=busy)]), ["n0", "n1"]) == {}


def test_the_main_threads_frames_of_a_real_dump():
    with open(os.path.join(FIXTURES, "dump_0.4.3_stopped.txt")) as handle:
        text = handle.read()
    assert hang.main_thread_frames(text, 4242) == ["wait_in_collective (sl.py:3)", "train_step (sl.py:5)",
                                                   "<module> (sl.py:6)"]
    two = text + "Thread 4300 (idle)\n    worker (threading.py:10)\n"
    assert hang.main_thread_frames(two, 4300) == ["worker (threading.py:10)"]


def test_the_dump_finds_the_jobs_ranks_their_states_and_stacks(tmp_path, monkeypatch):
    """Two real processes with a job's rank environment, one stopped; py-spy from this Python's
    directory, as the run's venv has it."""
    if hang.py_spy() is None:
        pytest.fail("py-spy is not beside %s: it is in requirements.txt (make venv)" % sys.executable)
    script = "import time\ndef wait_in_collective():\n    time.sleep(120)\nwait_in_collective()\n"
    procs = []
    for number in (0, 1):
        env = dict(os.environ, SLURM_JOB_ID="hang-test-%d" % os.getpid(), RANK=str(number), LOCAL_RANK=str(number))
        procs.append(subprocess.Popen([sys.executable, "-c", script], env=env))
    try:
        time.sleep(1.0)
        os.kill(procs[1].pid, signal.SIGSTOP)
        time.sleep(0.2)
        monkeypatch.setenv("SLURM_JOB_ID", "hang-test-%d" % os.getpid())
        monkeypatch.setenv("SLURMD_NODENAME", "n7")
        assert hang.main(["dump", "--out-dir", str(tmp_path)]) == 0
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    record = json.loads((tmp_path / "n7.json").read_text())
    assert [(r["rank"], r["pid"], r["state"]) for r in record["ranks"]] == [
        (0, procs[0].pid, "S"), (1, procs[1].pid, "T")]
    for found in record["ranks"]:
        assert found["frames"][0].startswith("wait_in_collective ("), found
    assert "wait_in_collective" in (tmp_path / "n7.txt").read_text()
    assert hang.judge({"n7": record, "n8": dict(ranks=[rank(5)])}, ["n7", "n8"]) == {"n7": "rank 1 stopped (state T)"}


def test_the_last_step_comes_from_the_metrics_files_end(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"event": "start", "step": 0}\n{"step": 41, "loss": 2.5}\n{"event": "checkpoint", "step": 40}\n'
                       '{"step": 42, "lo')
    assert hang.last_step(str(metrics)) == 41
    assert hang.last_step(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("value", ["0", "-5", "soon"])
def test_a_timeout_is_auto_or_seconds(value):
    with pytest.raises(SystemExit):
        hang.parser().parse_args(["watch", "--pid", "1", "--out-dir", "d", "--marker", "m", "--timeout", value])


class Ran(object):
    """subprocess.run of the policy's Slurm commands, recorded; each succeeds."""

    def __init__(self):
        self.argvs = []

    def __call__(self, argv, **_kwargs):
        self.argvs.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, stdout="")


def policy_args(tmp_path, policy, requeue_max=3):
    return hang.parser().parse_args(["watch", "--pid", "999999", "--out-dir", str(tmp_path / "hangs"), "--marker",
                                     str(tmp_path / "HANG"), "--bad-nodes-file", str(tmp_path / "bad_nodes.json"),
                                     "--policy", policy, "--requeue-max", str(requeue_max), "--timeout", "20"])


@pytest.mark.parametrize("policy, restart, suspects, command, marker", [
    ("requeue", 0, {"n1": "rank 2 stopped (state T)"}, ["scontrol", "requeuehold", "77"], False),
    ("requeue", 0, {}, ["scontrol", "requeue", "77"], False),  # no node named: as it is
    ("requeue", 3, {"n1": "rank 2 stopped (state T)"}, ["squeue", "--steps", "--jobs", "77", "--noheader",
                                                        "--format=%i|%j"], True),  # requeues used up: fail
    ("fail", 0, {"n1": "rank 2 stopped (state T)"}, ["squeue", "--steps", "--jobs", "77", "--noheader",
                                                     "--format=%i|%j"], True),
    ("warn", 0, {"n1": "rank 2 stopped (state T)"}, None, False),
])
def test_the_policy(tmp_path, monkeypatch, policy, restart, suspects, command, marker):
    ran = Ran()
    monkeypatch.setattr(hang.subprocess, "run", ran)
    monkeypatch.setattr(hang.time, "sleep", lambda _s: None)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    summary = dict(suspects=suspects, restart=restart, time="2026-12-04T15:00:00Z", step=41)
    assert hang.act(policy_args(tmp_path, policy), summary) == 0
    assert (ran.argvs[:1] or [None])[0] == command
    assert (tmp_path / "HANG").exists() == marker
    bad = json.loads((tmp_path / "bad_nodes.json").read_text()) if (tmp_path / "bad_nodes.json").exists() else {}
    if policy == "requeue" and suspects and restart < 3:
        assert bad == {"n1": dict(reason="hang: rank 2 stopped (state T)", job_id="77", time="2026-12-04T15:00:00Z")}
    else:
        assert bad == {}


def test_a_step_that_logs_and_ends_between_two_looks_still_says_its_first_record(tmp_path, capsys):
    """The job script ends the watch (SIGTERM) as soon as the training step ended: what the step
    logged since the watch's last look is looked at once more, and its first record said."""
    log = tmp_path / "job.out"
    log.write_text("starting\n")
    training = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    args = hang.parser().parse_args(["watch", "--pid", str(training.pid), "--progress", str(log), "--poll", "30",
                                     "--record-pattern", r"^iter (?P<step>\d+): loss", "--out-dir", str(tmp_path),
                                     "--marker", str(tmp_path / "marker")])

    def the_step_logs_and_ends():
        time.sleep(0.5)
        append(str(log), "iter 0: loss 5.7661, time 22.97ms\n")
        training.kill()
        training.wait()
        os.kill(os.getpid(), signal.SIGTERM)  # as the job script's kill "${hang_watch}"

    ender = threading.Thread(target=the_step_logs_and_ends)
    ender.start()
    began, handler = time.monotonic(), signal.getsignal(signal.SIGTERM)
    assert hang.watch(args) == 0
    ender.join()
    assert time.monotonic() - began < 10  # it did not sleep out its poll
    assert capsys.readouterr().out == ("llmtrain: hang: the first training record of this start came after 0 s; the "
                                       "training step ended before the hang watch's next look\n")
    assert signal.getsignal(signal.SIGTERM) is handler  # the caller's own handler is back
