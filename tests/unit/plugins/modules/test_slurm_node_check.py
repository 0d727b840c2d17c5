import json
import os
import socket
import stat
import subprocess
import sys

from ansible_collections.llmtrain.slurm.plugins.modules import slurm_node_check


def test_the_placed_scripts_run_on_a_node_without_the_collection(tmp_path):
    """The step runs the llmtrain_node package from the scratch directory with the cluster's python,
    where neither ansible_collections nor any installed package is importable (-S: no
    site-packages): everything it imports must be placed there."""
    workdir = tmp_path / "scratch" / ".llmtrain-node-check-abc"
    host = socket.gethostname().split(".")[0]
    # the module's one listing of the nodes: each node reads what Slurm registers from it
    listing = "NodeName=other-node Arch=x86_64 Gres=gpu:8 State=IDLE\nNodeName=%s Arch=x86_64 Gres=gpu:3 State=IDLE\n" % host
    old = os.umask(0o002)  # a login shell's, with user-private groups
    try:
        assert slurm_node_check.place_scripts(str(workdir), "abc", listing) == []
    finally:
        os.umask(old)
    assert sorted(os.listdir(workdir)) == ["llmtrain_node", "slurm_nodes.txt", "token"]
    assert sorted(os.listdir(workdir / "llmtrain_node")) == [
        "__init__.py", "atomic.py", "bad_nodes.py", "event_files.py", "exit_codes.py", "gpu.py", "gpu_health.py",
        "hang.py", "job.py", "job_end.py", "job_log.py", "link_speed.py", "nccl.py", "network_check.py",
        "node_check.py", "notify.py", "record_patterns.py", "run_files.py", "serve_gate.py", "serve_job.py", "slurm_job.py", "untrusted.py"]
    # the step runs them: the user's alone to change
    assert stat.S_IMODE(os.stat(workdir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(workdir / "llmtrain_node").st_mode) == 0o700
    files = [workdir / "token", workdir / "slurm_nodes.txt"] + list((workdir / "llmtrain_node").iterdir())
    assert {stat.S_IMODE(os.stat(path).st_mode) for path in files} == {0o644}
    env = dict((k, v) for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANSIBLE_COLLECTIONS_PATH"))
    # as the step runs it: python -m llmtrain_node.node_check, the package first on the path (here: -m's
    # working directory, as -E ignores PYTHONPATH)
    proc = subprocess.run([sys.executable, "-E", "-s", "-S", "-m", "llmtrain_node.node_check", "check", "--dir", str(workdir),
                           "--token", "abc", "--run-dir", str(tmp_path / "run"), "--gpus", "0",
                           "--gpu-policy", "report", "--slurm-nodes", str(workdir / "slurm_nodes.txt")],
                          cwd=str(workdir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout
    records = [name for name in os.listdir(workdir) if name.endswith(".json")]
    assert len(records) == 1, records
    record = json.loads((workdir / records[0]).read_text())
    assert record["token"] == "abc" and record["node"] == host
    assert record["registered"] == 3


def test_a_scratch_directory_others_can_write_is_refused_and_nothing_is_placed(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chmod(str(scratch), 0o777)
    problems = slurm_node_check.place_scripts(str(scratch / ".llmtrain-node-check-abc"), "abc")
    assert problems and problems[0].startswith("%s is writable by group and others (mode 0777) without the sticky bit"
                                               % scratch)
    assert os.listdir(str(scratch)) == []
