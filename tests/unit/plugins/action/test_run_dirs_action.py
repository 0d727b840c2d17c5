"""The run_dirs action (the run directory checked, made and filled, once per ansible-playbook run) with
the real secure_dir module in-process: what a user finds in the run directory, what bash reads of the
node check's settings, and which task of a playbook run calls the module."""

import os
import subprocess

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmtrain.slurm.plugins.action import run_dirs as run_dirs_action
from ansible_collections.llmtrain.slurm.plugins.action.run_dirs import FACT, ActionModule
from ansible_collections.llmtrain.slurm.plugins.modules import secure_dir
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_collect_run_action import Templar
from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_fetch_files_action import Connection, Loader, Task, run_module


def run_dirs(tmp_path, task_vars, args=None, check_mode=False):
    """The action's result and the module calls it made."""
    task = Task(args or {}, check_mode)
    task.action = "llmtrain.slurm.run_dirs"
    plugin = ActionModule(task, Connection(), None, Loader(str(tmp_path)), Templar(), None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None, **kwargs):
        calls.append(module_name)
        assert module_name == "llmtrain.slurm.secure_dir"
        return run_module(secure_dir.main, dict(module_args, _ansible_check_mode=check_mode))

    plugin._execute_module = execute_module
    return plugin.run(task_vars=task_vars), calls


def variables(tmp_path, **more):
    values = {"run_name": "tiny", "slurm_workspace": str(tmp_path / "ws") + "/", "slurm_python": "/opt/my venv/bin/python",
              "slurm_node_check_timeout": "120", "run_bad_node_policy": "requeue", "run_requeue_max": 2,
              "run_gpu_policy": "warn", "run_gpu_diag": 1, "slurm_container_runtime": "none", "run_source_dir": ""}
    values.update(more)
    return values


def conf_values(run_dir):
    """What node_check.sh gets when it sources the settings."""
    script = ('source "$1"; printf "%s\\n" "$python" "$timeout_s" "$policy" "$requeue_max" "$gpu_policy" "$gpu_diag" '
              '"${#container_step[@]}" "${container_batch[*]}"')
    out = subprocess.run(["bash", "-c", script, "-", os.path.join(run_dir, "scripts", "node_check.conf")],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    return out.split("\n")[:-1]


def test_the_first_task_makes_and_fills_the_run_directory_and_the_next_ones_call_nothing(tmp_path):
    (tmp_path / "ws").mkdir(mode=0o755)
    task_vars = variables(tmp_path)
    result, calls = run_dirs(tmp_path, task_vars)
    run_dir = str(tmp_path / "ws" / "tiny")
    assert calls == ["llmtrain.slurm.secure_dir"] and result["changed"] and not result.get("failed"), result
    assert result["path"] == run_dir
    for sub in ("env", "scripts/trainer", "scripts/llmtrain_node", "data", "checkpoints", "logs"):
        assert os.path.isdir(os.path.join(run_dir, sub)), sub
    assert not os.path.exists(os.path.join(run_dir, "src"))
    assert oct(os.stat(os.path.join(run_dir, "env")).st_mode & 0o777) == "0o700"
    for name in ("node_check.sh", "network_check.sh", "bad_nodes.sh", "exit_codes.sh", "llmtrain_node/node_check.py"):
        assert os.path.isfile(os.path.join(run_dir, "scripts", name)), name
    # the reference trainer, as the collection has it: what the jobs run (python -m trainer.generate, ...)
    trainer = os.path.join(os.path.dirname(run_dirs_action.__file__), "..", "..", "roles", "deploy", "files", "trainer")
    shipped = sorted(name for name in os.listdir(trainer) if name.endswith(".py"))
    assert "generate.py" in shipped and "batch.py" in shipped
    assert sorted(os.listdir(os.path.join(run_dir, "scripts", "trainer"))) == shipped
    with open(os.path.join(trainer, "export.py")) as ours, open(os.path.join(run_dir, "scripts", "trainer", "export.py")) as theirs:
        assert ours.read() == theirs.read()
    # room left where the run is, for the pretrain stage's check of its inputs
    assert isinstance(result["ansible_facts"]["_run_dirs_free_bytes"], int)
    assert conf_values(run_dir) == ["/opt/my venv/bin/python", "120", "requeue", "2", "warn", "1", "0", ""]
    # later stages of the same ansible-playbook run: the fact says it is done
    task_vars.update(result["ansible_facts"])
    again, calls = run_dirs(tmp_path, task_vars)
    assert calls == [] and again["changed"] is False and again["path"] == run_dir
    # a setting the jobs read changed: made again, only the settings rewritten
    task_vars["slurm_node_check_timeout"] = 30
    changed, calls = run_dirs(tmp_path, task_vars)
    assert calls == ["llmtrain.slurm.secure_dir"] and changed["written"] == ["scripts/node_check.conf"]
    assert conf_values(run_dir)[1] == "30" and changed["ansible_facts"][FACT] != result["ansible_facts"][FACT]


def test_a_container_and_your_source_directory_reach_the_settings_quoted(tmp_path):
    (tmp_path / "ws").mkdir(mode=0o755)
    task_vars = variables(tmp_path, run_source_dir=str(tmp_path / "code"), slurm_container_runtime="charliecloud",
                          slurm_container_image="/img/x;touch pwned", slurm_container_mounts=[], slurm_container_args=[])
    result, _calls = run_dirs(tmp_path, task_vars)
    run_dir = tmp_path / "ws" / "tiny"
    assert not result.get("failed") and (run_dir / "src").is_dir()
    batch = conf_values(str(run_dir))[-1]
    assert batch.startswith("ch-run -b %s " % (tmp_path / "ws")) and batch.endswith("/img/x;touch pwned --")
    assert not (run_dir / "scripts" / "pwned").exists() and not os.path.exists("pwned")


def test_a_run_directory_others_can_write_is_refused_and_nothing_is_recorded(tmp_path):
    (tmp_path / "ws" / "tiny").mkdir(parents=True)
    os.chmod(str(tmp_path / "ws" / "tiny"), 0o777)
    result, _calls = run_dirs(tmp_path, variables(tmp_path))
    assert result.get("failed") and "ansible_facts" not in result
    assert str(tmp_path / "ws" / "tiny") in result["msg"] and not (tmp_path / "ws" / "tiny" / "scripts").exists()


def test_options_and_a_missing_variable_are_refused_with_their_names(tmp_path):
    with pytest.raises(AnsibleActionFail, match="takes no options .*path"):
        run_dirs(tmp_path, variables(tmp_path), args={"path": "/x"})
    values = variables(tmp_path)
    del values["run_gpu_policy"]
    with pytest.raises(AnsibleActionFail, match="run_gpu_policy"):
        run_dirs(tmp_path, values)
