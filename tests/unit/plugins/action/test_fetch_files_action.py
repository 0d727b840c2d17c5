"""The fetch_files action against a connection that copies local files: one module call (the real
module code, in-process), then transfers only for what the controller lacks or has otherwise."""

import base64
import contextlib
import io
import json
import os
import shutil
import stat

import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmtrain.slurm.plugins.action.fetch_files import ActionModule
from ansible_collections.llmtrain.slurm.plugins.modules import fetch_files

MIB = 1048576


class Shell:
    tmpdir = None


class Connection:
    """fetch_file copies the file, as the local connection does, and records the call."""

    def __init__(self, become=None):
        self._shell = Shell()
        self.become = become
        self.fetched = []

    def fetch_file(self, in_path, out_path):
        self.fetched.append(in_path)
        shutil.copy(in_path, out_path)


class Task:
    def __init__(self, args, check_mode=False):
        self.args = args
        self.check_mode = check_mode
        self.async_val = 0
        self.action = "llmtrain.slurm.fetch_files"


class Loader:
    def __init__(self, base):
        self.base = base

    def path_dwim(self, given):
        return os.path.join(self.base, given)


def run_module(main, args):
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit):
            main()
    return json.loads(out.getvalue())


def action(tmp_path, args, check_mode=False, become=None):
    """The action and the module calls it made ((name, args) each)."""
    plugin = ActionModule(Task(args, check_mode), Connection(become), None, Loader(str(tmp_path)), None)
    plugin.module_calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        plugin.module_calls.append((module_name, dict(module_args)))
        if module_name == "ansible.legacy.slurp":
            with open(module_args["src"], "rb") as handle:
                return dict(content=base64.b64encode(handle.read()).decode(), encoding="base64", source=module_args["src"])
        assert module_name == "llmtrain.slurm.fetch_files"
        return run_module(fetch_files.main, dict(module_args, _ansible_check_mode=check_mode))

    plugin._execute_module = execute_module
    return plugin


def make_run(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "tensorboard").mkdir()
    (run_dir / "metrics.jsonl").write_bytes(b'{"step": 0}\n')
    (run_dir / "logs" / "job-7.out").write_bytes(b"iter 0\n")
    (run_dir / "tensorboard" / "events.out.tfevents.1.n0").write_bytes(b"\x00event")
    return run_dir


def args_for(tmp_path, **more):
    return dict(dict(src=str(tmp_path / "run"), dest=str(tmp_path / "local" / "runs" / "r"),
                     files={"metrics.jsonl": "metrics.jsonl", "logs/job-7.out": "logs/job-7.out",
                            "node_times.json": "node_times.json"},
                     patterns=[dict(path="tensorboard", pattern="events.out.tfevents.*")]), **more)


ALL = ["logs/job-7.out", "metrics.jsonl", "tensorboard/events.out.tfevents.1.n0"]


def test_one_module_call_then_only_the_connection_and_nothing_the_second_time(tmp_path):
    run_dir = make_run(tmp_path)
    local = tmp_path / "local" / "runs" / "r"
    first = action(tmp_path, args_for(tmp_path))
    result = first.run(task_vars={})
    assert result["changed"] is True and result["fetched"] == ALL
    assert [call[0] for call in first.module_calls] == ["llmtrain.slurm.fetch_files"]
    assert sorted(first._connection.fetched) == sorted(os.path.realpath(str(run_dir / n)) for n in
                                                       ["logs/job-7.out", "metrics.jsonl",
                                                        "tensorboard/events.out.tfevents.1.n0"])
    assert (local / "metrics.jsonl").read_bytes() == b'{"step": 0}\n'
    assert (local / "tensorboard" / "events.out.tfevents.1.n0").read_bytes() == b"\x00event"
    assert result["missing"] == ["node_times.json"] and result["refused"] == {}
    assert sorted(os.listdir(str(local))) == ["logs", "metrics.jsonl", "tensorboard"]  # no temporary file left

    second = action(tmp_path, args_for(tmp_path))
    again = second.run(task_vars={})
    assert again["changed"] is False and again["fetched"] == [] and second._connection.fetched == []
    assert sorted(again["files"]) == ALL


def test_only_the_file_that_grew_is_copied(tmp_path):
    run_dir = make_run(tmp_path)
    action(tmp_path, args_for(tmp_path)).run(task_vars={})
    with open(str(run_dir / "metrics.jsonl"), "ab") as handle:
        handle.write(b'{"step": 1}\n')
    grown = action(tmp_path, args_for(tmp_path))
    result = grown.run(task_vars={})
    assert result["changed"] is True and result["fetched"] == ["metrics.jsonl"]
    assert grown._connection.fetched == [os.path.realpath(str(run_dir / "metrics.jsonl"))]
    assert (tmp_path / "local" / "runs" / "r" / "metrics.jsonl").read_bytes() == b'{"step": 0}\n{"step": 1}\n'


def test_check_mode_writes_nothing_and_says_what_it_would(tmp_path):
    make_run(tmp_path)
    plugin = action(tmp_path, args_for(tmp_path), check_mode=True)
    result = plugin.run(task_vars={})
    assert result["changed"] is True and result["fetched"] == ALL
    assert plugin._connection.fetched == [] and not (tmp_path / "local").exists()


@pytest.mark.parametrize("umask, dirs, files", [(0o002, 0o755, 0o644), (0o022, 0o755, 0o644), (0o077, 0o700, 0o600)])
def test_directories_0755_and_files_0644_never_group_writable_and_a_private_umask_kept(tmp_path, umask, dirs, files):
    make_run(tmp_path)
    old = os.umask(umask)
    try:
        action(tmp_path, args_for(tmp_path)).run(task_vars={})
    finally:
        os.umask(old)
    local = tmp_path / "local" / "runs" / "r"
    for directory in (tmp_path / "local", tmp_path / "local" / "runs", local, local / "logs", local / "tensorboard"):
        assert stat.S_IMODE(os.stat(str(directory)).st_mode) == dirs, directory
    for name in ALL:
        assert stat.S_IMODE(os.stat(str(local / name)).st_mode) == files, name


def test_a_refused_file_is_not_copied_and_a_planted_local_link_is_replaced(tmp_path):
    run_dir = make_run(tmp_path)
    (run_dir / "metrics.jsonl").unlink()
    private = tmp_path / "private.txt"
    private.write_text("secret\n")
    os.symlink(str(private), str(run_dir / "metrics.jsonl"))
    local = tmp_path / "local" / "runs" / "r"
    (local / "logs").mkdir(parents=True)
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"iter 0\n")  # same content, but the copy would be written through the link
    os.symlink(str(mine), str(local / "logs" / "job-7.out"))
    plugin = action(tmp_path, args_for(tmp_path))
    result = plugin.run(task_vars={})
    assert list(result["refused"]) == ["%s/metrics.jsonl" % run_dir]
    assert "metrics.jsonl" not in result["fetched"] and not (local / "metrics.jsonl").exists()
    assert "logs/job-7.out" in result["fetched"] and not os.path.islink(str(local / "logs" / "job-7.out"))
    assert mine.read_bytes() == b"iter 0\n"


def test_with_become_the_file_is_read_with_slurp(tmp_path):
    make_run(tmp_path)
    plugin = action(tmp_path, args_for(tmp_path), become=object())
    result = plugin.run(task_vars={})
    assert result["fetched"] == ALL and plugin._connection.fetched == []
    assert [call[0] for call in plugin.module_calls] == ["llmtrain.slurm.fetch_files"] + ["ansible.legacy.slurp"] * 3
    assert (tmp_path / "local" / "runs" / "r" / "logs" / "job-7.out").read_bytes() == b"iter 0\n"


def test_a_relative_dest_is_taken_from_the_playbook_directory(tmp_path):
    make_run(tmp_path)
    result = action(tmp_path, args_for(tmp_path, dest="runs/r")).run(task_vars={})
    assert result["fetched"] == ALL and (tmp_path / "runs" / "r" / "metrics.jsonl").exists()


def test_a_name_from_the_host_that_leaves_dest_fails(tmp_path):
    make_run(tmp_path)
    plugin = action(tmp_path, args_for(tmp_path))

    def lying_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        return dict(files={"../../../escape": dict(path=str(tmp_path / "run" / "metrics.jsonl"), sha1="0" * 40)},
                    refused={}, missing=[])

    plugin._execute_module = lying_module
    with pytest.raises(AnsibleActionFail, match="not paths inside dest"):
        plugin.run(task_vars={})
    assert not (tmp_path / "local").exists() and not (tmp_path / "escape").exists()
