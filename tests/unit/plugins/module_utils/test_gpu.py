import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Runner

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "nvidia_smi")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


QUERY = ["/usr/bin/nvidia-smi", "--query-gpu=" + ",".join(gpu.QUERY_FIELDS), "--format=csv,noheader,nounits"]
QUERY_OLD = ["/usr/bin/nvidia-smi", "--query-gpu=" + ",".join(gpu.QUERY_FIELDS_OLD_DRIVER), "--format=csv,noheader,nounits"]
CPU_TORCH = (0, json.dumps(dict(importable=True, version="2.13.0+cpu", cuda_available=False, device_count=0,
                                cuda_version=None, devices=[])), "")
H100_TORCH = (0, json.dumps(dict(importable=True, version="2.13.0+cu128", cuda_available=True, device_count=8,
                                 cuda_version="12.8", devices=["NVIDIA H100 80GB HBM3"] * 8)), "")
NO_TORCH = (0, json.dumps(dict(importable=False, error="ModuleNotFoundError: No module named 'torch'")), "")


def which_found(name):
    return "/usr/bin/" + name


def which_missing(name):
    return None


def test_one_gpu():
    gpus = gpu.parse_query_csv(fixture("one_gpu.csv"))
    assert gpus == [dict(index=0, name="NVIDIA GeForce RTX 3090",
                         uuid="GPU-2a7d9d4e-5f3c-11ee-8c99-0242ac120002", memory_total_mib=24576,
                    driver_version="535.129.03", compute_capability="8.6", mig_mode=None,
                    mig_devices=[])]


def test_eight_h100_detected_by_nvidia_smi_and_torch():
    runner = Runner((QUERY, (0, fixture("h100x8.csv"), "")), (["python"], H100_TORCH))
    result = gpu.detect("python", runner, which_found, environ={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"})
    assert result["count"] == 8 and result["source"] == "nvidia-smi" and result["reason"] is None
    assert [g["index"] for g in result["gpus"]] == list(range(8))
    assert {g["compute_capability"] for g in result["gpus"]} == {"9.0"}
    assert result["torch_count"] == 8
    assert result["cuda_visible_devices"] == "0,1,2,3,4,5,6,7"
    assert runner.calls == [QUERY, ["python", "-c", gpu.TORCH_PROBE]]  # -L only when MIG is on


def test_mig_devices_are_listed_under_their_gpu():
    runner = Runner((QUERY, (0, fixture("a100_mig.csv"), "")),
                    (["/usr/bin/nvidia-smi", "-L"], (0, fixture("a100_mig_list.txt"), "")),
                    (["python"], CPU_TORCH))
    result = gpu.detect("python", runner, which_found, environ={})
    first, second = result["gpus"]
    assert first["mig_mode"] == "Enabled" and second["mig_mode"] == "Disabled"
    assert [m["profile"] for m in first["mig_devices"]] == ["3g.20gb", "2g.10gb", "1g.5gb"]
    assert first["mig_devices"][2] == dict(profile="1g.5gb", device=2,
                                           uuid="MIG-0c7a1b8e-6b1d-5e0f-9d3c-2a4f6e8b0c13")
    assert second["mig_devices"] == []


def test_driver_missing_is_zero_with_a_reason_not_a_failure():
    runner = Runner((QUERY, (9, fixture("no_driver.txt"), "")), (["python"], CPU_TORCH))
    result = gpu.detect("python", runner, which_found, environ={})
    assert result["count"] == 0 and result["source"] == "none"
    assert "exit 9" in result["reason"] and "driver" in result["reason"]
    assert "CPU build" in result["reason"]


def test_nvidia_smi_missing_falls_back_to_torch():
    runner = Runner((["python"], H100_TORCH))
    result = gpu.detect("python", runner, which_missing, environ={})
    assert result["count"] == 8 and result["source"] == "torch" and result["nvidia_smi_count"] == 0


def test_nothing_at_all():
    runner = Runner((["python"], NO_TORCH))
    result = gpu.detect("python", runner, which_missing, environ={})
    assert result["count"] == 0
    assert result["reason"] == ("nvidia-smi not found (no NVIDIA driver utilities on PATH); "
                                "ModuleNotFoundError: No module named 'torch'")


def test_old_driver_without_compute_cap_is_queried_again():
    runner = Runner((QUERY, (2, fixture("old_driver_field_error.txt"), "")),
                    (QUERY_OLD, (0, fixture("v100_old_driver.csv"), "")),
                    (["python"], CPU_TORCH))
    result = gpu.detect("python", runner, which_found, environ={})
    assert result["count"] == 1
    assert result["gpus"][0]["compute_capability"] is None
    assert result["gpus"][0]["memory_total_mib"] == 16160


def test_malformed_csv_is_a_reason():
    runner = Runner((QUERY, (0, "0, only two\n", "")), (["python"], CPU_TORCH))
    result = gpu.detect("python", runner, which_found, environ={})
    assert result["count"] == 0 and "printed 2 fields where 7 were asked" in result["reason"]


def test_interpreter_that_does_not_run():
    result = gpu.torch_info("/nonexistent/python")
    assert result["importable"] is False and "/nonexistent/python" in result["error"]


def test_runs_as_a_plain_script_on_this_machine():
    """The way slurm_gpu_check runs it on compute nodes: no Ansible, one JSON line."""
    out = subprocess.run([sys.executable, gpu.__file__, sys.executable], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True, timeout=120).stdout
    result = json.loads(out)
    assert result["torch"]["importable"] is True
    if result["count"] == 0:
        assert result["reason"]
    else:
        pytest.skip("this machine has GPUs; the zero-GPU path is covered above")


def test_detect_takes_the_torch_it_is_given_and_probes_nothing():
    given = json.loads(H100_TORCH[1])
    runner = Runner((QUERY, (0, fixture("h100x8.csv"), "")))
    result = gpu.detect("python", runner, which_found, environ={}, torch=given)
    assert runner.calls == [QUERY]  # no `python -c TORCH_PROBE`
    assert result["torch"] == given and result["torch_count"] == 8 and result["count"] == 8

    runner = Runner()
    result = gpu.detect("python", runner, which_missing, environ={}, torch=json.loads(NO_TORCH[1]))
    assert runner.calls == [] and result["count"] == 0 and result["torch_count"] == 0
    assert result["reason"] == ("nvidia-smi not found (no NVIDIA driver utilities on PATH); "
                                "ModuleNotFoundError: No module named 'torch'")


def test_detect_with_torch_none_still_probes():
    runner = Runner((["python"], CPU_TORCH))
    result = gpu.detect("python", runner, which_missing, environ={}, torch=None)
    assert runner.calls == [["python", "-c", gpu.TORCH_PROBE]] and result["torch"]["version"] == "2.13.0+cpu"


class FakeTorch:
    """Just what TORCH_PROBE asks of torch, on a node with two GPUs."""

    __version__ = "2.13.0+cu128"

    class version:  # noqa: N801  (torch.version.cuda)
        cuda = "12.8"

    class cuda:  # noqa: N801
        is_available = staticmethod(lambda: True)
        device_count = staticmethod(lambda: 2)
        get_device_name = staticmethod(lambda index: "NVIDIA A100-SXM4-80GB")


def test_torch_here_probes_this_interpreter_without_printing(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", FakeTorch)
    assert gpu.torch_here() == dict(importable=True, version="2.13.0+cu128", cuda_available=True, device_count=2,
                                    cuda_version="12.8", devices=["NVIDIA A100-SXM4-80GB"] * 2)
    assert capsys.readouterr().out == ""  # the probe's line is read, not printed


def test_torch_here_without_torch_is_a_finding(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails
    found = gpu.torch_here()
    assert found["importable"] is False and found["error"].startswith("ModuleNotFoundError: ")
    assert capsys.readouterr().out == ""


def test_torch_here_that_breaks_inside_torch_is_a_finding(monkeypatch):
    class Broken(FakeTorch):
        class cuda(FakeTorch.cuda):  # noqa: N801
            is_available = staticmethod(lambda: (_none for _none in ()).throw(RuntimeError("CUDA driver init failed")))

    monkeypatch.setitem(sys.modules, "torch", Broken)
    assert gpu.torch_here() == dict(importable=False, error="RuntimeError: CUDA driver init failed")


def test_what_a_real_h200_printed_is_read_as_it_was_there():
    """nvidia-smi's and torch's answers recorded on an H200 give the line gpu.py printed on that machine."""
    recorded = json.loads(fixture("h200_detect.json"))
    torch_answer = (0, json.dumps(recorded["torch"]), "")
    runner = Runner((QUERY, (0, fixture("h200.csv"), "")), (["python3"], torch_answer))
    result = gpu.detect("python3", runner, which_found, environ={})
    for key in ("hostname", "slurm_node"):
        result.pop(key), recorded.pop(key)
    assert result == recorded
    assert result["gpus"][0]["name"] == "NVIDIA H200" and result["gpus"][0]["compute_capability"] == "9.0"
    assert result["count"] == result["torch_count"] == 1 and result["reason"] is None
    assert gpu.parse_list(fixture("h200_list.txt")) == {0: []}  # one GPU, no MIG device


def test_nvidia_smis_numbers_are_ascii_digits():
    """An index or a size in other scripts' digits (which int() and float() read), '1_0' or inf: a
    row without an index is a reason, a size unknown, a MIG device or GPU of -L not listed."""
    rows = fixture("h100x8.csv").splitlines()
    for index in ("\u0660", "\uff10", "1_0", "-1", "x"):
        text = "\n".join([index + rows[0][1:]] + rows[1:]) + "\n"
        runner = Runner((QUERY, (0, text, "")), (["python"], CPU_TORCH))
        result = gpu.detect("python", runner, which_found, environ={})
        assert result["count"] == 0 and result["gpus"] == []
        assert result["reason"].startswith("nvidia-smi printed %r where a GPU's index was asked: " % index)
    for memory in ("\u0668\u0661\u0665\u0665\u0669", "\u00b2", "inf", "nan", "1e400", "8_1559"):
        first = gpu.parse_query_csv(rows[0].replace("81559", memory) + "\n")[0]
        assert first["index"] == 0 and first["memory_total_mib"] is None
    listed = fixture("a100_mig_list.txt")
    assert gpu.parse_list(listed.replace("Device  2:", "Device  \u0662:")) == {
        0: gpu.parse_list(listed)[0][:2], 1: []}
    assert gpu.parse_list(listed.replace("GPU 0:", "GPU \u0660:")) == {1: []}  # its MIG devices are no one's
