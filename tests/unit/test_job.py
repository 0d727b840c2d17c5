"""The training job's own logic (llmtrain_node.job), run as the job script runs it - the shipped
package, `python -m llmtrain_node.job CONFIG -- COMMAND` in a process of its own - against fake
scontrol and scancel commands on PATH that log each call and answer from files the test writes,
a fake check and a fake training step. What a user reads afterwards: the start and end lines of
starts.jsonl, the done record, the job's log, the requeue asked of Slurm, the exit status."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import Train
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.exit_codes import code
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files
from ansible_collections.llmtrain.slurm.tests.unit.jobs import golden

from test_node_package import ship_node_package

# the interpreter the job runs with: slurm_python, or with a container the node's python3 (3.7 or
# later, docs/containers.md); LLMTRAIN_TEST_JOB_PYTHON=python3.7 tries the oldest
JOB_PYTHON = os.environ.get("LLMTRAIN_TEST_JOB_PYTHON") or sys.executable
FAKE_SCONTROL = r'''#!/usr/bin/env python3
import os, re, sys
fake = os.environ["FAKE_SLURM"]
with open(os.path.join(fake, "calls"), "a") as f:
    f.write(" ".join(["scontrol"] + sys.argv[1:]) + "\n")
args = sys.argv[1:]
def expand(text):
    out = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text):
        m = re.match(r"(.*)\[(.*)\]$", part)
        if not m:
            out.append(part)
            continue
        for piece in m.group(2).split(","):
            lo, _, hi = piece.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append("%s%0*d" % (m.group(1), len(lo), i))
    return out
if args[:2] == ["show", "hostnames"]:
    print("\n".join(expand(args[2])))
elif args[:2] == ["show", "hostlist"]:
    print(args[2])
elif args[:2] == ["show", "job"]:
    path = os.path.join(fake, "show_job")
    print(open(path).read().strip() if os.path.exists(path) else "JobId=%s JobState=RUNNING" % args[-1])
'''
FAKE_SCANCEL = '''#!/bin/sh
echo "scancel $*" >> "${FAKE_SLURM}/calls"
'''


class Fake:
    def __init__(self, tmp_path):
        self.root = tmp_path
        self.run_dir = tmp_path / "run"
        (self.run_dir / "scripts").mkdir(parents=True)
        ship_node_package(self.run_dir / "scripts")
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        for name, text in (("scontrol", FAKE_SCONTROL), ("scancel", FAKE_SCANCEL)):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.slurm = tmp_path / "slurm"
        self.slurm.mkdir()
        self.config = dict(run_dir=str(self.run_dir), requeue_max=2, uncounted_max=3,
                           done_file=str(self.run_dir / "train.done.json"), checks=[], script_chdir=None,
                           wandb_run=None, hang=None)
        self.env = dict(os.environ, PATH="%s:%s" % (self.bin, os.environ["PATH"]), FAKE_SLURM=str(self.slurm),
                        SLURM_JOB_ID="42", SLURM_JOB_NODELIST="n[1-3]", MASTER_PORT="29500",
                        PYTHONPATH=str(self.run_dir / "scripts"))

    def step(self, text):
        """A training step: a shell script that sees the job's environment."""
        return ["sh", "-c", textwrap.dedent(text)]

    def start(self, command, restart=0):
        env = dict(self.env, SLURM_RESTART_COUNT=str(restart))
        return subprocess.Popen([JOB_PYTHON, "-m", "llmtrain_node.job", json.dumps(self.config), "--"] + command,
                                cwd=str(self.root), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def run(self, command, restart=0):
        proc = self.start(command, restart)
        out = proc.communicate(timeout=60)[0].decode()
        return proc.returncode, out

    def lines(self):
        path = self.run_dir / run_files.STARTS
        return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")] \
            if path.exists() else []

    def calls(self):
        path = self.slurm / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def wait_for(self, path, timeout=20):
        deadline = time.time() + timeout
        while not os.path.exists(path):
            assert time.time() < deadline, "%s never came" % path
            time.sleep(0.05)


@pytest.fixture
def fake(tmp_path):
    return Fake(tmp_path)


def test_a_finished_training_adds_its_start_and_end_lines_and_marks_the_done_record(fake):
    (fake.run_dir / "train.done.json").write_text(json.dumps(dict(job_id="42", fingerprint="f", state="PENDING")))
    fake.config["checks"] = [["sh", "-c", 'echo "check on $SLURM_JOB_ID"']]
    status, out = fake.run(fake.step('echo "training with master $MASTER_ADDR:$MASTER_PORT, path ${PYTHONPATH:-none}"'))
    assert status == 0, out
    assert "llmtrain: job 42 start 1 on n[1-3], master n1:29500" in out
    assert "check on 42" in out
    # the step gets the master address, and the environment the job script had (not the package's path)
    assert "training with master n1:29500, path none" in out
    assert "llmtrain: job 42 ends with exit code 0 at " in out
    start, end = fake.lines()
    assert start == dict(job_id="42", start=1, nodes="n[1-3]", left="", time=start["time"],
                         node_count=3)
    assert end == dict(event="end", job_id="42", start=1, how="finished", exit_code=0, time=end["time"])
    done = json.loads((fake.run_dir / "train.done.json").read_text())
    assert done["state"] == "COMPLETED" and done["exit_code"] == "0:0"


def test_the_settings_the_training_jobs_script_gives_it_run_its_checks_then_the_training(fake):
    """The settings jobs/train.py writes into the job script, for this run directory."""
    values = dict(golden.variables("ours"), slurm_workspace=str(fake.root), run_name=fake.run_dir.name, pretrain_hang_timeout=0)
    fake.config = Train(values).job_config()
    for name in ("node_check.sh", "network_check.sh"):
        (fake.run_dir / "scripts" / name).write_text('echo "%s $*"\n' % name)
    (fake.run_dir / "train.done.json").write_text(json.dumps(dict(job_id="42", fingerprint="f", state="PENDING")))
    status, out = fake.run(fake.step("echo trained"))
    assert status == 0, out
    assert out.index("node_check.sh --gpus 0 --require-torch --procs 2") < out.index(
        "network_check.sh --gpus 0 --procs 2 --policy warn --min-fraction 0.5 --timeout 60") < out.index("trained")
    assert fake.lines()[-1]["how"] == "finished"
    assert json.loads((fake.run_dir / "train.done.json").read_text())["state"] == "COMPLETED"


@pytest.mark.parametrize("count", ["\u0662", "x"])
def test_a_restart_count_that_is_no_ascii_number_is_none(fake, count):
    """SLURM_RESTART_COUNT in other scripts' digits (which int() reads) or no digits at all (which made
    int() raise): the job's first start."""
    status, out = fake.run(fake.step("true"), restart=count)
    assert status == 0, out
    assert "llmtrain: job 42 start 1 on n[1-3]" in out and "Traceback" not in out
    assert [line["start"] for line in fake.lines()] == [1, 1]


def test_a_failed_training_ends_failed_with_its_status(fake):
    status, out = fake.run(fake.step("exit 7"))
    assert status == 7, out
    assert fake.lines()[-1]["how"] == "failed" and fake.lines()[-1]["exit_code"] == 7
    assert not (fake.run_dir / "train.done.json").exists()


def test_a_start_names_the_nodes_the_start_before_had_that_it_lacks(fake):
    (fake.run_dir / run_files.STARTS).write_text(
        json.dumps(dict(job_id="41", start=1, nodes="n[1-4]", left="", time="t")) + "\n"
        + json.dumps(dict(event="end", job_id="41", start=1, how="requeued", exit_code=0, time="t")) + "\n"
        + "not json\n")
    status, out = fake.run(fake.step("true"), restart=1)
    assert status == 0, out
    started = fake.lines()[2]
    assert started == dict(job_id="42", start=2, nodes="n[1-3]", left="n4", time=started["time"], node_count=3)


def test_a_host_list_that_could_be_an_option_is_not_read(fake):
    (fake.run_dir / run_files.STARTS).write_text(json.dumps(dict(job_id="41", start=1, nodes="-n1", left="")) + "\n")
    fake.run(fake.step("true"))
    assert not any("-n1" in call for call in fake.calls())
    assert fake.lines()[1]["left"] == ""


def test_a_check_that_asked_for_a_held_requeue_ends_the_start_requeued_without_training(fake):
    fake.config["checks"] = [["sh", "-c", "exit %d" % code("REQUEUED_HELD")], ["sh", "-c", "echo second check"]]
    status, out = fake.run(fake.step("echo training"))
    assert status == code("REQUEUED_HELD")
    assert "training" not in out and "second check" not in out
    assert fake.lines()[-1]["how"] == "requeued"


def test_a_checkpointed_stop_requeues_the_job_while_requeues_are_left_then_ends_preempted(fake):
    step = fake.step('printf \'{"signal": "SIGUSR2", "step": 5}\' > "$LLMTRAIN_RUN_DIR/PREEMPTED"')
    fake.env["LLMTRAIN_RUN_DIR"] = str(fake.run_dir)
    status, out = fake.run(step, restart=1)
    assert status == 0, out
    assert 'stopped with a checkpoint ({"signal": "SIGUSR2", "step": 5}); requeue 2 of 2' in out
    assert "scontrol requeue 42" in fake.calls()
    assert fake.lines()[-1]["how"] == "requeued"
    status, out = fake.run(step, restart=2)
    assert status == code("PREEMPTED")
    assert "run_requeue_max=2 requeues are used up" in out
    assert fake.lines()[-1]["how"] == "preempted"
    assert fake.calls().count("scontrol requeue 42") == 1


def test_the_stop_line_shows_what_the_training_wrote_as_one_line(fake):
    """A Hugging Face Trainer script writes "step 42" and a line break; a hostile one, escapes."""
    fake.env["LLMTRAIN_RUN_DIR"] = str(fake.run_dir)
    status, out = fake.run(fake.step(r"""printf 'step 42\n' > "$LLMTRAIN_RUN_DIR/PREEMPTED" """))
    assert status == 0 and "llmtrain: stopped with a checkpoint (step 42); requeue 1 of 2" in out, out
    status, out = fake.run(fake.step(r"""printf 'a\nb\033]0;title\007c\n\n' > "$LLMTRAIN_RUN_DIR/PREEMPTED" """), restart=1)
    assert "llmtrain: stopped with a checkpoint (a bc); requeue 2 of 2" in out, out


def test_a_stop_asked_for_ends_the_job_stopped_not_requeued(fake):
    (fake.run_dir / run_files.STOP).write_text("42\n")
    status, out = fake.run(fake.step("echo training"))
    assert status == code("STOPPED")
    assert "a stop was requested before training started" in out and "training\n" not in out
    assert fake.lines()[-1]["how"] == "stopped"
    assert "scontrol requeue 42" not in fake.calls()


def test_a_sweeps_stop_names_the_array_task_and_ends_that_task_stopped(fake):
    """playbooks/stop.yml -e sweep=NAME names each member's task as <array>_<index>."""
    fake.env.update(SLURM_ARRAY_JOB_ID="40", SLURM_ARRAY_TASK_ID="2")
    (fake.run_dir / run_files.STOP).write_text("40_2\n")
    status, out = fake.run(fake.step("echo training"))
    assert status == code("STOPPED") and fake.lines()[-1]["how"] == "stopped", out
    (fake.run_dir / run_files.STOP).write_text("40_3\n")
    status, out = fake.run(fake.step("echo training"), restart=1)
    assert status == 0 and "training" in out


def test_a_stop_for_another_job_is_not_this_ones(fake):
    (fake.run_dir / run_files.STOP).write_text("4\n")
    status, out = fake.run(fake.step("echo training"))
    assert status == 0 and "training" in out


def test_a_stop_notice_to_the_job_during_the_checks_requeues_it_before_training(fake):
    fake.config["checks"] = [["sh", "-c", "kill -USR2 $PPID; sleep 0.5"]]
    status, out = fake.run(fake.step("echo training"))
    assert status == 0, out
    assert "the stop notice (SIGUSR2 to the batch shell at " in out and "came during the checks" in out
    assert "training\n" not in out
    assert "scontrol requeue 42" in fake.calls()
    assert not (fake.run_dir / run_files.STOP_NOTICE).exists()


def test_a_stop_notice_to_the_job_during_training_is_passed_on_to_the_training_step(fake):
    started = fake.root / "started"
    proc = fake.start(fake.step('touch "%s"; sleep 2' % started))
    fake.wait_for(started)
    proc.send_signal(signal.SIGUSR2)
    out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert "a stop notice (SIGUSR2) to the batch shell: passed on to the training step" in out
    assert "scancel --signal=USR2 42" in fake.calls()
    assert fake.lines()[-1]["how"] == "finished"


def test_a_sigterm_to_the_job_ends_it_killed_and_names_the_signal(fake):
    started = fake.root / "started"
    # the step as Slurm leaves it to its own signal: it keeps running, off the job's output
    proc = fake.start(fake.step('echo $$ > "%s.tmp"; mv "%s.tmp" "%s"; exec sleep 60 > /dev/null 2>&1' % ((started,) * 3)))
    fake.wait_for(started)
    try:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    finally:
        os.kill(int(started.read_text()), signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert fake.lines()[-1] == dict(event="end", job_id="42", start=1, how="killed", exit_code=143, signal="SIGTERM",
                                    time=fake.lines()[-1]["time"])


@pytest.mark.parametrize("show_job, counted", [
    ("JobId=42 JobState=RUNNING Reason=None", False),
    ("JobId=42 JobState=RUNNING PreemptTime=2026-12-05T10:00:00", True),
    ("JobId=42 JobState=COMPLETING", True),
])
def test_a_sigterm_stop_while_slurm_runs_the_job_requeues_it_uncounted(fake, show_job, counted):
    (fake.slurm / "show_job").write_text(show_job)
    fake.env["LLMTRAIN_RUN_DIR"] = str(fake.run_dir)
    status, out = fake.run(fake.step('printf \'{"signal": "SIGTERM"}\' > "$LLMTRAIN_RUN_DIR/PREEMPTED"'))
    assert status == 0, out
    assert "scontrol requeue 42" in fake.calls()
    uncounted = (fake.run_dir / run_files.REQUEUES_UNCOUNTED)
    if counted:
        assert "requeue 1 of 2" in out and not uncounted.exists()
    else:
        assert "not counted against run_requeue_max (2): uncounted requeue 1 of 3 of this job" in out
        assert uncounted.read_text() == "42 1\n"


def test_uncounted_requeues_stop_at_their_bound_and_then_count(fake):
    (fake.run_dir / run_files.REQUEUES_UNCOUNTED).write_text("42 1\n42 2\n42 3\n7 1\n")
    fake.env["LLMTRAIN_RUN_DIR"] = str(fake.run_dir)
    status, out = fake.run(fake.step('printf \'{"signal": "SIGTERM"}\' > "$LLMTRAIN_RUN_DIR/PREEMPTED"'), restart=3)
    assert status == 0, out
    assert "requeue 1 of 2" in out  # three starts were uncounted requeues: this is the first counted


def test_the_hang_watch_runs_beside_the_training_and_its_verdict_ends_the_job_hang(fake):
    watch = fake.root / "watch.py"
    watch.write_text(textwrap.dedent('''\
        import json, sys
        json.dump(sys.argv[1:], open(sys.argv[sys.argv.index("--marker") + 1] + ".argv", "w"))
        open(sys.argv[sys.argv.index("--marker") + 1], "w").write("n2\\n")
        '''))
    fake.config["hang"] = dict(python=[sys.executable, str(watch)], args=["--marker", str(fake.run_dir / "HANG")],
                               prefix=["ch-run", "img", "--"])
    (fake.run_dir / run_files.REQUEUES_UNCOUNTED).write_text("42 1\n")
    status, out = fake.run(fake.step("sleep 1"), restart=1)
    assert status == code("HANG"), out
    assert "the training hung and pretrain_hang_policy ended it" in out
    argv = json.loads((fake.run_dir / "HANG.argv").read_text())
    assert argv[:3] == ["-m", "llmtrain_node.hang", "watch"]
    assert argv[argv.index("--requeue-max") + 1] == "3"  # run_requeue_max and this job's uncounted requeue
    assert argv[argv.index("--") + 1:] == ["ch-run", "img", "--"]
    assert fake.lines()[-1]["how"] == "hang"


def test_a_marker_of_an_earlier_start_is_not_this_ones(fake):
    (fake.run_dir / run_files.PREEMPTED).write_text('{"signal": "SIGUSR2"}')
    (fake.run_dir / run_files.HANG).write_text("n1")
    status, out = fake.run(fake.step("true"))
    assert status == 0 and fake.lines()[-1]["how"] == "finished", out


def test_a_missing_working_directory_of_your_script_ends_before_the_start_line(fake):
    fake.config["script_chdir"] = str(fake.root / "nowhere")
    status, out = fake.run(fake.step("true"))
    assert status == code("SETTING")
    assert "set run_script_chdir to one that exists on the nodes" in out
    assert fake.lines() == []


def test_every_start_of_the_run_continues_one_wandb_run(fake):
    fake.config["wandb_run"] = "gpt"
    ids = []
    for restart in (0, 1):
        status, out = fake.run(fake.step('echo "wandb $WANDB_RUN_ID $WANDB_RESUME"'), restart=restart)
        assert status == 0, out
        ids.append(out.split("wandb ")[1].split()[0:2])
    assert ids[0] == ids[1] and ids[0][0].startswith("gpt-") and ids[0][1] == "allow"
    assert (fake.run_dir / "wandb" / "run_id").read_text() == ids[0][0] + "\n"


def test_no_master_address_ends_the_job_failed(fake):
    fake.env["SLURM_JOB_NODELIST"] = ""
    status, out = fake.run(fake.step("true"))
    assert status == code("FAILED") and "no master address" in out


def oldest_python():
    """A Python 3.7 on this machine (pyenv's, or on PATH), or None."""
    import glob
    import shutil
    for found in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.7.*/bin/python3.7"))) + [shutil.which("python3.7")]:
        if found and subprocess.run([found, "-c", ""], stderr=subprocess.DEVNULL, check=False).returncode == 0:
            return found
    return None


@pytest.mark.skipif(oldest_python() is None, reason="no Python 3.7 on this machine to run the job with")
def test_the_job_runs_on_the_oldest_python_it_documents(fake, monkeypatch):
    """With a container the job runs on the node's own python3, 3.7 or later (docs/containers.md)."""
    monkeypatch.setattr(sys.modules[__name__], "JOB_PYTHON", oldest_python())
    fake.env["LLMTRAIN_RUN_DIR"] = str(fake.run_dir)
    status, out = fake.run(fake.step('printf \'{"signal": "SIGUSR2"}\' > "$LLMTRAIN_RUN_DIR/PREEMPTED"'))
    assert status == 0 and "requeue 1 of 2" in out, out
    status, out = fake.run(fake.step("true"), restart=1)
    assert status == 0, out
    assert [line.get("how") for line in fake.lines()] == [None, "requeued", None, "finished"]


STRAY_LOG = os.path.join(os.path.dirname(__file__), "fixtures", "slurm", "job_logs", "stray_sigterm_at_start.out")


@pytest.mark.parametrize("show_job, requeued", [
    pytest.param("JobId=42 JobState=RUNNING Reason=None", True, id="running"),
    # its time limit (EndTime now, the controller's local time): Slurm's own SIGTERM. Named: a name from the
    # time would differ between the test workers' collections when they cross a second
    pytest.param("JobId=42 JobState=RUNNING EndTime=%s" % time.strftime("%Y-%m-%dT%H:%M:%S"), False, id="at-its-end-time"),
    pytest.param("JobId=42 JobState=COMPLETING", False, id="completing"),
])
def test_a_step_a_stray_sigterm_ended_before_its_ranks_could_stop_requeues_the_job_uncounted(fake, show_job, requeued):
    """The training step's own lines of a stray SIGTERM a second into a start (recorded, SOURCES.md): srun
    tells the task Terminated, then ends the step; the job requeues itself uncounted while Slurm runs it on."""
    (fake.slurm / "show_job").write_text(show_job)
    with open(STRAY_LOG) as handle:
        step_lines = [line for line in handle.read().splitlines()[5:] if not line.startswith("llmtrain: job")]
    (fake.root / "step.out").write_text("\n".join(step_lines) + "\n")
    log = fake.root / "job.out"
    with open(log, "ab") as out:
        proc = subprocess.Popen([JOB_PYTHON, "-m", "llmtrain_node.job", json.dumps(fake.config), "--", "sh", "-c",
                                 'cat "%s"; exit 143' % (fake.root / "step.out")],
                                cwd=str(fake.root), env=dict(fake.env, SLURM_RESTART_COUNT="0"), stdout=out,
                                stderr=subprocess.STDOUT)
        status = proc.wait(60)
    text = log.read_text()
    if requeued:
        assert status == 0, text
        assert "scontrol requeue 42" in fake.calls()
        assert ("the training step ended (exit code 143) on a SIGTERM to its tasks (srun: error: slurm3-worker-1: task 1: "
                "Terminated) while Slurm still runs the job") in text, text
        assert "uncounted requeue 1 of 3 of this job" in text and fake.lines()[-1]["how"] == "requeued"
    else:
        assert status == 143 and "scontrol requeue 42" not in fake.calls(), text
        assert fake.lines()[-1]["how"] == "failed"


def test_a_task_of_a_job_array_requeues_itself_alone(fake):
    """The array's last task has the array's job id: `scontrol requeue <that id>` requeues every task
    (fixtures/slurm/arrays/requeue-*.txt), `<array>_<index>` that task alone."""
    fake.env.update(SLURM_JOB_ID="40", SLURM_ARRAY_JOB_ID="40", SLURM_ARRAY_TASK_ID="2", LLMTRAIN_RUN_DIR=str(fake.run_dir))
    status, out = fake.run(fake.step('printf \'{"signal": "SIGUSR2", "step": 5}\' > "$LLMTRAIN_RUN_DIR/PREEMPTED"'))
    assert status == 0 and "requeue 1 of 2" in out, out
    assert "scontrol requeue 40_2" in fake.calls() and "scontrol requeue 40" not in fake.calls()


def test_the_auto_rendezvous_and_network_check_ports_stay_below_the_ephemeral_ports_and_apart():
    """slurm_master_port: auto and the network check's port, as the job script and network_check.sh
    compute them: below 32768, where Linux's default ip_local_port_range begins (a port an outgoing
    connection holds cannot be listened on), and no job's network port is any job's auto port."""
    script = Train(dict(golden.variables("ours"))).script()
    master = next(line for line in script.splitlines() if line.startswith("export MASTER_PORT="))
    check = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "run", "files", "network_check.sh")
    with open(check) as handle:
        network = next(line for line in handle if line.startswith("export LLMTRAIN_NETWORK_PORT="))
    ids = list(range(1, 8002)) + [12768, 2 ** 26 - 1]
    out = subprocess.run(["bash", "-c", 'for SLURM_JOB_ID in "$@"; do %s; %s; echo "$MASTER_PORT $LLMTRAIN_NETWORK_PORT"; done'
                          % (master, network.strip()), "ports"] + [str(i) for i in ids],
                         capture_output=True, text=True, check=True).stdout.split("\n")[:-1]
    pairs = [tuple(int(port) for port in line.split()) for line in out]
    masters, networks = set(p[0] for p in pairs), set(p[1] for p in pairs)
    assert len(pairs) == len(ids) and len(masters) == 8000
    assert 1024 <= min(masters) and max(masters | networks) < 32768
    assert not masters & networks
