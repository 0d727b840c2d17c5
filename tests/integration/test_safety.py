"""What a user owns is neither handed to others nor destroyed, checked the way a user meets it:
stage playbooks run alone against a workspace that someone else could write, or with a value
that would start a shell command in a job script. None of these needs Slurm: each is refused
before any job."""

import json
import os
import shutil
import uuid

import pytest

from cluster import run_playbook


@pytest.fixture
def workspace():
    path = "/var/tmp/llmtrain-safety-%s" % uuid.uuid4().hex[:8]
    os.makedirs(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def stage(playbook, workspace, **values):
    values = dict(dict(slurm_workspace=workspace, run_name="r"), **values)
    return run_playbook(playbook, "-e", json.dumps(values), check=False)


@pytest.mark.parametrize("mode, owner, message", [
    (0o777, None, "is writable by group and others (mode 0777): anyone who can write there runs code as you"),
    (0o775, None, "is writable by its group (mode 0775)"),
    (0o755, 65534, "belongs to nobody (uid 65534), not to you (uid 0)"),
])
def test_a_run_directory_others_control_is_refused_before_anything_is_written(workspace, mode, owner, message):
    run_dir = os.path.join(workspace, "r")
    os.makedirs(os.path.join(run_dir, "scripts"))
    os.chmod(run_dir, mode)
    if owner is not None:
        os.chown(run_dir, owner, owner)
    result = stage("nccl_env.yml", workspace)
    assert result.rc != 0
    assert "%s %s" % (run_dir, message) in result.output, result.output[-3000:]
    assert os.listdir(run_dir) == ["scripts"]  # no env/, no env file, no secrets


def test_env_is_the_users_alone_and_secrets_are_never_readable_by_others(workspace):
    env_dir = os.path.join(workspace, "r", "env")
    os.makedirs(env_dir, mode=0o755)  # as an earlier release made it
    os.chmod(env_dir, 0o755)
    result = stage("nccl_env.yml", workspace, slurm_secret_env={"WANDB_API_KEY": "s3cr3t-value"})
    assert result.rc == 0, result.output[-3000:]
    assert os.stat(env_dir).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(env_dir, "secrets.env")).st_mode & 0o777 == 0o600
    assert "s3cr3t-value" not in result.output
    # a secret no longer asked for is no longer sourced by the jobs
    result = stage("nccl_env.yml", workspace)
    assert result.rc == 0, result.output[-3000:]
    assert not os.path.exists(os.path.join(env_dir, "secrets.env"))


@pytest.mark.parametrize("playbook, name, value", [
    ("deploy.yml", "slurm_time_limit", "04:00:00\ntouch /tmp/llmtrain-pwned"),
    ("deploy.yml", "slurm_partition", "debug\ntouch /tmp/llmtrain-pwned"),
    ("nccl_env.yml", "slurm_mem_per_cpu", "2G\n"),
    ("nccl_env.yml", "run_name", "../escape"),
])
def test_a_stage_run_alone_refuses_a_value_that_would_reach_a_shell(workspace, playbook, name, value):
    result = stage(playbook, workspace, **{name: value})
    assert result.rc != 0
    assert "%s=%r" % (name, value) in result.output.replace("\\n", "\n") or "%s=%r" % (name, value) in result.output, \
        result.output[-3000:]
    assert os.listdir(workspace) == []  # refused before the run directory was made


def test_a_workspace_others_can_write_without_the_sticky_bit_is_refused_before_anything_is_written(workspace):
    """Another user could rename your run directory there and put their own in its place; your queued or
    requeued job would then run their node check as you. The front door refuses it in its first stage."""
    os.chmod(workspace, 0o777)
    result = run_playbook("pretrain.yml", "--skip-tags", "local_cluster", "-e",
                          json.dumps(dict(slurm_workspace=workspace, run_name="r")), check=False)
    assert result.rc != 0
    assert ("%s is writable by group and others (mode 0777) without the sticky bit: anyone who can write there can "
            "rename your directory in it and put their own in its place" % workspace) in result.output, \
        result.output[-3000:]
    assert "or have the owner of %s run `chmod +t %s`" % (workspace, workspace) in result.output
    assert os.listdir(workspace) == []
