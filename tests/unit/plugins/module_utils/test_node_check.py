"""node_check: the per-node check every job of a run starts with (check) and its verdict (gather)."""

import datetime
import json
import os
import signal
import subprocess
import sys

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu, gpu_health, node_check
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Runner
from ansible_collections.llmtrain.slurm.tests.unit.test_node_package import ship_node_package

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
INTERFACES_FIX = ("set nccl_env_socket_ifname (or nccl_env_gloo_socket_ifname), per node under "
                  "slurm_workers where nodes differ")
NOW = datetime.datetime(2026, 11, 30, 10, 0, 0, tzinfo=datetime.timezone.utc)


def fixture(*path):
    with open(os.path.join(FIXTURES, *path)) as handle:
        return handle.read()


# ---------------------------------------------------------------- pure functions

@pytest.mark.parametrize("gres, count", [
    ("gpu:2", 2),
    ("gpu:a100:4(S:0-1),shard:8", 4),
    ("gpu:a100:2,gpu:v100:1", 3),
    ("gpu:a100:2(S:0),gpu:v100:1(S:1)", 3),
    ("gpu", 1),
    ("shard:8", 0),
    ("(null)", 0),
    ("", 0),
    (None, None),
])
def test_registered_gpus(gres, count):
    assert node_check.registered_gpus(gres) == count


def test_slurm_registered_reads_the_node_s_gres():
    node = fixture("slurm", "scontrol_show_node_gres.txt").splitlines()[0]
    runner = Runner((["scontrol"], (0, node + "\n", "")))
    assert node_check.slurm_registered("gpu-worker-0", runner) == 2
    assert runner.calls == [["scontrol", "show", "node", "-o", "gpu-worker-0"]]


def test_slurm_registered_of_a_node_without_gres_and_when_scontrol_fails():
    no_gres = fixture("slurm", "scontrol_show_node.txt").splitlines()[0]  # Gres=(null)
    assert node_check.slurm_registered("slurm-worker-0", Runner((["scontrol"], (0, no_gres, "")))) == 0
    assert node_check.slurm_registered("n1", Runner((["scontrol"], (1, "", "Node n1 not found")))) is None
    assert node_check.slurm_registered("n1", Runner((["scontrol"], (127, "", "No such file")))) is None
    assert node_check.slurm_registered("n1", Runner((["scontrol"], (0, "NodeName=n1 State=IDLE", "")))) is None


def job_nodes_answer():
    """One `scontrol show node -o` of a job's six nodes (Slurm 22.05, recorded), as the batch node writes it."""
    return fixture("slurm", "scontrol_show_node.txt") + fixture("slurm", "scontrol_show_node_gres.txt")


@pytest.mark.parametrize("node, count", [
    ("slurm-worker-0", 0), ("slurm-worker-2", 0), ("gpu-worker-0", 2), ("gpu-worker-1", 2), ("gpu-worker-2", 2),
])
def test_one_query_of_the_job_s_nodes_read_per_node(tmp_path, node, count):
    nodes_file = tmp_path / "slurm_nodes.txt"
    nodes_file.write_text(job_nodes_answer())
    line = node_check.show_node_line(job_nodes_answer().splitlines(), node)
    assert line.startswith("NodeName=%s Arch=x86_64 " % node) and node_check.registered_of(line) == count
    runner = Runner()  # the node does not ask the controller itself
    assert node_check.slurm_registered(node, runner, str(nodes_file)) == count
    assert runner.calls == []


def test_a_node_missing_from_the_query_or_a_query_that_failed_is_not_told(tmp_path):
    nodes_file = tmp_path / "slurm_nodes.txt"
    nodes_file.write_text(job_nodes_answer())
    runner = Runner()
    assert node_check.show_node_line(job_nodes_answer().splitlines(), "gpu-worker") is None  # a name's prefix only
    assert node_check.slurm_registered("gpu-worker-9", runner, str(nodes_file)) is None
    assert node_check.slurm_registered("gpu-worker-0", runner, str(tmp_path / "absent.txt")) is None
    assert runner.calls == []
    assert node_check.registered_of(None) is None and node_check.registered_of("NodeName=n1 State=IDLE") is None


def test_env_file_values_reads_exports_as_the_shell_would():
    text = ("# written by nccl_env\n"
            "export NCCL_SOCKET_IFNAME=eth0\n"
            "export NCCL_IB_HCA='mlx5_0:1,mlx5_1:1'\n"
            "export WEIRD='a b'\"c\"  # a comment\n"
            "NOT_EXPORTED=1\n"
            "export A B\n"
            "echo export X=1\n")
    assert node_check.env_file_values(text) == {
        "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "WEIRD": "a bc"}
    assert node_check.env_file_values("") == {} and node_check.env_file_values(None) == {}


def test_env_file_prefers_the_node_s_own(tmp_path):
    assert node_check.env_file(str(tmp_path), "n1") == (None, "")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "cluster.env").write_text("export NCCL_SOCKET_IFNAME=eth\n")
    assert node_check.env_file(str(tmp_path), "n1") == (
        str(tmp_path / "env" / "cluster.env"), "export NCCL_SOCKET_IFNAME=eth\n")
    (tmp_path / "env" / "n1.env").write_text("export NCCL_SOCKET_IFNAME=ib\n")
    assert node_check.env_file(str(tmp_path), "n1") == (
        str(tmp_path / "env" / "n1.env"), "export NCCL_SOCKET_IFNAME=ib\n")
    assert node_check.env_file(str(tmp_path), "n2")[0] == str(tmp_path / "env" / "cluster.env")


@pytest.mark.parametrize("value, count", [
    (None, 0), ("", 0), (" ", 0), ("NoDevFiles", 0), ("0", 1), ("0,1", 2), ("0,1,", 2),
    ("GPU-aaaa,GPU-bbbb,GPU-cccc", 3),
])
def test_visible_gpus(value, count):
    environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert node_check.visible_gpus(environ) == count


def test_missing_interfaces_prefix_or_exact():
    present = ["eth0", "ib0", "lo"]
    prefix, exact = dict(name="eth", exact=False), dict(name="eth", exact=True)
    assert node_check.missing_interfaces([prefix], present) == []      # NCCL: eth matches eth0
    assert node_check.missing_interfaces([exact], present) == ["eth"]  # =eth, or Gloo: the name itself
    assert node_check.missing_interfaces([dict(name="eth0", exact=True)], present) == []
    assert node_check.missing_interfaces([dict(name="ib1", exact=False), dict(name="ib1", exact=True),
                                          dict(name="lo", exact=True)], present) == ["ib1"]  # named once
    assert node_check.missing_interfaces([prefix], []) == ["eth"]
    assert node_check.missing_interfaces([], []) == []


# ---------------------------------------------------------------- problems: the verdict on one record

CUDA_TORCH = dict(importable=True, version="2.13.0+cu128", cuda_available=True, device_count=2, cuda_version="12.8")
CPU_TORCH = dict(importable=True, version="2.13.0+cpu", cuda_available=False, device_count=0, cuda_version=None)
NO_TORCH = dict(importable=False, error="ModuleNotFoundError: No module named 'torch'")


def record(**fields):
    """A healthy node with 2 GPUs, asked for 2 (as check() writes it)."""
    base = dict(node="n1", token="t0k", dir="/w/run/.node_check", python="/v/bin/python", python_version="3.11.7",
                torch=CUDA_TORCH, require_torch=True, gpus_requested=2, gpus_visible=2, nvidia_smi_count=2,
                torch_count=2, detected=2, gpu_reason=None, gpu_names=["NVIDIA A100"] * 2, registered=2,
                env_file="/w/run/env/cluster.env", interfaces=["eth0", "lo"], missing_interfaces=[],
                workspace_shared=True, workspace_writable=True, gpu_health=dict(faults=[], notes=[]),
                cpus=dict(count=8, list="0-7", asked=8, procs=2))
    base.update(fields)
    base.setdefault("problems", node_check.problems(base))
    base.setdefault("ok", not base["problems"])
    return base


def test_a_healthy_node_has_no_problem():
    assert node_check.problems(record()) == []
    cpu_node = record(torch=CPU_TORCH, gpus_requested=0, gpus_visible=0, nvidia_smi_count=0, torch_count=0,
                      detected=0, registered=0, gpu_reason="nvidia-smi not found; torch sees no CUDA device")
    assert node_check.problems(cpu_node) == []
    assert node_check.problems(record(registered=None)) == []  # scontrol could not tell


def test_torch_missing_where_torch_is_required():
    found = node_check.problems(record(torch=NO_TORCH), python_name="deploy_python")
    assert found == ["deploy_python=/v/bin/python cannot import torch on n1 (ModuleNotFoundError: No module named "
                     "'torch'): install torch there, or point deploy_python at an interpreter that has it"]
    # a job that brings its own torch (the venv is made later) does not need it
    assert node_check.problems(record(torch=NO_TORCH, require_torch=False)) == []


def test_a_cpu_build_of_torch_where_gpus_are_asked():
    found = node_check.problems(record(torch=CPU_TORCH, torch_count=0))
    assert found[0] == ("torch 2.13.0+cpu in /v/bin/python has no usable CUDA on n1 (CUDA build: none): install a "
                        "CUDA build of torch that matches the node's driver, or set slurm_gpus_per_node=0")
    assert found[1].startswith("slurm_gpus_per_node=2, the job step on n1 sees 2, nvidia-smi lists 2, torch sees 0,")
    assert len(found) == 2


@pytest.mark.parametrize("fields, counts", [
    (dict(gpus_visible=1), "sees 1, nvidia-smi lists 2, torch sees 2, Slurm registers 2"),
    (dict(nvidia_smi_count=1, detected=1, registered=1),
     "sees 2, nvidia-smi lists 1, torch sees 2, Slurm registers 1"),
    (dict(torch_count=1), "sees 2, nvidia-smi lists 2, torch sees 1, Slurm registers 2"),
    (dict(gpus_visible=0, nvidia_smi_count=0, torch_count=0, detected=0, registered=None,
          gpu_reason="nvidia-smi not found", torch=dict(CUDA_TORCH, device_count=0)),
     "sees 0, nvidia-smi lists 0, torch sees 0, Slurm registers ? (nvidia-smi not found)"),
])
def test_gpu_counts_that_disagree_when_gpus_are_asked(fields, counts):
    found = node_check.problems(record(**fields))
    assert found == ["slurm_gpus_per_node=2, the job step on n1 %s: fix the node's driver or gres.conf, or lower "
                     "slurm_gpus_per_node" % counts]


def test_gpu_counts_are_not_compared_when_no_gpu_is_asked():
    assert node_check.problems(record(gpus_requested=0, gpus_visible=0)) == []


def test_gpu_policy_strict_or_report_when_slurm_registers_gpus_the_node_lacks():
    lost = record(gpus_requested=0, gpus_visible=0, nvidia_smi_count=0, torch_count=0, detected=0, registered=2,
                  torch=CPU_TORCH, gpu_reason="nvidia-smi not found (no NVIDIA driver utilities on PATH)")
    assert node_check.problems(lost, gpu_policy="strict") == [
        "Slurm registers gpu:2, the node detects 0 (nvidia-smi not found (no NVIDIA driver utilities on PATH)): "
        "make gres.conf and slurm.conf Gres= match n1, or set run_gpu_policy=report"]
    assert node_check.problems(lost, gpu_policy="report") == []
    assert node_check.problems(lost) == node_check.problems(lost, gpu_policy="strict")  # strict by default


def test_a_gpu_fault_makes_the_node_bad_under_strict_and_shows_in_the_table_under_report():
    health = dict(faults=["GPU 0 (00000000:07:00.0): a row remapping is pending: reset the GPU"],
                  notes=["no dmesg on the node: Xid errors not checked"])
    assert node_check.problems(record(gpu_health=health)) == [
        "GPU fault on n1: GPU 0 (00000000:07:00.0): a row remapping is pending: reset the GPU (or set "
        "run_gpu_policy=report)"]
    reported = record(gpu_health=health, problems=node_check.problems(record(gpu_health=health), gpu_policy="report"))
    assert reported["ok"] is True
    assert node_check.table([reported])[1].split()[-2:] == ["FAULTY", "ok"]
    assert node_check.table([record(gpu_health=None)])[1].split()[-2:] == ["-", "ok"]


def test_gather_prints_the_gpu_notes_of_a_few_nodes_and_counts_the_others(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(node_check, "NOTED_NODES", 2)
    names = ["n1", "n2", "n3", "n4"]
    for name in names:
        write_record(tmp_path, record(node=name, gpu_health=dict(faults=[], notes=["3 correctable ECC error(s)"])))
    rc, _summary = node_check.gather(gather_args(tmp_path, *names), now=NOW)
    out = capsys.readouterr().out.splitlines()
    assert rc == 0 and out[-3:] == [
        "llmtrain: node check: n1 GPU notes: 3 correctable ECC error(s)",
        "llmtrain: node check: n2 GPU notes: 3 correctable ECC error(s)",
        "llmtrain: node check: and 2 more node(s) with GPU notes, in %s" % (tmp_path / "node_check.json")]


def test_missing_interface_names_what_the_node_has():
    assert node_check.problems(record(missing_interfaces=["ib0"])) == [
        "no network interface ib0 on n1 (it has eth0, lo): " + INTERFACES_FIX]
    assert node_check.problems(record(missing_interfaces=["ib0", "ib1"], interfaces=[])) == [
        "no network interface ib0 on n1 (it has none): " + INTERFACES_FIX,
        "no network interface ib1 on n1 (it has none): " + INTERFACES_FIX]


def test_workspace_not_shared_or_not_writable():
    assert node_check.problems(record(workspace_shared=False)) == [
        "slurm_workspace is not shared: n1 cannot see a file the batch node wrote in /w/run/.node_check; use a "
        "directory on the shared filesystem"]
    assert node_check.problems(record(workspace_writable=False)) == [
        "slurm_workspace is not writable from n1 (/w/run/.node_check): fix its permissions or pick another directory"]


def test_every_finding_at_once():
    found = node_check.problems(record(torch=NO_TORCH, gpus_visible=1, missing_interfaces=["ib0"],
                                       workspace_shared=False, workspace_writable=False))
    assert [f.split(" ")[0] for f in found] == ["slurm_python=/v/bin/python", "slurm_gpus_per_node=2,", "no", "slurm_workspace",
                                                "slurm_workspace"]


# ---------------------------------------------------------------- check: one node's record

def check_args(tmp_path, *extra, token="t0k"):
    args = ["check", "--dir", str(tmp_path / "check"), "--token", token, "--run-dir", str(tmp_path / "run")]
    return node_check.parser().parse_args(args + list(extra))


@pytest.fixture(name="fake_node")
def fake_node_fixture(tmp_path, monkeypatch):
    """A node with a check directory the batch node wrote its token in, a run directory with an
    env/ directory, and PATH holding only what a test puts in tmp_path/bin."""
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "token").write_text("t0k\n")
    (tmp_path / "run" / "env").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(gpu, "torch_here", lambda: dict(CPU_TORCH))
    return tmp_path


def fake_nvidia_smi(tmp_path):
    path = tmp_path / "bin" / "nvidia-smi"
    path.write_text("#!/bin/sh\nexit 1\n")  # found on PATH; the runner answers for it
    path.chmod(0o755)
    return str(path)


def test_check_of_a_healthy_gpu_node(fake_node, monkeypatch, capsys):
    smi = fake_nvidia_smi(fake_node)
    monkeypatch.setattr(gpu, "torch_here", lambda: dict(CUDA_TORCH, device_count=1, devices=["NVIDIA GeForce RTX 3090"]))
    (fake_node / "run" / "env" / "n1.env").write_text("export NCCL_SOCKET_IFNAME=lo\n")
    (fake_node / "run" / "env" / "cluster.env").write_text("export NCCL_SOCKET_IFNAME=nosuch\n")
    runner = Runner(([smi, "--query-gpu=" + ",".join(gpu.QUERY_FIELDS)], (0, fixture("nvidia_smi", "one_gpu.csv"), "")),
                    ([smi, "-q"], (0, fixture("nvidia_smi", "h200_q_health.txt"), "")),
                    (["scontrol", "show", "node", "-o", "n1"], (0, "NodeName=n1 Gres=gpu:1(S:0) State=IDLE\n", "")))
    found = node_check.check(check_args(fake_node, "--gpus", "1", "--require-torch"),
                             environ={"SLURMD_NODENAME": "n1", "CUDA_VISIBLE_DEVICES": "0"}, runner=runner)
    assert found["problems"] == [] and found["ok"] is True
    assert (found["node"], found["token"], found["dir"]) == ("n1", "t0k", str(fake_node / "check"))
    assert (found["gpus_requested"], found["gpus_visible"], found["nvidia_smi_count"], found["torch_count"],
            found["registered"], found["detected"]) == (1, 1, 1, 1, 1, 1)
    assert found["gpu_names"] == ["NVIDIA GeForce RTX 3090"] and found["gpu_reason"] is None
    # its GPU's health, from nvidia-smi -q; no dmesg on this node's PATH
    assert found["gpu_health"] == dict(faults=[], notes=["no dmesg on the node: Xid errors not checked"])
    assert [smi] + gpu_health.QUERY in runner.calls
    assert found["env_file"] == str(fake_node / "run" / "env" / "n1.env")  # the node's own, not cluster.env
    assert "lo" in found["interfaces"] and found["missing_interfaces"] == []
    assert found["workspace_shared"] is True and found["workspace_writable"] is True
    assert found["python"] == sys.executable and found["python_version"] == sys.version.split()[0]
    # the record on the shared filesystem, and on stdout for the job log
    assert json.loads((fake_node / "check" / "n1.json").read_text()) == found
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == found
    assert sorted(os.listdir(fake_node / "check")) == ["n1.json", "token"]  # no write test or temp file left
    assert ["scontrol", "show", "node", "-o", "n1"] in runner.calls


def test_check_of_a_node_that_lacks_an_interface_torch_and_the_token(fake_node, monkeypatch, capsys):
    # no nvidia-smi on PATH; scontrol does not answer; the run's cluster.env names lo and one that is not there
    monkeypatch.setattr(gpu, "torch_here", lambda: dict(NO_TORCH))
    (fake_node / "run" / "env" / "cluster.env").write_text(
        "export NCCL_SOCKET_IFNAME=lo\nexport GLOO_SOCKET_IFNAME=nosuch0\n")
    (fake_node / "check" / "token").write_text("another check's token\n")
    runner = Runner((["scontrol"], (1, "", "slurm_load_node error: Unable to contact slurm controller")))
    found = node_check.check(check_args(fake_node, "--require-torch", "--python-name", "deploy_python"),
                             environ={"SLURMD_NODENAME": "n2"}, runner=runner)
    assert found["ok"] is False and found["registered"] is None and found["nvidia_smi_count"] == 0
    assert found["env_file"] == str(fake_node / "run" / "env" / "cluster.env")
    assert found["missing_interfaces"] == ["nosuch0"] and found["workspace_shared"] is False
    assert found["gpu_reason"].startswith("nvidia-smi not found")
    have = ", ".join(found["interfaces"])
    assert found["problems"] == [
        "deploy_python=%s cannot import torch on n2 (ModuleNotFoundError: No module named 'torch'): install torch "
        "there, or point deploy_python at an interpreter that has it" % sys.executable,
        "no network interface nosuch0 on n2 (it has %s): %s" % (have, INTERFACES_FIX),
        "slurm_workspace is not shared: n2 cannot see a file the batch node wrote in %s; use a directory on the "
        "shared filesystem" % (fake_node / "check"),
    ]
    assert json.loads((fake_node / "check" / "n2.json").read_text())["problems"] == found["problems"]
    assert runner.calls == [["scontrol", "show", "node", "-o", "n2"]]  # nvidia-smi was not there to run


def test_check_with_gpu_policy_report_and_no_env_file(fake_node):
    # Slurm registers 2 GPUs, the node has none: a finding only under the strict policy
    runner = Runner((["scontrol"], (0, "NodeName=n3 Gres=gpu:2 State=IDLE\n", "")))
    strict = node_check.check(check_args(fake_node), environ={"SLURMD_NODENAME": "n3"}, runner=runner)
    assert strict["env_file"] is None and strict["missing_interfaces"] == []
    assert len(strict["problems"]) == 1 and strict["problems"][0].startswith(
        "Slurm registers gpu:2, the node detects 0 (nvidia-smi not found")
    report = node_check.check(check_args(fake_node, "--gpu-policy", "report"), environ={"SLURMD_NODENAME": "n3"},
                              runner=runner)
    assert report["ok"] is True and report["problems"] == []


def test_check_reads_what_slurm_registers_from_the_batch_node_s_query(fake_node):
    (fake_node / "check" / "slurm_nodes.txt").write_text(job_nodes_answer())
    runner = Runner()
    found = node_check.check(check_args(fake_node, "--slurm-nodes", str(fake_node / "check" / "slurm_nodes.txt")),
                             environ={"SLURMD_NODENAME": "gpu-worker-1"}, runner=runner)
    assert found["registered"] == 2 and found["problems"][0].startswith(
        "Slurm registers gpu:2, the node detects 0 (nvidia-smi not found")
    assert runner.calls == []
    # the query failed (no file): Slurm cannot tell, as when a node's own scontrol fails
    (fake_node / "check" / "slurm_nodes.txt").unlink()
    found = node_check.check(check_args(fake_node, "--slurm-nodes", str(fake_node / "check" / "slurm_nodes.txt")),
                             environ={"SLURMD_NODENAME": "gpu-worker-1"}, runner=runner)
    assert found["registered"] is None and found["ok"] is True and runner.calls == []
    assert node_check.table([found])[1].split()[1] == "0/0/0/0/?"


def test_check_refuses_an_unknown_gpu_policy(tmp_path, capsys):
    with pytest.raises(SystemExit):
        check_args(tmp_path, "--gpu-policy", "lenient")
    assert "invalid choice: 'lenient'" in capsys.readouterr().err


@pytest.mark.parametrize("extra, imports_torch", [
    ([], False),  # the dataset preparation: no GPU, no torch
    (["--gpus", "0"], False),
    (["--require-torch"], True),
    (["--gpus", "1"], True),
])
def test_check_looks_at_torch_only_where_the_job_asks_for_gpus_or_torch(fake_node, monkeypatch, extra, imports_torch):
    imported = []
    monkeypatch.setattr(gpu, "torch_here", lambda: imported.append(True) or dict(CPU_TORCH))
    found = node_check.check(check_args(fake_node, *extra), environ={"SLURMD_NODENAME": "n1"},
                             runner=Runner((["scontrol"], (0, "NodeName=n1 State=IDLE\n", ""))))
    assert bool(imported) is imports_torch
    if imports_torch:
        assert found["torch"] == CPU_TORCH and node_check.table([found])[1].split()[2] == found["python_version"] + "/2.13.0+cpu"
    else:
        assert found["torch"] == node_check.NOT_CHECKED and found["torch"]["checked"] is False
        assert node_check.table([found])[1].split()[2] == found["python_version"] + "/-"
        assert found["ok"] is True and found["problems"] == []


def test_the_check_of_a_job_without_gpus_or_torch_does_not_import_torch(tmp_path):
    """The real import, in a process of its own: torch costs seconds of CPU on every node."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    ship_node_package(scripts)
    (tmp_path / "check").mkdir()
    (tmp_path / "check" / "token").write_text("t0k\n")
    (tmp_path / "run" / "env").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    code = ("import sys\nfrom llmtrain_node import node_check\n"
            "node_check.main(sys.argv[1:])\n"
            "sys.stdout.write('torch imported: %s\\n' % ('torch' in sys.modules))\n")
    env = dict((k, v) for k, v in os.environ.items() if k != "PYTHONPATH")
    env.update(PATH=str(tmp_path / "bin"), SLURMD_NODENAME="n1")
    proc = subprocess.run([sys.executable, "-c", code, "check", "--dir", str(tmp_path / "check"), "--token", "t0k",
                           "--run-dir", str(tmp_path / "run"), "--gpus", "0",
                           "--slurm-nodes", str(tmp_path / "check" / "slurm_nodes.txt")],
                          cwd=str(scripts), env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "torch imported: False"
    record = json.loads((tmp_path / "check" / "n1.json").read_text())
    assert record["torch"] == node_check.NOT_CHECKED and record["ok"] is True


# ---------------------------------------------------------------- gather: the verdict on the job's nodes

def gather_args(tmp_path, *nodes, bad_nodes_file=True):
    args = ["gather", "--dir", str(tmp_path / "check"), "--token", "t0k", "--nodes"] + list(nodes) + [
        "--out", str(tmp_path / "node_check.json"), "--timeout", "60", "--python", "/v/bin/python",
        "--job", "42", "--restart", "1"]
    if bad_nodes_file:
        args += ["--bad-nodes-file", str(tmp_path / "bad_nodes.json")]
    return node_check.parser().parse_args(args)


def write_record(tmp_path, rec):
    (tmp_path / "check").mkdir(exist_ok=True)
    (tmp_path / "check" / (rec["node"] + ".json")).write_text(json.dumps(rec))


NO_ANSWER = ("%s did not answer the node check within 60 s: its slurmd, its filesystem or /v/bin/python (after "
             "slurm_env_setup) does not work there; see the job log")


def test_gather_with_good_nodes_only(tmp_path, capsys):
    write_record(tmp_path, record(node="n1"))
    write_record(tmp_path, record(node="n2"))
    rc, summary = node_check.gather(gather_args(tmp_path, "n1", "n2"), now=NOW)
    assert rc == 0 and summary["bad"] == {}
    assert not (tmp_path / "bad_nodes.json").exists()  # nothing to add: not even created
    saved = json.loads((tmp_path / "node_check.json").read_text())
    assert saved == summary
    assert (saved["job_id"], saved["restart"], saved["time"]) == ("42", 1, "2026-11-30T10:00:00Z")
    assert [r["node"] for r in saved["nodes"]] == ["n1", "n2"]
    assert saved["table"] == [
        "NODE  GPUS(ASKED/STEP/SMI/TORCH/SLURM)  PYTHON/TORCH         CPUS(BOUND/ASKED)  INTERFACES  WORKSPACE  GPU HEALTH  "
        "VERDICT",
        "n1    2/2/2/2/2                         3.11.7/2.13.0+cu128  8/8                ok          ok         ok          ok",
        "n2    2/2/2/2/2                         3.11.7/2.13.0+cu128  8/8                ok          ok         ok          ok",
    ]
    out = capsys.readouterr().out.splitlines()
    assert out == ["llmtrain: node check  " + line for line in saved["table"]]


def test_gather_judges_silent_stale_and_bad_nodes(tmp_path, capsys):
    (tmp_path / "bad_nodes.json").write_text(json.dumps(
        {"old-node": dict(reason="repaired? not yet", job_id="7", time="2026-11-01T00:00:00Z")}))
    write_record(tmp_path, record(node="n1"))
    write_record(tmp_path, record(node="n2", token="an earlier check's"))  # a record of another check
    write_record(tmp_path, record(node="n4", missing_interfaces=["ib0"], registered=None))
    rc, summary = node_check.gather(gather_args(tmp_path, "n1", "n2", "n3", "n4"), now=NOW)
    interface = "no network interface ib0 on n4 (it has eth0, lo): " + INTERFACES_FIX
    assert rc == node_check.BAD_NODES_RC == 3
    assert summary["bad"] == {"n2": NO_ANSWER % "n2", "n3": NO_ANSWER % "n3", "n4": interface}

    # the bad nodes join those the run knew already
    assert json.loads((tmp_path / "bad_nodes.json").read_text()) == {
        "old-node": dict(reason="repaired? not yet", job_id="7", time="2026-11-01T00:00:00Z"),
        "n2": dict(reason=NO_ANSWER % "n2", job_id="42", time="2026-11-30T10:00:00Z"),
        "n3": dict(reason=NO_ANSWER % "n3", job_id="42", time="2026-11-30T10:00:00Z"),
        "n4": dict(reason=interface, job_id="42", time="2026-11-30T10:00:00Z"),
    }
    saved = json.loads((tmp_path / "node_check.json").read_text())
    assert saved["bad"] == summary["bad"] and saved["job_id"] == "42" and len(saved["nodes"]) == 4
    assert saved["nodes"][2] == dict(node="n3", ok=False, answered=False, problems=[NO_ANSWER % "n3"])
    rows = [line.split() for line in saved["table"][1:]]
    assert rows == [["n1", "2/2/2/2/2", "3.11.7/2.13.0+cu128", "8/8", "ok", "ok", "ok", "ok"],
                    ["n2", "-", "-", "-", "-", "-", "-", "NO", "ANSWER"],
                    ["n3", "-", "-", "-", "-", "-", "-", "NO", "ANSWER"],
                    ["n4", "2/2/2/2/?", "3.11.7/2.13.0+cu128", "8/8", "missing", "ib0", "ok", "ok", "BAD"]]
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == ["llmtrain: node check  " + line for line in saved["table"]]
    assert out[5:] == ["llmtrain: node check: n2 is bad: " + NO_ANSWER % "n2",
                       "llmtrain: node check: n3 is bad: " + NO_ANSWER % "n3",
                       "llmtrain: node check: n4 is bad: " + interface]


def test_gather_joins_every_finding_of_a_node_and_shows_them_in_the_table(tmp_path, capsys):
    write_record(tmp_path, record(node="n1", torch=NO_TORCH, workspace_shared=False))
    write_record(tmp_path, record(node="n2", workspace_writable=False))
    rc, summary = node_check.gather(gather_args(tmp_path, "n1", "n2", bad_nodes_file=False), now=NOW)
    n1 = record(node="n1", torch=NO_TORCH, workspace_shared=False)
    assert rc == 3 and summary["bad"]["n1"] == "; ".join(n1["problems"]) and len(n1["problems"]) == 2
    assert [line.split()[2:] for line in summary["table"][1:]] == [["3.11.7/NO", "TORCH", "8/8", "ok", "NOT", "SHARED", "ok",
                                                                    "BAD"],
                                                                   ["3.11.7/2.13.0+cu128", "8/8", "ok", "READ-ONLY", "ok",
                                                                    "BAD"]]
    assert not (tmp_path / "bad_nodes.json").exists()  # no --bad-nodes-file: none written


@pytest.mark.parametrize("cpus, text", [([0, 1, 2, 3], "0-3"), ([5], "5"), ([0, 2, 3, 4, 7, 9, 10], "0,2-4,7,9-10"),
                                        ([], "")])
def test_cpu_ranges_as_linux_writes_them(cpus, text):
    assert node_check.cpu_ranges(cpus) == text


def test_cpu_ranges_of_thousands_of_scattered_cpus_are_cut():
    text = node_check.cpu_ranges(list(range(0, 4096, 2)))
    assert len(text) == 200 and text.startswith("0,2,4,") and text.endswith("...")


def test_the_check_records_the_cpus_its_task_is_bound_to_against_those_asked(fake_node):
    found = node_check.check(check_args(fake_node, "--procs", "4"),
                             environ={"SLURMD_NODENAME": "n1", "SLURM_CPUS_PER_TASK": "16"})
    assert found["cpus"] == dict(count=len(os.sched_getaffinity(0)), list=node_check.cpu_ranges(
        sorted(os.sched_getaffinity(0))), asked=16, procs=4)
    assert found["problems"] == []  # a binding is said, never a reason to leave the node out
    # no --cpus-per-task: Slurm gives one; a value that is not a count is taken as Slurm's default
    assert node_check.cpu_binding({}, 0, affinity={3})["asked"] == 1
    assert node_check.cpu_binding({"SLURM_CPUS_PER_TASK": "8(x2)"}, 0, affinity={3})["asked"] == 1


def test_gather_names_the_nodes_bound_to_fewer_cpus_than_asked_and_processes_sharing_one(tmp_path, capsys):
    low, whole = dict(count=2, list="0-1", asked=8, procs=8), dict(count=8, list="0-7", asked=8, procs=8)
    for node in ["n%d" % i for i in range(13)]:
        write_record(tmp_path, record(node=node, cpus=whole if node == "n0" else low))
    write_record(tmp_path, record(node="n13", cpus="garbage"))
    rc, summary = node_check.gather(gather_args(tmp_path, *["n%d" % i for i in range(14)]), now=NOW)
    assert rc == 0 and summary["bad"] == {}
    assert [line.split()[3] for line in summary["table"][1:3]] == ["8/8", "2/8"]
    assert summary["table"][2].split()[4] == "LOW" and summary["table"][-1].split()[3] == "-"
    notes = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("llmtrain: node check  ")]
    assert notes[0] == ("llmtrain: node check: n1: its task is bound to 2 CPU(s) (0-1), fewer than the 8 the job asked "
                        "for each node (slurm_cpus_per_task): the node's CPU layout in Slurm (scontrol show node n1: CPUs, "
                        "CoresPerSocket, ThreadsPerCore) or a CPU binding of the job's environment (SLURM_CPU_BIND) does "
                        "not match the allocation")
    assert len(notes) == node_check.NOTED_NODES + 2
    assert notes[node_check.NOTED_NODES] == "llmtrain: node check: and 2 more node(s) bound to fewer CPUs than asked"
    assert notes[-1] == ("llmtrain: node check: the 8 processes of each node share the 2 CPU(s) its task is bound to on "
                         "12 node(s) (n1: 0-1), less than one CPU each: set slurm_cpus_per_task to at least "
                         "slurm_procs_per_node (8), such as the CPUs of a GPU times the GPUs")


@pytest.mark.parametrize("text, why", [("{not json", "it is no JSON ("), ('["n7"]', "not a JSON object")])
def test_gather_over_an_unreadable_bad_nodes_file_keeps_it_aside_says_so_and_starts_it_again(
        tmp_path, capsys, text, why):
    (tmp_path / "bad_nodes.json").write_text(text)
    rc, _summary = node_check.gather(gather_args(tmp_path, "n1"), now=NOW)
    assert rc == 3
    assert list(json.loads((tmp_path / "bad_nodes.json").read_text())) == ["n1"]
    assert (tmp_path / "bad_nodes.json.unreadable").read_text() == text  # what it held is not lost
    err = capsys.readouterr().err
    assert "bad_nodes.json cannot be read (" in err and "kept as %s" % (tmp_path / "bad_nodes.json.unreadable") in err
    assert why in err, err


def test_the_three_writers_of_bad_nodes_merge_into_one_file_read_as_the_watch_reads_it(tmp_path):
    """The node check, the network check and the hang watch add theirs through bad_nodes.record;
    earlier entries stay, a node found again gets its latest reason."""
    from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import exclusion  # pylint: disable=import-outside-toplevel
    from ansible_collections.llmtrain.slurm.plugins.module_utils.node import bad_nodes  # pylint: disable=import-outside-toplevel
    path = str(tmp_path / "bad_nodes.json")
    bad_nodes.record(path, {"n1": "no GPU", "n2": "no network interface ib0"}, "41", "2026-12-05T10:00:00Z")
    bad_nodes.record(path, {"n3": "slow network: 2.1 GB/s"}, "41", "2026-12-05T10:01:00Z")
    bad_nodes.record(path, {"n2": "hang: rank 3 stopped (state T)"}, "42", "2026-12-05T11:00:00Z")
    known, why = exclusion.load_bad_nodes(path)
    assert why is None, why
    assert {node: entry["reason"] for node, entry in known.items()} == {
        "n1": "no GPU", "n2": "hang: rank 3 stopped (state T)", "n3": "slow network: 2.1 GB/s"}
    assert known["n2"]["job_id"] == "42" and known["n1"]["time"] == "2026-12-05T10:00:00Z"


def test_main_gather_returns_its_exit_code(tmp_path, capsys):
    write_record(tmp_path, record(node="n1"))

    def argv(*nodes):
        return ["gather", "--dir", str(tmp_path / "check"), "--token", "t0k", "--nodes"] + list(nodes) + [
            "--out", str(tmp_path / "out.json")]

    assert node_check.main(argv("n1")) == 0
    assert node_check.main(argv("n1", "n9")) == 3
    assert "n9 did not answer the node check within ? s" in capsys.readouterr().out


def test_it_runs_from_the_shipped_package(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    ship_node_package(scripts)
    write_record(tmp_path, record(node="n1"))
    env = dict((k, v) for k, v in os.environ.items() if k != "PYTHONPATH")
    proc = subprocess.run([sys.executable, "-m", "llmtrain_node.node_check", "gather", "--dir", str(tmp_path / "check"),
                           "--token", "t0k", "--nodes", "n1", "n2", "--out", str(tmp_path / "out.json"),
                           "--bad-nodes-file", str(tmp_path / "bad_nodes.json"), "--timeout", "90"],
                          cwd=str(scripts), env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "llmtrain: node check: n2 is bad: n2 did not answer the node check within 90 s" in proc.stdout
    assert list(json.loads((tmp_path / "bad_nodes.json").read_text())) == ["n2"]


# ---------------------------------------------------------------- the stop notice during a check

@pytest.fixture
def usr2_restored():
    before = signal.getsignal(signal.SIGUSR2)
    yield
    signal.signal(signal.SIGUSR2, before)


def test_a_stop_notice_during_the_check_is_recorded_for_the_job_script_and_the_check_goes_on(
        tmp_path, monkeypatch, usr2_restored):
    notice = tmp_path / "STOP_NOTICE"
    monkeypatch.setenv("LLMTRAIN_STOP_NOTICE", str(notice))
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    node_check.record_stop_notice()
    os.kill(os.getpid(), signal.SIGUSR2)  # would end this process with the default action
    os.kill(os.getpid(), signal.SIGUSR2)
    assert notice.read_text() == "SIGUSR2 on node7\n" * 2
    assert oct(notice.stat().st_mode & 0o777) == oct(0o644 & ~current_umask())


def test_without_the_job_scripts_file_the_notice_is_ignored(tmp_path, monkeypatch, usr2_restored):
    monkeypatch.delenv("LLMTRAIN_STOP_NOTICE", raising=False)
    node_check.record_stop_notice()
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGUSR2)
    assert os.listdir(str(tmp_path)) == []


def test_a_notice_file_that_is_a_link_is_not_followed(tmp_path, monkeypatch, usr2_restored, capsys):
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(str(target), str(tmp_path / "STOP_NOTICE"))
    monkeypatch.setenv("LLMTRAIN_STOP_NOTICE", str(tmp_path / "STOP_NOTICE"))
    node_check.record_stop_notice()
    os.kill(os.getpid(), signal.SIGUSR2)
    assert target.read_text() == ""
    assert "could not be written" in capsys.readouterr().err


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
