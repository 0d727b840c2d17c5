# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU check's verdict per node: the GPUs Slurm registers against those the node detects
(gpu.detect() run there), with the likely fix."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import usable


def compare(node, detection, python):
    """One row of the GPU check: what Slurm registers for node against what it detected.

    detection is detect()'s result from that node, or None when the node did not answer.
    Returns dict(name, state, registered, nvidia_smi_count, torch_count, detected, match,
    reason, fix).
    """
    name = node["name"]
    registered = node["gres"].get("gpu", {}).get("total", 0)
    state = "+".join([node["state"]] + node.get("state_flags", []))
    row = dict(name=name, state=state, registered=registered, nvidia_smi_count=None, torch_count=None,
               detected=None, match=False, reason=None, fix=None, slurm_reason=node.get("reason"))
    if not usable(node):
        row["reason"] = "node is %s%s" % (state.upper(), ": " + node["reason"] if node.get("reason") else "")
        row["fix"] = ("correct what the reason names (gres.conf / slurm.conf Gres= / the NVIDIA driver on %s), "
                      "restart its slurmd, then `scontrol update nodename=%s state=resume`" % (name, name))
        return row
    if detection is None:
        row["reason"] = "the node ran the detection step but printed no result"
        row["fix"] = "check that %s exists on %s (slurm_python) and runs" % (python, name)
        return row
    smi, torch_count = detection["nvidia_smi_count"], detection["torch_count"]
    detected = detection["count"]
    row.update(nvidia_smi_count=smi, torch_count=torch_count, detected=detected)
    torch = detection.get("torch") or {}
    if registered != detected:
        why = " (%s)" % detection["reason"] if detection.get("reason") else ""
        row["reason"] = "Slurm registers gpu:%d, the node detects %d%s" % (registered, detected, why)
        if registered > detected:
            row["fix"] = ("make the NVIDIA driver on %s see all %d GPUs (nvidia-smi must list them), or set "
                          "Gres=gpu:%d for NodeName=%s in slurm.conf and gres.conf" % (name, registered, detected, name))
        else:
            row["fix"] = ("declare them: Gres=gpu:%d for NodeName=%s in slurm.conf, matching Name=gpu File=/dev/nvidia[...] "
                          "lines in gres.conf, restart slurmd on %s" % (detected, name, name))
    elif smi and torch.get("importable") and torch_count != smi:
        row["reason"] = "nvidia-smi lists %d GPU(s) but torch %s in %s sees %d (CUDA build: %s)" % (
            smi, torch.get("version"), python, torch_count, torch.get("cuda_version") or "none")
        row["fix"] = "install a CUDA build of torch in %s that matches the node's driver" % python
    else:
        row["match"] = True
    return row
