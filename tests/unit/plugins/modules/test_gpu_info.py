import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmtrain.slurm.plugins.modules import gpu_info
from ansible_collections.llmtrain.slurm.plugins.module_utils import gpu


class Exit(Exception):
    pass


def run_module(monkeypatch, args, commands):
    """Run gpu_info with run_command answering `commands` in order; return its result."""
    calls = []

    def run_command(self, argv, **kwargs):
        expected, answer = commands[len(calls)]
        calls.append(argv)
        assert argv == expected
        return answer

    def exit_json(self, **kwargs):
        raise Exit(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, *a, **k: "/usr/bin/" + name if name == "nvidia-smi" else None)
    with patch_module_args(args), pytest.raises(Exit) as result:
        gpu_info.main()
    assert len(calls) == len(commands)
    return result.value.args[0]


def test_exact_argv_and_result(monkeypatch):
    csv = "0, NVIDIA H200, GPU-11111111-2222-3333-4444-555555555555, 143771, 570.86.15, 9.0, Disabled\n"
    torch = json.dumps(dict(importable=True, version="2.13.0+cu128", cuda_available=True, device_count=1,
                            cuda_version="12.8", devices=["NVIDIA H200"]))
    result = run_module(monkeypatch, dict(python="/opt/train/bin/python", _ansible_check_mode=True), [
        (["/usr/bin/nvidia-smi", "--query-gpu=" + ",".join(gpu.QUERY_FIELDS), "--format=csv,noheader,nounits"],
         (0, csv, "")),
        (["/opt/train/bin/python", "-c", gpu.TORCH_PROBE], (0, torch, "")),
    ])
    assert result["changed"] is False
    assert result["count"] == 1 and result["source"] == "nvidia-smi"
    assert result["gpus"][0]["name"] == "NVIDIA H200" and result["gpus"][0]["memory_total_mib"] == 143771
    assert result["torch"]["cuda_version"] == "12.8"
