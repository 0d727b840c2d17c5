"""The run_report action: the report written on the controller, in the action's process; the module
only documents it and refuses to run."""

import contextlib
import io
import json

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmtrain.slurm.plugins.action.run_report import ActionModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.run_report import ARGUMENT_SPEC
from ansible_collections.llmtrain.slurm.plugins.modules import run_report


class Shell:
    tmpdir = None


class Connection:
    """The controller's: the action uses none of it (ActionBase looks at its shell's tmpdir)."""

    _shell = Shell()


class Task:
    def __init__(self, args, check_mode=False):
        self.args = args
        self.check_mode = check_mode
        self.async_val = 0
        self.action = "llmtrain.slurm.run_report"


def action(args, check_mode=False):
    return ActionModule(Task(args, check_mode), Connection(), None, None, None, None)


def make_run(tmp_path):
    run_dir = tmp_path / "runs" / "tiny"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"event": "start", "step": 0}) + "\n")
    (run_dir / "facts.json").write_text(json.dumps({"run_name": "tiny"}))
    return run_dir


def test_it_writes_the_report_and_returns_its_path(tmp_path):
    run_dir = make_run(tmp_path)
    result = action(dict(run_dir=str(run_dir), facts=str(run_dir / "facts.json"))).run(task_vars={})
    assert result["changed"] is True and not result.get("failed")
    assert result["report"] == str(run_dir / "report.md") and result["plot"] is None
    assert (run_dir / "report.md").read_text().startswith("# Run tiny\n")
    assert [w for w in result["report_warnings"] if "no loss records" in w]


def test_check_mode_writes_nothing(tmp_path):
    run_dir = make_run(tmp_path)
    result = action(dict(run_dir=str(run_dir)), check_mode=True).run(task_vars={})
    assert result["changed"] is False and "report" not in result
    assert sorted(p.name for p in run_dir.iterdir()) == ["facts.json", "metrics.jsonl"]


def test_an_option_it_does_not_take_fails(tmp_path):
    with pytest.raises(AnsibleActionFail, match="dest"):
        action(dict(run_dir=str(tmp_path), dest="x")).run(task_vars={})


def test_a_run_directory_it_cannot_write_fails_with_a_message(tmp_path):
    (tmp_path / "file").write_text("")
    result = action(dict(run_dir=str(tmp_path / "file" / "run"))).run(task_vars={})
    assert result["failed"] is True and result["msg"].startswith("cannot write the report in %s" % (tmp_path / "file" / "run"))


def test_the_module_documents_the_actions_options_and_refuses_to_run(tmp_path):
    options = yaml.safe_load(run_report.DOCUMENTATION)["options"]
    assert dict((name, (o["type"], o.get("required", False))) for name, o in options.items()) == dict(
        (name, (spec["type"], spec.get("required", False))) for name, spec in ARGUMENT_SPEC.items())
    out = io.StringIO()
    with patch_module_args(dict(run_dir=str(tmp_path))), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit):
            run_report.main()
    result = json.loads(out.getvalue())
    assert result["failed"] is True and "action plugin" in result["msg"]
    assert not (tmp_path / "report.md").exists()
