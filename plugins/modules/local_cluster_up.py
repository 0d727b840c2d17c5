#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_cluster_up
short_description: Tell whether the local cluster is up as the role's variables make it, in one call
description:
  - The local_cluster role's first look when it brings a cluster up. The cluster counts as up when
    the record the role wrote when it last brought it up (O(stamp_file)) holds O(stamp) (the digest of
    the role's variables and files), every daemon of O(daemons) and every node's C(slurmd) runs from its
    pid file, every node's network namespace exists, O(link) (when given) points where it should, and
    C(sinfo) shows every node of O(nodes) in a state that runs jobs.
  - Then the role has nothing to do and skips its 40 tasks; otherwise RV(why) says what differs and
    the role brings the cluster up as usual. Nothing is changed here.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  stamp_file:
    description: The record of the last bring-up, in the cluster's directory.
    type: path
    required: true
  stamp:
    description: The digest of what the cluster is made from now.
    type: str
    required: true
  daemons:
    description: The daemons that must run, each C(pidfile) and C(process_name).
    type: list
    elements: dict
    required: true
  link:
    description:
      - A link (C(path)) that must point at C(target), such as C(/etc/slurm/slurm.conf). A regular file
        there (the site's own, which the role leaves alone) is not looked at.
    type: dict
  nodes:
    description: The nodes that must be up in O(partition), each its C(name), C(namespace) and its C(slurmd)'s C(pidfile).
    type: list
    elements: dict
    required: true
  partition:
    description: The partition C(sinfo) lists.
    type: str
    required: true
  environment:
    description: The environment of C(sinfo) (C(SLURM_CONF), and C(PATH) for a release's commands).
    type: dict
    default: {}
notes:
  - Supports check mode (it changes nothing).
"""

EXAMPLES = r"""
- name: Look whether the cluster is up as configured
  llmtrain.slurm.local_cluster_up:
    stamp_file: /var/lib/llmtrain-local-cluster/up.json
    stamp: "{{ _local_cluster_stamp }}"
    daemons: [{pidfile: /var/lib/llmtrain-local-cluster/run/slurmctld.pid, process_name: slurmctld}]
    nodes: [{name: slurm-worker-0, namespace: llmt-slurm-worker-0, pidfile: /var/lib/llmtrain-local-cluster/run/slurmd-slurm-worker-0.pid}]
    partition: debug
  register: up
"""

RETURN = r"""
up:
  description: The cluster is up as configured.
  returned: always
  type: bool
why:
  description: What is not as the stamp says (empty when up).
  returned: always
  type: str
  sample: "slurmd (/var/lib/llmtrain-local-cluster/run/slurmd-slurm-worker-1.pid) does not run"
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import UP_STATES, daemon

# the most of the stamp file read
STAMP_MAX = 65536
# where `ip netns add` names a namespace
NETNS_DIR = "/run/netns"


def stamped(path):
    """The stamp the record at path holds, or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.loads(handle.read(STAMP_MAX)).get("stamp")
    except (OSError, ValueError, AttributeError):
        return None


def why_not_up(module, p):
    """What is not as the stamp says, or ''."""
    if stamped(p["stamp_file"]) != p["stamp"]:
        return "the cluster was brought up with other settings, or not by this role (%s)" % p["stamp_file"]
    for entry in p["daemons"]:
        if not daemon.running_pid(str(entry.get("pidfile")), entry.get("process_name")):
            return "%s (%s) does not run" % (entry.get("process_name"), entry.get("pidfile"))
    for node in p["nodes"]:
        if not daemon.running_pid(str(node.get("pidfile")), "slurmd"):
            return "the slurmd of %s (%s) does not run" % (node.get("name"), node.get("pidfile"))
        if not os.path.exists(os.path.join(NETNS_DIR, str(node.get("namespace")))):
            return "network namespace %s is missing" % node.get("namespace")
    link = p["link"]
    if link and (os.path.islink(link["path"]) or not os.path.lexists(link["path"])):
        # (a file of the site's own there is left alone by the role, and not looked at)
        try:
            if os.readlink(link["path"]) != link["target"]:
                return "%s does not point at %s" % (link["path"], link["target"])
        except OSError:
            return "%s is not a link to %s" % (link["path"], link["target"])
    rc, out, err = module.run_command(["sinfo", "--noheader", "--Node", "--partition", p["partition"], "--format", "%N %T"],
                                      environ_update={k: str(v) for k, v in p["environment"].items()})
    if rc != 0:
        return "sinfo failed: %s" % (err.strip()[:200] or rc)
    up = set(words[0] for words in (line.split() for line in out.splitlines())
             if len(words) == 2 and words[1] in UP_STATES)
    down = [str(node.get("name")) for node in p["nodes"] if node.get("name") not in up]
    return "node(s) not up: %s" % ", ".join(down) if down else ""


def main():
    module = AnsibleModule(
        argument_spec=dict(
            stamp_file=dict(type="path", required=True),
            stamp=dict(type="str", required=True),
            daemons=dict(type="list", elements="dict", required=True),
            link=dict(type="dict"),
            nodes=dict(type="list", elements="dict", required=True),
            partition=dict(type="str", required=True),
            environment=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    why = why_not_up(module, module.params)
    module.exit_json(changed=False, up=not why, why=why)


if __name__ == "__main__":
    main()
