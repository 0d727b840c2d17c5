# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test hosts on one machine: a bridge on the host and one network namespace per host,
each joined to the bridge by a veth pair. Parsing is pure; `Plan` turns what `ip`
reports into the argv lists that bring it to what is wanted."""

from __future__ import annotations

import json


def parse_netns_list(text):
    """Names from `ip netns list` (lines like 'name (id: 3)' or 'name')."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def parse_links(text):
    """`ip -j link show` -> {ifname: {'master': ..., 'up': bool, 'kind': ...}}."""
    links = {}
    for link in json.loads(text or "[]"):
        links[link["ifname"]] = dict(
            master=link.get("master"),
            up="UP" in link.get("flags", []),
        )
    return links


def parse_addresses(text):
    """`ip -j addr show` -> {ifname: ['10.0.0.1/24', ...]} (IPv4 only)."""
    addresses = {}
    for link in json.loads(text or "[]"):
        addresses[link["ifname"]] = [
            "%s/%s" % (info["local"], info["prefixlen"])
            for info in link.get("addr_info", []) if info.get("family") == "inet"
        ]
    return addresses


def plan_bridge(bridge, address, links, addresses):
    """argv lists that make `bridge` exist, be up and carry `address`."""
    steps = []
    if bridge not in links:
        steps.append(["ip", "link", "add", "name", bridge, "type", "bridge"])
    if address not in addresses.get(bridge, []):
        steps.append(["ip", "addr", "add", address, "dev", bridge])
    if not links.get(bridge, {}).get("up"):
        steps.append(["ip", "link", "set", bridge, "up"])
    return steps


def plan_remove_bridge(bridge, address, links, addresses, made):
    """argv lists that undo plan_bridge: the bridge goes when it was made for the hosts (made);
    a bridge that was there before keeps everything but the address given to it."""
    if bridge not in links:
        return []
    if made:
        return [["ip", "link", "del", bridge]]
    if address in addresses.get(bridge, []):
        return [["ip", "addr", "del", address, "dev", bridge]]
    return []


def plan_node(node, bridge, interface, namespaces, links, ns_links, ns_addresses):
    """argv lists that make one host's namespace, veth pair and address right.

    node: dict(namespace, veth, address). ns_links/ns_addresses: what `ip -n NS`
    reports inside the namespace (empty when it does not exist yet).
    """
    ns, veth, address = node["namespace"], node["veth"], node["address"]
    steps = []
    if ns not in namespaces:
        steps.append(["ip", "netns", "add", ns])
    if veth not in links or interface not in ns_links:
        if veth in links:
            steps.append(["ip", "link", "del", veth])
        steps.append(["ip", "link", "add", veth, "type", "veth", "peer", "name", interface,
                      "netns", ns])
        ns_links, ns_addresses = {}, {}
        links = dict(links)
        links[veth] = dict(master=None, up=False)
    if links[veth].get("master") != bridge:
        steps.append(["ip", "link", "set", veth, "master", bridge])
    if not links[veth].get("up"):
        steps.append(["ip", "link", "set", veth, "up"])
    if address not in ns_addresses.get(interface, []):
        steps.append(["ip", "-n", ns, "addr", "add", address, "dev", interface])
    if not ns_links.get(interface, {}).get("up"):
        steps.append(["ip", "-n", ns, "link", "set", interface, "up"])
    if not ns_links.get("lo", {}).get("up"):
        steps.append(["ip", "-n", ns, "link", "set", "lo", "up"])
    return steps


def plan_remove_node(namespace, veth, namespaces, links):
    """argv lists that remove one host; deleting the namespace removes its veth end."""
    steps = []
    if veth in links:
        steps.append(["ip", "link", "del", veth])
    if namespace in namespaces:
        steps.append(["ip", "netns", "del", namespace])
    return steps
