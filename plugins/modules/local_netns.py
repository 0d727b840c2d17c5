#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_netns
short_description: Test hosts in network namespaces joined by a bridge
description:
  - Makes a Linux bridge on this machine and one named network namespace per test host,
    each with a veth pair whose namespace end (O(interface)) carries the host's address.
  - Used by the C(local_cluster) role to give every local Slurm node its own address,
    C(eth0) and network stack. Traffic stays between these namespaces and the bridge.
  - Idempotent; reports a change only when something was created, fixed or removed.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  bridge:
    description: Name of the bridge on the host (at most 15 characters).
    type: str
    required: true
  address:
    description: Address of the bridge, in CIDR form; the hosts reach this machine there.
    type: str
    required: true
  interface:
    description: Name of the veth end inside each namespace.
    type: str
    default: eth0
  nodes:
    description: The test hosts.
    type: list
    elements: dict
    default: []
    suboptions:
      namespace:
        description: Network namespace name (C(ip netns)).
        type: str
        required: true
      veth:
        description: Host-side veth name (at most 15 characters).
        type: str
        required: true
      address:
        description: Address inside the namespace, in CIDR form.
        type: str
        required: true
  prune_prefix:
    description:
      - Namespaces whose names start with this prefix and are not in O(nodes) are
        removed, so that shrinking the node list removes the hosts that went away.
    type: str
  bridge_made:
    description:
      - With O(state=absent), whether the bridge was made for these hosts (RV(bridge_created) of
        the V(present) run that made it). V(false) leaves a bridge that was there before, taking
        only O(address) off it.
    type: bool
    default: true
  state:
    description: V(present) creates and repairs; V(absent) removes the namespaces and the bridge.
    type: str
    choices: [present, absent]
    default: present
notes:
  - Needs root (CAP_NET_ADMIN) and the C(ip) command from iproute2.
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Three test hosts on 10.213.0.0/24
  llmtrain.slurm.local_netns:
    bridge: llmtbr0
    address: 10.213.0.1/24
    prune_prefix: llmt-
    nodes:
      - {namespace: llmt-slurm-worker-0, veth: llmtv0, address: 10.213.0.10/24}
      - {namespace: llmt-slurm-worker-1, veth: llmtv1, address: 10.213.0.11/24}
      - {namespace: llmt-slurm-worker-2, veth: llmtv2, address: 10.213.0.12/24}
"""

RETURN = r"""
bridge_created:
  description: Whether this task made the bridge (with O(state=present)); keep it for O(bridge_made).
  returned: always
  type: bool
commands:
  description: The argument vectors that were run (or would run in check mode).
  returned: always
  type: list
  elements: list
ended_pids:
  description: Processes that still ran inside a removed namespace and were ended.
  returned: always
  type: list
  elements: int
namespaces:
  description: Namespaces that exist after the task.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import daemon, netns
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted


class Runner:
    def __init__(self, module):
        self.module = module
        self.ip = module.get_bin_path("ip", required=True)
        self.ended = []

    def query(self, *args):
        rc, out, err = self.module.run_command([self.ip] + list(args))
        if rc != 0:
            self.module.fail_json(msg="ip %s failed (rc %d): %s" % (" ".join(args), rc, err.strip()))
        return out

    def end_processes(self, namespace):
        """End what still runs in a namespace before it goes: processes the test hosts
        started there (job steps outliving their slurmd), found by namespace, not name."""
        pids = [int(pid) for pid in self.query("netns", "pids", namespace).split() if untrusted.digits(pid)]
        for pid in pids:
            daemon.stop(pid, timeout=5.0)
        return pids

    def apply(self, argv):
        if argv[1:3] == ["netns", "del"]:
            self.ended.extend(self.end_processes(argv[3]))
        rc, out, err = self.module.run_command([self.ip] + argv[1:])
        if rc != 0:
            hint = ""
            if "Operation not permitted" in err or "Permission denied" in err:
                hint = (" Network namespaces need root with CAP_NET_ADMIN and a kernel that"
                        " allows them; run the play as root on a machine (or container"
                        " started with --privileged) that permits `ip netns add`.")
            self.module.fail_json(msg="%s failed (rc %d): %s.%s" % (" ".join(argv), rc, err.strip(), hint))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            bridge=dict(type="str", required=True),
            address=dict(type="str", required=True),
            interface=dict(type="str", default="eth0"),
            nodes=dict(type="list", elements="dict", default=[], options=dict(
                namespace=dict(type="str", required=True),
                veth=dict(type="str", required=True),
                address=dict(type="str", required=True),
            )),
            prune_prefix=dict(type="str"),
            bridge_made=dict(type="bool", default=True),
            state=dict(type="str", default="present", choices=["present", "absent"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for ifname in [p["bridge"]] + [n["veth"] for n in p["nodes"]]:
        if len(ifname) > 15:
            module.fail_json(msg="interface name %r is longer than Linux's 15 characters" % ifname)

    runner = Runner(module)
    namespaces = netns.parse_netns_list(runner.query("netns", "list"))
    links = netns.parse_links(runner.query("-j", "link", "show"))
    wanted = set(n["namespace"] for n in p["nodes"])
    prefix = p["prune_prefix"]

    steps = []
    if p["state"] == "present":
        addresses = netns.parse_addresses(runner.query("-j", "addr", "show"))
        steps += netns.plan_bridge(p["bridge"], p["address"], links, addresses)
        for ns in namespaces:
            if prefix and ns.startswith(prefix) and ns not in wanted:
                steps.append(["ip", "netns", "del", ns])
        for node in p["nodes"]:
            inside_links, inside_addresses = {}, {}
            if node["namespace"] in namespaces:
                inside_links = netns.parse_links(runner.query("-n", node["namespace"], "-j", "link", "show"))
                inside_addresses = netns.parse_addresses(runner.query("-n", node["namespace"], "-j", "addr", "show"))
            steps += netns.plan_node(node, p["bridge"], p["interface"], namespaces, links,
                                     inside_links, inside_addresses)
    else:
        for node in p["nodes"]:
            steps += netns.plan_remove_node(node["namespace"], node["veth"], namespaces, links)
        for ns in namespaces:
            if prefix and ns.startswith(prefix) and ns not in wanted:
                steps.append(["ip", "netns", "del", ns])
        addresses = netns.parse_addresses(runner.query("-j", "addr", "show")) if p["bridge"] in links else {}
        steps += netns.plan_remove_bridge(p["bridge"], p["address"], links, addresses, p["bridge_made"])

    if not module.check_mode:
        for argv in steps:
            runner.apply(argv)
        namespaces = netns.parse_netns_list(runner.query("netns", "list"))
    module.exit_json(changed=bool(steps), commands=steps, namespaces=namespaces, ended_pids=runner.ended,
                     bridge_created=p["state"] == "present" and p["bridge"] not in links)


if __name__ == "__main__":
    main()
