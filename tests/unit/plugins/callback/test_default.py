"""The llmtrain.slurm.default stdout callback: what a user sees for results as Ansible hands them over."""

import re

import pytest
from ansible import constants as C
from ansible.executor.task_result import CallbackTaskResult
from ansible.inventory.host import Host
from ansible.playbook.task import Task

from ansible_collections.llmtrain.slurm.plugins.callback import default, job_progress

# The defaults of ansible.builtin.default_callback, as set_options gives them when Ansible loads the plugin.
OPTIONS = dict(display_skipped_hosts=True, display_ok_hosts=True, display_failed_stderr=False,
               show_task_path_on_failure=False, show_per_host_start=False, check_mode_markers=False,
               show_custom_stats=False, pretty_results=None)

WATCH = dict(jobs=[dict(job_id="42", state="RUNNING", nodelist="slurm-worker-[0-2]")],
             progress=dict(step=120, total_steps=1000, loss=3.2104), retries=17281, attempts=3)
TRACEBACK = ("Training job 42 (llmtrain-demo) ended FAILED, exit code 1.\n"
             "Rank 3 failed first (node slurm-worker-1); its traceback:\n"
             "Traceback (most recent call last):\n"
             '  File "trainer/train.py", line 7, in <module>\n'
             "RuntimeError: fault injected")


class Screen:
    """Stands in for Ansible's display: keeps what would be printed."""

    verbosity = 0

    def __init__(self):
        self.lines = []

    def display(self, msg, **_kwargs):
        self.lines.extend(msg.split("\n"))

    def banner(self, msg):
        self.lines.append(msg)


def stdout_callback(result_format="yaml"):
    callback = default.CallbackModule()
    callback._plugin_options = dict(OPTIONS, result_format=result_format)
    callback._display = default.PrintableDisplay(Screen())
    return callback


def task_result(result, name="Watch the training job", loop=None):
    """result: as a callback gets it (Ansible has taken `failed` out by then)."""
    task = Task.load(dict(name=name, action="llmtrain.slurm.slurm_job_info", loop=loop))
    return CallbackTaskResult(Host("login"), task, result, {})


def test_a_failure_message_prints_with_its_line_breaks():
    callback = stdout_callback()
    callback.v2_runner_on_failed(task_result(dict(changed=False, msg=TRACEBACK), name="Fail"))
    assert callback._display.lines == ["TASK [Fail]", "fatal: [login]: FAILED!"] + TRACEBACK.split("\n")


@pytest.mark.parametrize("result_format", ["yaml", "json"])
def test_a_module_failure_prints_the_rest_of_its_result_then_the_message(result_format):
    callback = stdout_callback(result_format)
    callback.v2_runner_on_failed(task_result(dict(changed=False, rc=1, msg="sbatch rejected the job:\nno partition")))
    text = "\n".join(callback._display.lines)
    head, message = callback._display.lines[1], callback._display.lines[-2:]
    assert head.startswith("fatal: [login]: FAILED! =>") and "rc" in text and "msg" not in text and "\\n" not in text
    assert message == ["sbatch rejected the job:", "no partition"]


def test_a_list_of_messages_prints_one_per_line_and_ignoring_follows():
    callback = stdout_callback("json")
    callback.v2_runner_on_failed(task_result(dict(msg=["slurm_nodes=0 must be", "slurm_partition='gpu;id' is"])),
                                 ignore_errors=True)
    assert callback._display.lines[-3:] == ["slurm_nodes=0 must be", "slurm_partition='gpu;id' is", "...ignoring"]


def test_a_failed_loop_item_prints_its_message_with_line_breaks():
    callback = stdout_callback("json")
    callback.v2_runner_item_on_failed(task_result(dict(item="a", ansible_loop_var="item", msg="one\ntwo"),
                                                  loop=["a"]))
    assert callback._display.lines[-3].startswith("failed: [login] (item=a) =>")
    assert callback._display.lines[-2:] == ["one", "two"]


def test_a_result_without_a_text_message_prints_as_the_default_callback_does():
    callback = stdout_callback("json")
    callback.v2_runner_on_failed(task_result(dict(changed=False, msg={"code": 3})))
    assert callback._display.lines[-1] == 'fatal: [login]: FAILED! => {"changed": false, "msg": {"code": 3}}'


def test_each_poll_of_a_watched_job_prints_one_progress_line_and_no_retry_line():
    callback = stdout_callback()
    for attempt in (1, 2):
        callback.v2_runner_retry(task_result(dict(WATCH, attempts=attempt)))
    assert callback._display.lines == [
        "[login] job 42 RUNNING on slurm-worker-[0-2]: step 120/1000, loss 3.21 (retry %d/17280)" % attempt
        for attempt in (1, 2)]


def test_a_retry_of_another_task_prints_the_retry_line():
    callback = stdout_callback()
    callback.v2_runner_retry(task_result(dict(rc=1, retries=4, attempts=1), name="Wait for the file"))
    assert callback._display.lines[-1] == "FAILED - RETRYING: [login]: Wait for the file (3 retries left)."


@pytest.mark.parametrize("stdout, disabled", [("llmtrain.slurm.default", True), ("default", False)])
def test_job_progress_prints_only_beside_another_stdout_callback(monkeypatch, stdout, disabled):
    monkeypatch.setattr(C, "DEFAULT_STDOUT_CALLBACK", stdout)
    callback = job_progress.CallbackModule()
    callback.set_options()
    assert callback.disabled is disabled


NODE_CHECK = dict(job_id="42", restart=0, time="2026-11-30T10:00:00Z", bad={"n2": "no network interface ib0 on n2"},
                  table=["NODE  VERDICT", "n1    ok", "n2    BAD"])
EXCLUDED = [dict(job_id="42", restarts=1, excluded=["n2"], bad={"n2": "no network interface ib0 on n2"},
                 message="job 42: node check excluded n2 (no network interface ib0 on n2); requeued without it")]
EVENTS = ["[login] node check of job 42 (start 1):", "    NODE  VERDICT", "    n1    ok", "    n2    BAD",
          "[login] job 42: node check excluded n2 (no network interface ib0 on n2); requeued without it"]


def test_retries_print_the_node_check_and_the_exclusion_once_then_progress():
    callback = stdout_callback()
    for attempt in (1, 2):
        callback.v2_runner_retry(task_result(dict(WATCH, attempts=attempt, node_check=NODE_CHECK, excluded=EXCLUDED)))
    assert callback._display.lines == EVENTS + [
        "[login] job 42 RUNNING on slurm-worker-[0-2]: step 120/1000, loss 3.21 (retry %d/17280)" % attempt
        for attempt in (1, 2)]


def test_a_waited_job_moved_off_bad_nodes_says_so_under_its_task():
    callback = stdout_callback()
    callback.v2_runner_on_ok(task_result(dict(changed=True, job_id="42", state="COMPLETED", excluded=EXCLUDED,
                                              node_check=NODE_CHECK), name="Train"))
    assert callback._display.lines[0] == "TASK [Train]"
    assert callback._display.lines[1:6] == EVENTS
    assert callback._display.lines[6].startswith("changed: [login]")


def test_a_failed_job_prints_its_node_check_before_the_failure():
    callback = stdout_callback()
    callback.v2_runner_on_failed(task_result(dict(changed=False, msg="Job 42 (train) needs 2 node(s)",
                                                  node_check=NODE_CHECK, excluded=[]), name="Train"))
    lines = callback._display.lines
    fatal = [i for i, line in enumerate(lines) if line.startswith("fatal: [login]: FAILED!")]
    start = lines.index(EVENTS[0])
    assert len(fatal) == 1 and lines[start:start + 4] == EVENTS[:4] and start + 4 <= fatal[0]
    assert lines[-1] == "Job 42 (train) needs 2 node(s)"


def test_the_end_of_a_watch_prints_the_final_state_and_the_last_progress():
    """A job that ends between two polls still shows where it got (here step 15 of a script
    whose log says no total)."""
    callback = stdout_callback()
    ended = dict(WATCH, jobs=[dict(job_id="42", state="COMPLETED", nodelist="slurm-worker-[0-2]")],
                 progress=dict(step=15, loss=4.7799), changed=False)
    callback.v2_runner_on_ok(task_result(ended))
    assert callback._display.lines[-1] == "[login] job 42 COMPLETED on slurm-worker-[0-2]: step 15/?, loss 4.78"
    # any other task's result, even one naming a job, prints no such line
    other = stdout_callback()
    other.v2_runner_on_ok(task_result(dict(jobs=ended["jobs"], changed=False), name="Look for an active job of this run"))
    assert not any(line.startswith("[login] job 42") for line in other._display.lines)


@pytest.mark.parametrize("result_format", ["json", "yaml"])
def test_what_any_result_holds_prints_without_control_characters(result_format):
    """OSC 52 (the clipboard), CSI (clear the screen), OSC 8 (a link), a bidirectional override and an
    8-bit CSI in a debug message (the status table) and in a failure's result and message."""
    evil = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\\u202eexe.\x9b2J\rok"
    callback = stdout_callback(result_format)
    callback.v2_runner_on_ok(task_result(dict(changed=False, msg="run  state\nr" + evil + "  running"), name="Show"))
    callback.v2_runner_on_failed(task_result(dict(changed=False, log_tail=["x" + evil], msg="Training job failed.\n" + evil)))
    lines = callback._display.lines
    assert len(lines) > 4 and not any(re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", line) for line in lines)
    assert lines[-2:] == ["Training job failed.", "linkexe. ok"]
