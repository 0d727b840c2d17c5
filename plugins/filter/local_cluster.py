# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the local_cluster role.

  values | llmtrain.slurm.local_cluster_errors(uid, machine_cpus) -> [message]
  count | llmtrain.slurm.local_cluster_nodes(node_prefix, subnet_prefix, netns_prefix, cluster_dir, netns=false) -> [node]
"""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import local_cluster
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import int_or_none


def local_cluster_errors(values, uid, machine_cpus):
    return local_cluster.errors(dict(values), uid, machine_cpus)


def local_cluster_nodes(count, node_prefix, subnet_prefix, netns_prefix, cluster_dir, netns=False):
    """Node i: its name, address (subnet_prefix.(10 + i)), network namespace, host-side veth and
    slurmd's pid file; with netns, each as local_netns takes it (namespace, veth, address/24). A
    count that is no whole number makes none (the role's input check names it)."""
    nodes = []
    for i in range(max(int_or_none(count) or 0, 0)):
        name = "%s%d" % (node_prefix, i)
        node = {"name": name, "ip": "%s.%d" % (subnet_prefix, 10 + i), "namespace": netns_prefix + name,
                "veth": "%sv%d" % (netns_prefix.replace("-", ""), i), "pidfile": "%s/run/slurmd-%s.pid" % (cluster_dir, name)}
        nodes.append({"namespace": node["namespace"], "veth": node["veth"], "address": node["ip"] + "/24"} if netns else node)
    return nodes


class FilterModule(object):
    def filters(self):
        return {"local_cluster_errors": local_cluster_errors, "local_cluster_nodes": local_cluster_nodes}
