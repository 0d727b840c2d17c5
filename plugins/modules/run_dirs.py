#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_dirs
short_description: Check, create and fill the run directory on the cluster, refusing one that others control
description:
  - Every stage runs it before it writes or submits anything. In one call of M(llmtrain.slurm.secure_dir) it
    makes C(run_dir) with C(env/) (mode C(0700), as the secrets are sourced from it), C(scripts/),
    C(scripts/trainer/), C(scripts/llmtrain_node/), C(data/), C(checkpoints/), C(logs/) and, with
    C(run_source_dir), C(src/).
  - The job puts C(scripts/) first on E(PYTHONPATH) and sources C(env/) on every start, so a run directory,
    C(env/) or C(scripts/) that is already there must belong to you and be writable by no one else, and
    nobody else may be able to replace a directory above it; otherwise the task fails naming the
    directory and the fix, before anything is written there.
  - In the same call it writes, only where they differ, the node and network checks that open every job
    (C(scripts/node_check.sh), C(network_check.sh), C(bad_nodes.sh), C(exit_codes.sh)), the
    C(llmtrain_node) package they run (the collection's C(module_utils.node)) and their settings,
    C(scripts/node_check.conf) (C(slurm_python), C(slurm_node_check_timeout), C(run_bad_node_policy),
    C(run_requeue_max), C(run_gpu_policy), C(run_gpu_diag) and the run's container, each value quoted),
    and the reference trainer (C(scripts/trainer/)), whose modules the training of the reference trainer
    and every run's samples, export and batch jobs run.
  - The first task of an ansible-playbook run does the work and records it in the host's facts; later
    ones with the same run directory and settings call no module. A separate ansible-playbook run checks
    it all again.
  - Reads the run's variables from the play; it takes no options, and the module itself refuses to run.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options: {}
"""

EXAMPLES = r"""
- name: Check, create and fill the run directory
  llmtrain.slurm.run_dirs:
"""

RETURN = r"""
path:
  description: The run directory.
  returned: always
  type: str
  sample: /shared/runs/tiny
created:
  description: The directories made, parents first (M(llmtrain.slurm.secure_dir)).
  returned: when this task made and checked the run directory
  type: list
  elements: str
written:
  description: The names of the files written (in check mode, that would be), because they were missing or differed.
  returned: when this task made and checked the run directory
  type: list
  elements: str
  sample: [scripts/node_check.conf]
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.fail_json(msg="llmtrain.slurm.run_dirs runs in its action plugin, on the controller: run it as a task's "
                         "action llmtrain.slurm.run_dirs in a play of the run's roles")


if __name__ == "__main__":
    main()
