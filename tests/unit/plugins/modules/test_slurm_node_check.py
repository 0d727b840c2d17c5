import json
import os
import socket
import subprocess
import sys

from ansible_collections.llmtrain.slurm.plugins.modules import slurm_node_check


def test_the_placed_scripts_run_on_a_node_without_the_collection(tmp_path):
    """The step runs node_check.py from the scratch directory with the cluster's python, where
    ansible_collections is not importable: everything it imports must be placed beside it."""
    workdir = tmp_path / "scratch" / ".llmtrain-node-check-abc"
    slurm_node_check.place_scripts(str(workdir), "abc")
    assert sorted(os.listdir(workdir)) == ["atomic.py", "gpu.py", "nccl.py", "node_check.py", "token"]
    env = dict((k, v) for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANSIBLE_COLLECTIONS_PATH"))
    proc = subprocess.run([sys.executable, "-E", "-s", str(workdir / "node_check.py"), "check", "--dir", str(workdir),
                           "--token", "abc", "--run-dir", str(tmp_path / "run"), "--gpus", "0",
                           "--gpu-policy", "report"],
                          cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout
    records = [name for name in os.listdir(workdir) if name.endswith(".json")]
    assert len(records) == 1, records
    record = json.loads((workdir / records[0]).read_text())
    assert record["token"] == "abc" and record["node"] == socket.gethostname().split(".")[0]
