import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu
from ansible_collections.llmtrain.slurm.plugins.modules import gpu_info
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, run


def test_exact_argv_and_result(monkeypatch, capsys):
    csv = "0, NVIDIA H200, GPU-11111111-2222-3333-4444-555555555555, 143771, 570.86.15, 9.0, Disabled\n"
    torch = json.dumps(dict(importable=True, version="2.13.0+cu128", cuda_available=True, device_count=1,
                            cuda_version="12.8", devices=["NVIDIA H200"]))
    commands = Slurm(monkeypatch, [
        (["/usr/bin/nvidia-smi", "--query-gpu=" + ",".join(gpu.QUERY_FIELDS), "--format=csv,noheader,nounits"],
         (0, csv, "")),
        (["/opt/train/bin/python", "-c", gpu.TORCH_PROBE], (0, torch, "")),
    ], bins=("nvidia-smi",))
    result = run(gpu_info.main, dict(python="/opt/train/bin/python"), capsys, check_mode=True)
    commands.done()
    assert result["changed"] is False
    assert result["count"] == 1 and result["source"] == "nvidia-smi"
    assert result["gpus"][0]["name"] == "NVIDIA H200" and result["gpus"][0]["memory_total_mib"] == 143771
    assert result["torch"]["cuda_version"] == "12.8"
