# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The physical speed of the links a job's collectives go through, as the node reports it.

Ethernet: /sys/class/net/<if>/speed (Mb/s; -1 or unreadable for links with no speed, such
as veths). InfiniBand: /sys/class/infiniband/<hca>/ports/<port>/rate ("400 Gb/sec (4X NDR)"),
summed over the active ports of the HCAs NCCL will use (NCCL_IB_HCA). NVLink (inside a node):
`nvidia-smi nvlink -s` ("Link 0: 26.562 GB/s"). Speeds are returned in Gb/s (bits).

This file imports nothing from Ansible (untrusted.py beside it alone): the run role copies it into the
run's scripts directory, where the network check imports it; unit tests call its parsers directly.
"""

from __future__ import annotations

import os
import re

from .untrusted import whole

# the numbers the driver and the kernel print, in ASCII digits and bounded (int() refuses thousands of them)
IB_RATE = re.compile(r"^\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*Gb/sec\b")
NVLINK_GPU = re.compile(r"^GPU\s+([0-9]{1,9}):")
NVLINK_LINK = re.compile(r"^\s*Link\s+[0-9]+:\s*([0-9]{1,9}(?:\.[0-9]{1,9})?)\s*GB/s", re.IGNORECASE)
# interfaces that carry no traffic between nodes (NCCL leaves lo and docker* out by default)
NOT_BETWEEN_NODES = ("lo", "docker", "virbr")


def ethernet_gbps(text):
    """/sys/class/net/<if>/speed ("25000", "-1", "") -> Gb/s, None when the link reports none (or no
    number in ASCII digits)."""
    mbps = whole((text or "").strip())
    return mbps / 1000.0 if mbps else None


def ib_rate_gbps(text):
    """/sys/class/infiniband/<hca>/ports/<port>/rate ("400 Gb/sec (4X NDR)") -> Gb/s, or None."""
    match = IB_RATE.match(text or "")
    return float(match.group(1)) if match and float(match.group(1)) > 0 else None


def nvlink_gbps(text):
    """`nvidia-smi nvlink -s` -> {gpu index: Gb/s summed over its active links} (inactive
    links print <inactive> and count nothing)."""
    speeds, gpu = {}, None
    for line in (text or "").splitlines():
        if line.startswith("GPU"):
            head = NVLINK_GPU.match(line)
            gpu = int(head.group(1)) if head else None  # a GPU without an index: its links are no one's
            if gpu is not None:
                speeds.setdefault(gpu, 0.0)
            continue
        link = NVLINK_LINK.match(line)
        if link and gpu is not None:
            speeds[gpu] += float(link.group(1)) * 8
    return speeds


def selected(names, spec, exact_by_default=False):
    """The names an NCCL-style list selects (NCCL_SOCKET_IFNAME, NCCL_IB_HCA): prefixes unless
    it starts with =, excluded when it starts with ^; an empty spec selects every name. Items
    may carry a port (mlx5_0:1), which is not part of the name."""
    spec = (spec or "").strip()
    if not spec:
        return list(names)
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = exact_by_default or spec.startswith("=")
    items = [item.split(":")[0] for item in spec.lstrip("=").split(",") if item]

    def hit(name):
        return any(name == item if exact else name.startswith(item) for item in items)

    return [name for name in names if hit(name) != exclude]


def ib_ports(spec):
    """NCCL_IB_HCA ("mlx5_0:1,mlx5_1") -> {hca: port or None}; exclusion lists name none."""
    spec = (spec or "").strip()
    if spec.startswith("^"):
        return {}
    ports = {}
    for item in spec.lstrip("=").split(","):
        if item:
            name, _sep, port = item.partition(":")
            ports[name] = port or None
    return ports


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):  # EINVAL for a veth's speed
        return ""


def infiniband(env, root="/"):
    """[dict(name, gbps)] of the active IB ports NCCL would use, per the env; [] without IB or
    with NCCL_IB_DISABLE=1."""
    if str(env.get("NCCL_IB_DISABLE", "0")).strip() == "1":
        return []
    base = os.path.join(root, "sys/class/infiniband")
    try:
        hcas = sorted(os.listdir(base))
    except OSError:
        return []
    spec = env.get("NCCL_IB_HCA", "")
    wanted_ports = ib_ports(spec)
    found = []
    for hca in selected(hcas, spec):
        try:
            ports = sorted(os.listdir(os.path.join(base, hca, "ports")))
        except OSError:
            continue
        for port in ports:
            if wanted_ports.get(hca) and wanted_ports[hca] != port:
                continue
            state = read(os.path.join(base, hca, "ports", port, "state"))
            if state and "ACTIVE" not in state:
                continue
            gbps = ib_rate_gbps(read(os.path.join(base, hca, "ports", port, "rate")))
            if gbps:
                found.append(dict(name="%s:%s" % (hca, port), gbps=gbps))
    return found


def sockets(env, backend, root="/", present=None):
    """[dict(name, gbps)] of the socket interfaces the backend uses per the env: Gloo's
    GLOO_SOCKET_IFNAME (exact names), NCCL's NCCL_SOCKET_IFNAME (prefixes); without either,
    every interface that can reach another node. gbps is None where the link reports none."""
    base = os.path.join(root, "sys/class/net")
    if present is None:
        try:
            present = sorted(os.listdir(base))
        except OSError:
            present = []
    candidates = [name for name in present if not name.startswith(NOT_BETWEEN_NODES)]
    if backend == "gloo" and env.get("GLOO_SOCKET_IFNAME"):
        names = selected(present, env["GLOO_SOCKET_IFNAME"], exact_by_default=True)
    elif env.get("NCCL_SOCKET_IFNAME"):
        names = selected(candidates, env["NCCL_SOCKET_IFNAME"])
    else:
        names = candidates
    return [dict(name=name, gbps=ethernet_gbps(read(os.path.join(base, name, "speed")))) for name in names]


def node_links(env, backend, root="/"):
    """What bounds this node's traffic to other nodes: dict(kind, interfaces [names], gbps) -
    InfiniBand (summed over ports) where NCCL will use it, else the socket interfaces (summed;
    None when any of them reports no speed)."""
    if backend == "nccl":
        ports = infiniband(env, root)
        if ports:
            return dict(kind="ib", interfaces=[p["name"] for p in ports], gbps=sum(p["gbps"] for p in ports))
    links = sockets(env, backend, root)
    speeds = [link["gbps"] for link in links]
    return dict(kind="socket", interfaces=[link["name"] for link in links],
                gbps=sum(speeds) if speeds and None not in speeds else None)
