# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one list of what is shipped to the compute nodes: the module_utils.node package, as the
files of the llmtrain_node package that the job scripts run (`python -m llmtrain_node.X`)."""

from __future__ import annotations

import inspect

from ansible_collections.llmtrain.slurm.plugins.module_utils import node
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import (
    atomic, bad_nodes, event_files, exit_codes, gpu, gpu_health, hang, job, job_end, job_log, link_speed, nccl,
    network_check, node_check, notify, record_patterns, run_files, serve_gate, serve_job, slurm_job, untrusted)

NAME = "llmtrain_node"
MODULES = (node, atomic, bad_nodes, event_files, exit_codes, gpu, gpu_health, hang, job, job_end, job_log, link_speed,
           nccl, network_check, node_check, notify, record_patterns, run_files, serve_gate, serve_job, slurm_job, untrusted)


def files(prefix=""):
    """{prefix + 'llmtrain_node/<file>.py': its text} for every module of the package. The text is
    read from the modules themselves, so that a module (an AnsiballZ payload holds them) and a
    controller-side plugin ship the same."""
    out = {}
    for module in MODULES:
        name = "__init__" if module is node else module.__name__.rsplit(".", 1)[-1]
        out["%s%s/%s.py" % (prefix, NAME, name)] = inspect.getsource(module)
    return out
