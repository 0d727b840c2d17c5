#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_cluster_wait
short_description: Wait until every node of the local cluster is up, resuming those that registered unusable
description:
  - The last step of the local_cluster role's bring-up. It asks C(sinfo) once a second until every node
    of O(nodes) has registered with C(slurmctld) in O(partition), in any state; a node that registered
    drained, draining, down or invalid (a GRES change, a C(slurmd) killed earlier) is resumed once
    (C(scontrol update State=RESUME)); then it waits until every node is in a state that runs jobs
    (idle, mixed, allocated, completing, reserved, planned); on a test cluster, present means every node
    usable.
  - A node that is not up within O(timeout) seconds fails the task, naming each such node, what C(sinfo)
    said and the last lines of its C(slurmd) log (O(log_dir)), each bounded.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  nodes:
    description: The names of the nodes that must be up.
    type: list
    elements: str
    required: true
  partition:
    description: The partition they are in.
    type: str
    required: true
  timeout:
    description: Seconds to wait in all (C(local_cluster_node_timeout)).
    type: int
    default: 90
  log_dir:
    description: The directory of the nodes' logs, C(slurmd-<node>.log).
    type: path
    required: true
  environment:
    description: The environment of C(sinfo) and C(scontrol) (C(SLURM_CONF), a release's commands first on C(PATH)).
    type: dict
    default: {}
notes:
  - In check mode nothing is resumed; it still waits.
"""

EXAMPLES = r"""
- name: Wait for every node
  llmtrain.slurm.local_cluster_wait:
    nodes: [slurm-worker-0, slurm-worker-1]
    partition: debug
    log_dir: /var/lib/llmtrain-local-cluster/log
    environment: {SLURM_CONF: /var/lib/llmtrain-local-cluster/etc/slurm.conf}
"""

RETURN = r"""
resumed:
  description: The nodes resumed (they had registered drained, down or invalid).
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import UP_STATES, daemon


UNUSABLE_STATES = ("drained", "draining", "down", "inval")
# what a failure shows: of sinfo's answer, and of each node's log
SHOWN_CHARS = 4000
LOG_LINES = 15


class Nodes(object):
    """sinfo's view of the partition's nodes, asked again on each look."""

    def __init__(self, module):
        self.module, self.p = module, module.params
        self.env = {k: str(v) for k, v in self.p["environment"].items()}
        self.said = ""

    def states(self):
        """{node: its state}, from one sinfo call ({} when sinfo fails)."""
        rc, out, err = self.module.run_command(["sinfo", "--noheader", "--Node", "--partition", self.p["partition"],
                                                "--format", "%N %T"], environ_update=self.env)
        self.said = (out + err).strip()
        if rc != 0:
            return {}
        # a state with a flag (idle*: not responding) is none of those waited for
        return {words[0]: words[1] for words in (line.split() for line in out.splitlines()) if len(words) == 2}

    def wait(self, deadline, wanted):
        """Look once a second until every node's state is one of wanted (None: any); the last states."""
        while True:
            states = self.states()
            if all(node in states and (wanted is None or states[node] in wanted) for node in self.p["nodes"]):
                return states
            if time.monotonic() >= deadline:
                return states
            time.sleep(1)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nodes=dict(type="list", elements="str", required=True),
            partition=dict(type="str", required=True),
            timeout=dict(type="int", default=90),
            log_dir=dict(type="path", required=True),
            environment=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    nodes = Nodes(module)
    deadline = time.monotonic() + p["timeout"]
    states = nodes.wait(deadline, None)
    resumed = sorted(node for node in p["nodes"] if states.get(node) in UNUSABLE_STATES)
    if resumed and not module.check_mode:
        rc, out, err = module.run_command(["scontrol", "update", "NodeName=" + ",".join(resumed), "State=RESUME"],
                                          environ_update=nodes.env)
        if rc != 0:
            module.fail_json(msg="local_cluster: scontrol could not resume %s: %s" % (", ".join(resumed), (out + err).strip()[:SHOWN_CHARS]))
    states = nodes.wait(deadline, UP_STATES)
    not_up = [node for node in p["nodes"] if states.get(node) not in UP_STATES]
    if not_up:
        logs = ["--- last lines of %s/slurmd-%s.log:\n%s" % (p["log_dir"], node,
                                                             daemon.tail("%s/slurmd-%s.log" % (p["log_dir"], node), LOG_LINES)
                                                             or "(no log)") for node in not_up]
        module.fail_json(msg="local_cluster: %s did not reach idle within %ds (local_cluster_node_timeout).\nsinfo said: %s\n%s"
                         % (", ".join(not_up), p["timeout"], nodes.said[-SHOWN_CHARS:], "\n".join(logs)), resumed=resumed)
    module.exit_json(changed=bool(resumed) and not module.check_mode, resumed=resumed)


if __name__ == "__main__":
    main()
