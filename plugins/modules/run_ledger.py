#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_ledger
short_description: What a training run used, in GPU-, node- and CPU-hours, from Slurm's accounting
description:
  - "The GPU-hours, node-hours and CPU-hours of each start of the run's training job (a requeued job keeps its
    id: each of its starts apart) and, apart from it, of its data, venv and samples jobs: each allocation's
    TRES (C(cpu), C(node), C(gres/gpu)) x its elapsed time, from one C(sacct -X --duplicates) call for the run's
    few job ids."
  - "The job ids come from the done records (C(train.done.json), C(data/prepare.done.json), C(generate.done.json),
    the venv's C(.llmtrain-venv.json)), the training job ids C(usage.json) keeps and O(job_ids); each is read
    bounded, and only a Slurm job id is passed on."
  - "Where the cluster keeps no accounting (or it does not know each training job), the training job's figures
    are C(usage.json)'s (the run's start and end lines: its nodes, CPUs and GPUs x the time between them), and
    RV(ledger.source) says so."
  - Run by the collect step for the run's C(report.md) (its Resources used section); C(playbooks/status.yml) makes
    the same call for every run of the workspace at once (M(llmtrain.slurm.run_status)).
version_added: 0.2.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
options:
  run_dir:
    description: The run directory (C(<slurm_workspace>/<run_name>)).
    type: path
    required: true
  job_ids:
    description: Training job ids of the run the caller knows (the job it watches), besides those its files name.
    type: list
    elements: str
    default: []
  venv_dir:
    description: The venv the run's jobs use, whose C(.llmtrain-venv.json) names the job that made it.
    type: path
notes:
  - Supports check mode (it only reads).
"""

EXAMPLES = r"""
- name: What run tiny used
  llmtrain.slurm.run_ledger:
    run_dir: /shared/llmtrain/tiny
    venv_dir: /shared/llmtrain/venv
  register: used
"""

RETURN = r"""
ledger:
  description: What the run used.
  returned: always
  type: dict
  contains:
    source:
      description: >-
        Where the training job's figures come from: V(sacct) (Slurm's accounting), V(usage.json) (the run's start
        and end lines).
      type: str
    train:
      description:
        - "The training job: C(node_hours), C(cpu_hours) (null where unknown), C(gpu_hours) over C(count) starts;
          with V(sacct), C(starts): the newest 50, each C({job_id, state, start, seconds, nodes, cpus, gpus,
          node_hours, cpu_hours, gpu_hours}). Null when nothing is recorded."
      type: dict
    others:
      description: With accounting, the data, venv and samples jobs, each C({kind, job_id, starts, node_hours, cpu_hours, gpu_hours}).
      type: list
      elements: dict
    missing:
      description: The run's job ids that the accounting does not know.
      type: list
      elements: str
"""

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import ledger
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule


def used(slurm):
    """The run's ledger: one sacct call, else usage.json."""
    p = slurm.params
    if not os.path.isdir(p["run_dir"]):
        slurm.module.fail_json(msg="run_dir %s is not a directory" % p["run_dir"])
    kinds, complete = ledger.job_ids(p["run_dir"], p["job_ids"], p["venv_dir"])
    usage = run_files.usage_totals(run_files.read_usage(p["run_dir"]))
    return dict(changed=False, ledger=ledger.ledger(slurm.client.sacct_usage(list(kinds)), kinds, usage, complete))


def main():
    SlurmModule(
        dict(
            run_dir=dict(type="path", required=True),
            job_ids=dict(type="list", elements="str", default=[]),
            venv_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    ).run(used)


if __name__ == "__main__":
    main()
