# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A faked run_command for the module tests: each test lists the exact argument vectors the
module must run, and Slurm's recorded answers to them.

Imported by its full name (ansible_collections.llmtrain.slurm.tests.unit...), which works
both under plain pytest (tests/conftest.py) and under ansible-test units."""

import json
import os
import re

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import Slurm as Client
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP, RECORD_SEP, SQUEUE_FORMAT

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")
SQUEUE = ["/usr/bin/squeue", "--noheader", "--states=all", "--user=alice", "--format=" + SQUEUE_FORMAT]


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


class Runner:
    """A faked gpu.run (the runner module_utils take as an argument): answers argv prefixes
    with (rc, stdout, stderr), in the order given, and records every call."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv, timeout=60):
        self.calls.append(list(argv))
        for prefix, answer in self.answers:
            if argv[:len(prefix)] == prefix:
                return answer
        raise AssertionError("unexpected command %r" % (argv,))


def scontrol_job(job_id):
    return ["/usr/bin/scontrol", "show", "job", "-o", str(job_id)]


def squeue_rows(*rows):
    return "".join(FIELD_SEP.join(r) + RECORD_SEP + "\n" for r in rows)


def job_text(name, job_id):
    """A recorded scontrol record under another job id."""
    return re.sub(r"^JobId=\d+ ", "JobId=%s " % job_id, fixture("scontrol_job_%s.txt" % name))


class Slurm:
    """The expected conversation: [(argv, (rc, stdout, stderr)), ...], checked in order."""

    def __init__(self, monkeypatch, conversation, bins=("sbatch", "scontrol", "squeue", "scancel")):
        self.conversation = list(conversation)
        self.kwargs = []
        test = self

        def run_command(module, argv, **kwargs):
            assert test.conversation, "unexpected command %r" % (argv,)
            expected, answer = test.conversation.pop(0)
            assert argv == expected
            test.kwargs.append(kwargs)
            return answer

        monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                            lambda module, name, required=False, opt_dirs=None: "/usr/bin/" + name if name in bins else None)
        monkeypatch.setattr(Client, "user", lambda self: "alice")

    def done(self):
        assert self.conversation == [], "commands not run: %r" % self.conversation


def run(module_main, args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module_main()
    return json.loads(capsys.readouterr().out)
