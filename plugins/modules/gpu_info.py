#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Detect the NVIDIA GPUs of the host it runs on, with nvidia-smi and torch
description:
  - Queries C(nvidia-smi) (index, name, UUID, total memory, driver version, compute
    capability, MIG mode, MIG devices) and probes C(torch) in a given interpreter (version,
    CUDA available, device count, CUDA version), and reports C(CUDA_VISIBLE_DEVICES).
  - No driver (C(nvidia-smi) exit 9), no C(nvidia-smi) or no C(torch) is not a failure -
    C(count) is then 0 and C(reason) says why.
  - To compare what every compute node detects with what Slurm registered, use
    M(llmtrain.slurm.slurm_gpu_check), which runs the same detection on all nodes at once.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  python:
    description:
      - Interpreter in which C(torch) is probed (the training environment's Python).
      - Defaults to the interpreter running the module.
    type: path
notes:
  - Supports check mode; it only reads.
"""

EXAMPLES = r"""
- name: What GPUs does this host have?
  llmtrain.slurm.gpu_info:
    python: /opt/venvs/train/bin/python
  register: gpus

- name: Say so
  ansible.builtin.debug:
    msg: "{{ gpus.count }} GPU(s) from {{ gpus.source }}{{ ': ' ~ gpus.reason if gpus.reason else '' }}"
"""

RETURN = r"""
count:
  description: Number of GPUs found (nvidia-smi's count, else torch's, else 0).
  returned: always
  type: int
  sample: 8
source:
  description: Where C(count) comes from.
  returned: always
  type: str
  choices: [nvidia-smi, torch, none]
gpus:
  description: GPUs as nvidia-smi lists them.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA H100 80GB HBM3
      uuid: GPU-6f5b0d44-6b0f-2d1b-5c39-3c4b4c8b2a11
      memory_total_mib: 81559
      driver_version: 550.54.15
      compute_capability: "9.0"
      mig_mode: Disabled
      mig_devices: []
nvidia_smi_count:
  description: GPUs nvidia-smi lists.
  returned: always
  type: int
torch_count:
  description: CUDA devices torch sees (0 when torch is missing or a CPU build).
  returned: always
  type: int
torch:
  description: What the torch probe found (importable, version, cuda_available, device_count, cuda_version, devices, error).
  returned: always
  type: dict
cuda_visible_devices:
  description: The C(CUDA_VISIBLE_DEVICES) the module ran with; null when unset.
  returned: always
  type: str
reason:
  description: Why C(count) is 0; null when GPUs were found.
  returned: always
  type: str
  sample: "nvidia-smi not found (no NVIDIA driver utilities on PATH); torch 2.13.0+cpu sees no CUDA device (CUDA build: none, a CPU build)"
hostname:
  description: The host that was examined.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu


def main():
    module = AnsibleModule(
        argument_spec=dict(python=dict(type="path")),
        supports_check_mode=True,
    )

    def runner(argv, timeout=60):
        return module.run_command(argv)

    def which(name):
        return module.get_bin_path(name)

    module.exit_json(changed=False, **gpu.detect(module.params["python"], runner, which))


if __name__ == "__main__":
    main()
