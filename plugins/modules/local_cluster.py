#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_cluster
short_description: Bring the local test cluster up as the local_cluster role's variables make it, or take it down
description:
  - The local_cluster role in one task. It reads the role's C(local_cluster_*) variables from the play (their table is
    the role's argument specs, docs/roles/local_cluster.md) and takes no options.
  - With C(local_cluster_state=present), a cluster that is up as these variables make it (M(llmtrain.slurm.local_cluster_up) -
    the record of its last bring-up, its daemons, namespaces, the C(/etc/slurm) link, every node up) ends the task at once,
    unchanged.
  - Otherwise every C(local_cluster_*) variable must be one of the role's and well-formed, and the task run as root; each
    wrong value is named with the fix, before anything changes. Then the cluster comes up - the packages that are missing,
    its directories, munge's key, C(slurm.conf), C(gres.conf) and C(cgroup.conf), the node names in C(/etc/hosts), the
    C(/etc/slurm/slurm.conf) link (C(local_cluster_link_system_config)), a network namespace per node
    (M(llmtrain.slurm.local_netns)), C(munged), a release's root and its client commands (C(local_cluster_release),
    M(llmtrain.slurm.local_release_root)), the accounting database (C(local_cluster_accounting),
    M(llmtrain.slurm.local_cluster_accounts)), C(slurmctld) and one C(slurmd) per node (M(llmtrain.slurm.pidfile_daemon),
    restarted when the configuration changed) - and it waits until every node is up (M(llmtrain.slurm.local_cluster_wait)).
    A cluster of another release is taken down first, its controller state removed.
  - With C(local_cluster_state=absent), every job is cancelled, every daemon the role started stopped, the release's root
    unmounted, and the namespaces, node names and links it made removed; a bridge or C(/etc/slurm) link of the machine's
    own stays.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options: {}
notes:
  - In check mode it says whether the cluster is up as configured and changes nothing.
  - The module itself refuses to run; the work is its action plugin's, each step one module call on the target.
"""

EXAMPLES = r"""
- name: Bring the local cluster up as configured, or take it down (local_cluster_state)
  llmtrain.slurm.local_cluster:
"""

RETURN = r"""
nodes:
  description: The cluster's nodes.
  returned: always
  type: list
  elements: str
  sample: [slurm-worker-0, slurm-worker-1, slurm-worker-2]
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.fail_json(msg="llmtrain.slurm.local_cluster runs in its action plugin, on the controller: run it as a task's "
                         "action llmtrain.slurm.local_cluster in a play with the local_cluster role's variables")


if __name__ == "__main__":
    main()
