import json
import os
import shutil

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.action import collect_run
from ansible_collections.llmtrain.slurm.plugins.filter import deploy, run
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import pipeline_record
from ansible_collections.llmtrain.slurm.tests.unit.plugins.module_utils.test_log_progress import (
    ADVERSARIAL, CATASTROPHIC, PROGRESS, overrun)


def test_env_file_values_reads_back_what_the_env_template_quotes():
    text = ("# Sourced by the training job on every node\n"
            "export NCCL_SOCKET_IFNAME=eth0\n"
            "export NCCL_IB_HCA='mlx5_0:1,mlx5_1:1'\n"
            "export WEIRD='a b'\"'\"'c $(x)'\n"
            "echo not an export\n")
    assert run.env_file_values(text) == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1",
                                         "WEIRD": "a b'c $(x)"}
    assert run.env_file_values("") == {}


def test_a_venv_is_made_only_where_nothing_of_the_users_is():
    assert deploy.venv_dir_errors("/shared/venvs/t", None, "/shared/venvs/t/bin/python", "/shared") == []
    assert deploy.venv_dir_errors("/shared/venvs/t", [], "/shared/venvs/t/bin/python", "/shared") == []
    assert deploy.venv_dir_errors("/shared/venvs/t", ["bin", "lib", ".llmtrain-venv"], "x", "/shared") == []
    assert deploy.venv_dir_errors("/shared/venvs/t", ["bin", ".llmtrain-venv.json"], "x", "/shared") == []


def test_a_directory_of_the_users_is_refused_naming_it_and_the_fix():
    [message] = deploy.venv_dir_errors("/usr", ["bin", "lib", "share", "include", "local", "sbin", "src"],
                                       "/usr/bin/python3", "/shared/ws/")
    assert message.startswith("deploy_venv_create=true makes the venv that slurm_python=/usr/bin/python3 names")
    assert "/usr holds files that are not a venv made by llmtrain.slurm (bin, include, lib, local, sbin, ...)" in message
    assert "such as /shared/ws/venvs/llmtrain/bin/python, or set deploy_venv_create=false" in message
    [message] = deploy.venv_dir_errors("/home/u/x", False, "/home/u/x/bin/python", "/ws")
    assert "/home/u/x is not a directory" in message


def test_log_metrics_turns_progress_lines_into_a_metrics_file():
    text = "config tiny\niter 0: loss 5.68, time 1ms\niter 10: loss 3.02, time 1ms\nsaving\n"
    assert collect_run.log_metrics(text) == ('{"loss": 5.68, "source": "log", "step": 0}\n'
                                             '{"loss": 3.02, "source": "log", "step": 10}\n')
    assert collect_run.log_metrics("nothing to see\n", [r"E(?P<step>\d+) (?P<loss>\S+)"]) == ""


def test_log_metrics_reads_any_line_in_linear_time_and_warns_of_a_pattern_that_backtracks(monkeypatch):
    warned = []
    monkeypatch.setattr(collect_run.display, "warning", warned.append)
    # 200 lines on which the built-in patterns of 0.1.0 backtracked (six minutes of CPU in all)
    assert collect_run.log_metrics("\n".join(ADVERSARIAL + [PROGRESS]) + "\n") == (
        '{"loss": 2.5, "source": "log", "step": 7, "total_steps": 9}\n')
    assert warned == []
    # a pattern of yours that does: named, with its line, and the others' records kept
    text = "iter 0: loss 5.68\n" + "1" * 28 + "\niter 10: loss 3.02\n"
    assert collect_run.log_metrics(text, [CATASTROPHIC, r"^iter (?P<step>\d+): loss (?P<loss>\S+)"]) == (
        '{"loss": 5.68, "source": "log", "step": 0}\n{"loss": 3.02, "source": "log", "step": 10}\n')
    assert warned == [overrun(CATASTROPHIC, "line 2")]


def test_pipeline_filters_leave_out_facts_and_say_why():
    """slurm_cluster_info returns the facts slurm_cluster: present at the end of a pipeline, not
    before its first stage; the record written at the end must match the rerun's first step."""
    filters = run.FilterModule().filters()
    values = {"slurm_nodes": 3, "pretrain_steps": 200}
    before = filters["pipeline_fingerprint"](values, {}, None, ["slurm_cluster"])
    after = filters["pipeline_fingerprint"](dict(values, slurm_cluster={"nodes": []}), {}, None, ["slurm_cluster"])
    assert before == after == pipeline_record.fingerprint(values, {}, None)
    read = {"files": {"train.done.json": "{}"}, "missing": ["pipeline.json"], "errors": {}}
    record = filters["pipeline_record"](read, before)
    assert json.loads(record)["fingerprint"] == before
    assert filters["pipeline_verdict"](read, before, []) == {
        "finished": False, "why": "no pipeline.json: the pipeline has not finished with these inputs"}
    done = dict(read, files=dict(read["files"], **{"pipeline.json": record}), missing=[])
    assert filters["pipeline_verdict"](done, before, []) == {"finished": True, "why": "finished with these inputs"}


def test_gpu_options_ask_for_the_gpus_typed_or_not_by_gres_or_per_node():
    from ansible.errors import AnsibleFilterError
    import pytest
    gpu_options = run.FilterModule().filters()["gpu_options"]
    assert gpu_options(0) == {} and gpu_options(None, "h100") == {}
    assert gpu_options(8) == {"gres": "gpu:8"}
    assert gpu_options("8", "h100") == {"gres": "gpu:h100:8"}
    assert gpu_options(4, None, "gpus-per-node") == {"gpus-per-node": "4"}
    assert gpu_options(4, "a100", "gpus-per-node") == {"gpus-per-node": "a100:4"}
    with pytest.raises(AnsibleFilterError, match="slurm_gpu_request"):
        gpu_options(4, None, "gpus")


def test_from_run_json_reads_a_runs_file_bounded_and_gives_the_default_for_what_it_cannot_read():
    class TemplateList(list):
        """What Ansible hands a filter for a template's []: a subclass of list."""
    assert run.from_run_json('[{"prompt": "a", "completion": "b"}]', TemplateList(), "samples.json") == [
        dict(prompt="a", completion="b")]
    assert run.from_run_json('{"a": 1}', {}, "facts.json") == {"a": 1}
    for text in ("[" * 50000, '{"n": %d}' % 10 ** 400, '{"x": NaN}', "{", '["a list"]'):
        assert run.from_run_json(text, {}, "facts.json") == {}
    assert run.from_run_json("null", None, "network_check/x.json") is None


def test_event_metrics_turns_event_files_into_a_metrics_file(tmp_path):
    """The Hugging Face Trainer 5.25.0's own event file (tests/unit/fixtures/trainers)."""
    fixture = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers", "hf_trainer_5.25.0.tfevents")
    path = str(tmp_path / "events.out.tfevents.1796466046.vm.1.0")
    shutil.copy(fixture, path)
    found = collect_run.event_metrics([path], None, "10")
    records = [json.loads(line) for line in found["text"].splitlines()]
    assert [(r["step"], r["total_steps"], r["source"]) for r in records] == [(5, 10, "events"), (10, 10, "events")]
    assert found["records"] == 2 and found["tag"] == "train/loss" and found["files"] == [path]
    assert all("val_loss" in r and "lr" in r for r in records)
    empty = collect_run.event_metrics([path], "no/such/tag")
    assert empty["records"] == 0 and empty["text"] == "" and "train/loss" in empty["tags"]


def test_checkpoints_are_the_reference_trainers_by_step_and_nothing_moved_aside():
    found = [dict(path="/w/r/checkpoints/" + name, mtime=t) for t, name in enumerate(
        ["step_1000000.pt", "step_000050.pt", "step_000100", "step_000100.pt.bad", "step_000200.bad", "notes.txt"])]
    assert run.checkpoints(found) == ["step_000050.pt", "step_000100", "step_1000000.pt"]
    assert run.checkpoints([]) == []
    assert [run.checkpoint_step(n) for n in ("step_000100.pt", "/w/step_000100/", "checkpoint-7", "last.ckpt")] == \
        [100, 100, 7, None]


def test_your_scripts_checkpoints_are_every_entry_the_numbered_last_by_step():
    found = [dict(path="/w/r/checkpoints/checkpoint-500", mtime=3), dict(path="/w/r/checkpoints/checkpoint-1000", mtime=2),
             dict(path="/w/r/checkpoints/ckpt.pt", mtime=9), dict(path="/w/r/checkpoints/last.ckpt", mtime=1)]
    # a Hugging Face Trainer's checkpoint-1000 is newer than checkpoint-500 (not by name: "1" < "5")
    assert run.checkpoints(found, own_script=True) == ["last.ckpt", "ckpt.pt", "checkpoint-500", "checkpoint-1000"]


def test_a_name_with_a_control_character_is_never_a_checkpoint_and_is_said_escaped():
    found = [dict(path="/w/r/checkpoints/checkpoint-500", mtime=3), dict(path="/w/r/checkpoints/best\ntouch INJECTED\n#", mtime=9),
             dict(path="/w/r/checkpoints/step_000900.pt\x1b[2J", mtime=8), dict(path="/w/r/checkpoints/\u2028last", mtime=7)]
    assert run.checkpoints(found, own_script=True) == ["checkpoint-500"]
    assert run.checkpoints(found) == []
    unusable = run.checkpoints(found, unusable=True)
    assert len(unusable) == 3 and all(name.isprintable() for name in unusable)
    assert any("touch INJECTED" in name for name in unusable)


def test_checkpoints_refuses_what_is_no_find_result():
    with pytest.raises(AnsibleFilterError, match="ansible.builtin.find"):
        run.checkpoints({"files": []})
