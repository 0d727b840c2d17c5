#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_cluster
short_description: Ask Slurm what it has for the run and refuse what it cannot give, before any job
description:
  - The preflight role's look at the cluster, in one task. One call of M(llmtrain.slurm.slurm_cluster_info) reads
    the partitions and nodes, the nodes the run's node checks found bad (C(bad_nodes.json)), and, where the run
    names them, the reservation, this user's associations (C(slurm_account), C(slurm_qos)) and the container
    runtime (C(slurm_container_runtime)). Nothing is allocated; the nodes are checked by each job itself.
  - The run's partition is C(slurm_partition), or Slurm's default one. Its usable nodes are those that can run a
    step now, busy ones included (they free up), less the excluded ones (C(slurm_exclude_nodes) and the bad nodes).
  - The task fails, every message naming the variable and the fix, when the partition does not exist or is not up,
    has fewer usable nodes than C(slurm_nodes) (the excluded ones named with why), or fewer with
    C(slurm_gpus_per_node) GPUs, or when what the site requires of a job (constraint, GPU type, reservation,
    account and QoS, sbatch options of a later release) does not hold.
  - What the jobs will wait for (a reservation that starts later) and what could not be checked are the task's
    warnings.
  - Otherwise it writes C(<run>/preflight.json) for the report (time, partition, Slurm's release, C(run_gpu_policy),
    usable, busy and excluded nodes); not in check mode.
  - Reads the run's variables from the play; it takes no options, and the module itself refuses to run.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options: {}
"""

EXAMPLES = r"""
- name: Ask Slurm for its partitions and nodes, and check what the run needs of them
  llmtrain.slurm.preflight_cluster:
"""

RETURN = r"""
partition:
  description: The run's partition; null when Slurm has none of that name.
  returned: always
  type: str
  sample: gpu
usable_nodes:
  description: The partition's usable nodes (busy ones included), less the excluded ones.
  returned: always
  type: list
  elements: str
excluded_nodes:
  description: The nodes the run keeps off, each with why (what its node check found, or C(named in slurm_exclude_nodes)).
  returned: always
  type: dict
notes:
  description: What the jobs will wait for, or what could not be checked (also the task's warnings).
  returned: always
  type: list
  elements: str
errors:
  description: What keeps the run off the cluster, one message each (the task fails).
  returned: when failed
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.fail_json(msg="llmtrain.slurm.preflight_cluster runs in its action plugin, on the controller: run it as a "
                         "task's action llmtrain.slurm.preflight_cluster in a play of the run's roles")


if __name__ == "__main__":
    main()
