# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU detection: nvidia-smi and torch, parsed by pure functions.

This file imports nothing from Ansible on purpose: `slurm_gpu_check` runs it as a plain
Python script on every compute node (one `srun` step), where it prints one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys

QUERY_FIELDS = ["index", "name", "uuid", "memory.total", "driver_version", "compute_cap",
                "mig.mode.current"]
# Drivers older than 510 do not know compute_cap; they are queried without it.
QUERY_FIELDS_OLD_DRIVER = [f for f in QUERY_FIELDS if f != "compute_cap"]
NO_DRIVER_RC = 9
# nvidia-smi's numbers, in ASCII digits (int() and float() also read other scripts' digits, '1_0',
# and float() 'inf', which int() refuses): a GPU's or a MIG device's index, a size in MiB
INDEX = re.compile(r"[0-9]{1,9}\Z")
MIB = re.compile(r"[0-9]{1,12}(?:[.][0-9]{1,9})?\Z")
# `nvidia-smi -L`: "GPU 0: NVIDIA A100 (UUID: GPU-...)", and its MIG devices under it,
# "  MIG 1g.10gb     Device  0: (UUID: MIG-...)"
LIST_GPU = re.compile(r"GPU ([0-9]{1,9}):")
LIST_MIG = re.compile(r"MIG (\S+) +Device +([0-9]{1,9}):(.*)")

TORCH_PROBE = (
    "import json\n"
    "try:\n"
    "    import torch\n"
    "except Exception as exc:\n"
    "    print(json.dumps({'importable': False, 'error': '%s: %s' % (type(exc).__name__, exc)}))\n"
    "else:\n"
    "    ok = torch.cuda.is_available()\n"
    "    print(json.dumps({'importable': True, 'version': torch.__version__,\n"
    "                      'cuda_available': ok, 'device_count': torch.cuda.device_count() if ok else 0,\n"
    "                      'cuda_version': torch.version.cuda,\n"
    "                      'devices': [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if ok else []}))\n"
)


def _value(text):
    text = text.strip()
    return None if text in ("", "[N/A]", "N/A", "[Not Supported]") else text


def parse_query_csv(text, fields=None):
    """Rows of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` as dicts."""
    fields = fields or QUERY_FIELDS
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [_value(cell) for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError("nvidia-smi printed %d fields where %d were asked: %r"
                             % (len(cells), len(fields), line))
        row = dict(zip(fields, cells))
        if not INDEX.match(row["index"] or ""):
            raise ValueError("nvidia-smi printed %r where a GPU's index was asked: %r" % (row["index"], line))
        memory = row.get("memory.total")
        gpus.append(dict(
            index=int(row["index"]),
            name=row["name"],
            uuid=row["uuid"],
            memory_total_mib=int(float(memory)) if memory and MIB.match(memory) else None,
            driver_version=row["driver_version"],
            compute_capability=row.get("compute_cap"),
            mig_mode=row["mig.mode.current"],
            mig_devices=[],
        ))
    return gpus


def parse_list(text):
    """`nvidia-smi -L` -> {gpu index: [MIG devices]}; each MIG device a dict."""
    migs, current = {}, None
    for line in text.splitlines():
        stripped = line.strip()
        gpu, mig = LIST_GPU.match(stripped), LIST_MIG.match(stripped)
        if gpu:
            current = int(gpu.group(1))
            migs.setdefault(current, [])
        elif stripped.startswith("GPU "):
            current = None  # a GPU without an index: its MIG devices are no one's
        elif mig and current is not None:
            uuid = mig.group(3).strip()
            if uuid.startswith("(UUID:"):
                uuid = uuid[len("(UUID:"):].rstrip(")").strip()
            migs[current].append(dict(profile=mig.group(1), device=int(mig.group(2)), uuid=uuid))
    return migs


def run(argv, timeout=60):
    """Run argv; (rc, stdout, stderr). A missing program is rc 127."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", "%s did not answer within %ss" % (argv[0], timeout)
    return proc.returncode, proc.stdout, proc.stderr


def nvidia_smi(runner=run, which=shutil.which):
    """(gpus, reason): reason says why the list is empty, None when GPUs were found."""
    binary = which("nvidia-smi")
    if not binary:
        return [], "nvidia-smi not found (no NVIDIA driver utilities on PATH)"
    fields = QUERY_FIELDS
    rc, out, err = runner([binary, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc != 0 and "compute_cap" in (out + err):
        fields = QUERY_FIELDS_OLD_DRIVER
        rc, out, err = runner([binary, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if rc == NO_DRIVER_RC:
        return [], "nvidia-smi could not talk to the NVIDIA driver (exit 9): driver not loaded or not installed"
    if rc != 0:
        return [], "nvidia-smi failed (exit %d): %s" % (rc, (err or out).strip()[:300])
    try:
        gpus = parse_query_csv(out, fields)
    except ValueError as exc:
        return [], str(exc)
    if any(g["mig_mode"] == "Enabled" for g in gpus):
        rc, out, _err = runner([binary, "-L"])
        if rc == 0:
            migs = parse_list(out)
            for gpu in gpus:
                gpu["mig_devices"] = migs.get(gpu["index"], [])
    if not gpus:
        return [], "nvidia-smi lists no GPU"
    return gpus, None


def torch_info(python=None, runner=run):
    """What torch sees, probed in `python` (another interpreter may hold torch)."""
    rc, out, err = runner([python or sys.executable, "-c", TORCH_PROBE], timeout=120)
    if rc != 0:
        return dict(importable=False, error="%s failed (exit %d): %s"
                    % (python or sys.executable, rc, (err or out).strip()[-300:]))
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return dict(importable=False, error="unexpected torch probe output: %r" % out[-300:])


def torch_here():
    """torch_info() of this interpreter, imported here rather than in a child process."""
    scope = {}
    try:
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(TORCH_PROBE, scope)  # pylint: disable=exec-used  # a constant of this file
        return json.loads(out.getvalue().strip().splitlines()[-1])
    except Exception as exc:  # any failure is a finding, not a crash
        return dict(importable=False, error="%s: %s" % (type(exc).__name__, exc))


def detect(python=None, runner=run, which=shutil.which, environ=None, torch=None):
    """Everything gpu_info returns: gpus, count, source, torch, reason, cuda_visible_devices.
    torch: what torch_info() would return, when the caller has it already."""
    environ = os.environ if environ is None else environ
    gpus, smi_reason = nvidia_smi(runner, which)
    torch = torch if torch is not None else torch_info(python, runner)
    torch_count = torch.get("device_count", 0) if torch.get("importable") else 0
    if gpus:
        source, count, reason = "nvidia-smi", len(gpus), None
    elif torch_count:
        source, count, reason = "torch", torch_count, None
    else:
        source, count = "none", 0
        torch_reason = (torch.get("error") if not torch.get("importable")
                        else "torch %s sees no CUDA device (CUDA build: %s)"
                        % (torch.get("version"), torch.get("cuda_version") or "none, a CPU build"))
        reason = "%s; %s" % (smi_reason, torch_reason)
    return dict(
        hostname=socket.gethostname(),
        slurm_node=environ.get("SLURMD_NODENAME"),
        gpus=gpus,
        count=count,
        source=source,
        nvidia_smi_count=len(gpus),
        torch=torch,
        torch_count=torch_count,
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        reason=reason,
    )


if __name__ == "__main__":
    # Run on a compute node by slurm_gpu_check: one JSON line, whatever happens.
    sys.stdout.write(json.dumps(detect(sys.argv[1] if len(sys.argv) > 1 else None)) + "\n")
    sys.stdout.flush()
