# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: default
type: stdout
short_description: Ansible's default output, with Slurm job progress and failure messages as written
description:
  - The output of C(ansible.builtin.default), with two changes.
  - A retry of a task that watches a Slurm job prints one line of progress (job id, state, nodes,
    step/total, loss, tokens per second, ETA) in place of the C(FAILED - RETRYING) line, so
    watching a job prints exactly one line per poll, and one more when the watching task ends
    (the job's final state and its last progress). Which tasks watch a job, and what the line
    says, is as for the P(llmtrain.slurm.job_progress#callback) callback, which stays silent while
    this one is the stdout callback.
  - A failed task's C(msg) is printed as text with its line breaks (a list of lines, one per
    line), below the rest of the result; a traceback in a message reads as it was written.
  - Everything it prints is made printable first - escape sequences and other control characters
    (C0, C1, DEL) and bidirectional controls taken out, tabs and line breaks kept - so that nothing a
    job wrote (a metrics record, a log line, an exception's text) reaches the terminal raw (OSC 52
    writes the clipboard, OSC 8 draws a link that lies about where it leads, CSI clears the screen).
    Ansible's own colours are added after it.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - Set as the stdout callback, C(stdout_callback = llmtrain.slurm.default) in C(ansible.cfg)
    (the collection's C(ansible.cfg) does that).
"""

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule

from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import PRINTED_BY_STDOUT_CALLBACK, event_lines, final_line, show_retry
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable


def message_text(msg):
    """msg as text to print, or None when it is not text (then the result prints as usual)."""
    if isinstance(msg, str):
        return msg
    if isinstance(msg, list) and msg and all(isinstance(line, str) for line in msg):
        return "\n".join(msg)
    return None


class PrintableDisplay(object):
    """The Display this callback prints through: each message it displays made printable, its line
    breaks kept (results, failure messages and progress lines hold what jobs wrote); all else is
    the Display's."""

    def __init__(self, display):
        self._wrapped = display

    def display(self, msg, *args, **kwargs):
        return self._wrapped.display(printable(msg, lines=True), *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._wrapped, name)


class CallbackModule(DefaultCallbackModule):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = PRINTED_BY_STDOUT_CALLBACK

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._display = PrintableDisplay(self._display)
        self._seen = set()  # node check tables and exclusions printed already

    def v2_runner_retry(self, result):
        if not show_retry(self._display, result, self._seen):
            super().v2_runner_retry(result)

    def _display_events(self, result):
        """A job that waited (sbatch wait) may have been moved off bad nodes meanwhile: say so,
        under the task's banner."""
        events = event_lines(result.host.get_name(), result.result, self._seen)
        if events and self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        for event in events:
            self._display.display(event)

    def v2_runner_on_ok(self, result):
        self._display_events(result)
        super().v2_runner_on_ok(result)
        # the end of a watch: the job's state and its last progress
        line = final_line(result.host.get_name(), result.result)
        if line:
            self._display.display(line)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._display_events(result)
        if message_text(result.result.get("msg")) is None or (result.task.loop and "results" in result.result):
            super().v2_runner_on_failed(result, ignore_errors)
            return
        self._display_failure(result, "fatal: [%s]: FAILED!" % self.host_label(result), task_path=True)
        if ignore_errors:
            self._display.display("...ignoring", color=C.COLOR_SKIP)

    def v2_runner_item_on_failed(self, result):
        if message_text(result.result.get("msg")) is None:
            super().v2_runner_item_on_failed(result)
            return
        self._display_failure(result, "failed: [%s] (item=%s)" % (self.host_label(result),
                                                                  self._get_item_label(result.result)))

    def _display_failure(self, result, head, task_path=False):
        """The default callback's steps for a failure, with msg printed as text below the rest."""
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        self._handle_warnings_and_exception(result)
        self._clean_results(result.result, result.task.action)
        if task_path and self._display.verbosity < 2 and self.get_option("show_task_path_on_failure"):
            self._print_task_path(result.task)
        # changed=false says nothing about a failure; without it a fail task prints its message only
        rest = {key: value for key, value in result.result.items()
                if key != "msg" and not (key == "changed" and not value)}
        if self._dump_results(rest, serialize=False):
            head += " => %s" % self._dump_results(rest)
        self._display.display("%s\n%s" % (head, message_text(result.result["msg"])), color=C.COLOR_ERROR,
                              stderr=self.get_option("display_failed_stderr"))
