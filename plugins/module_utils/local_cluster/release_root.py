# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Slurm release's minimal Debian root for the local cluster: what it records, which mounts
it needs, and what /proc/self/mountinfo says is mounted. No commands run here; the module
local_release_root runs them."""

from __future__ import annotations

import json
import os
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable

# The record a built root carries at its top: what it was built from (a change rebuilds it)
# and what it holds. Jobs and the client wrappers also find it there to know they run inside.
MARKER = ".llmtrain-release-root.json"
# Raised when what a root is built from or how changes, so that older roots are rebuilt.
FORMAT = 1
MARKER_MAX_BYTES = 64 * 1024
# A release the module takes: a Slurm series (24.11) in ASCII digits. It names the root's directory
# in the cache, which the module removes and builds again, so nothing else ('../x') may pass.
RELEASE = re.compile(r"[0-9]+[.][0-9]+\Z")


def release_error(release):
    """Why release is no Slurm series a root can be built for, or None."""
    if isinstance(release, str) and RELEASE.match(release):
        return None
    return ("release=%s must be a Slurm release: digits 0-9, a dot and digits 0-9, such as 24.11 "
            "(it names the release's root in the cache)" % printable(release))


def series(version):
    """'24.11' of '24.11.5-4+deb13u1'; None when the version does not start so."""
    match = re.match(r"([0-9]+)\.([0-9]+)(?:\.|$|-)", version or "")
    return "%d.%02d" % (int(match.group(1)), int(match.group(2))) if match else None


def inputs(release, suite, mirror, packages):
    """What a root is built from: a root built from anything else is built again."""
    return dict(format=FORMAT, release=release, suite=suite, mirror=mirror, packages=sorted(set(packages)))


def read_marker(root):
    """The root's record, or None when it has none or one that cannot be read."""
    try:
        with open(os.path.join(root, MARKER), "rb") as handle:
            data = handle.read(MARKER_MAX_BYTES + 1)
        if len(data) > MARKER_MAX_BYTES:
            return None
        record = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def stale(record, wanted, now, max_age_days):
    """Why a root with this record is built again, or None when it is kept."""
    if record is None:
        return "there is none"
    if record.get("inputs") != wanted:
        return "it was built from other inputs"
    built = record.get("built")
    if not isinstance(built, (int, float)):
        return "its record has no build time"
    if max_age_days and now - built > max_age_days * 86400:
        return "it is older than %s days" % max_age_days
    return None


def unescape(field):
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_points(mountinfo_text):
    """The mount points in /proc/self/mountinfo's text, in the order mounted."""
    points = []
    for line in mountinfo_text.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(unescape(fields[4]))
    return points


def under(points, top):
    """The mount points at top or below it, deepest first (the order to unmount them)."""
    top = top.rstrip("/") or "/"
    inside = [p for p in points if p == top or p.startswith(top + "/")]
    return sorted(set(inside), key=lambda p: (-p.count("/"), p))


def binds(root, cluster_dir, shared_paths, readonly_paths):
    """The mounts a root needs, in order, each (kind, source, target inside the root, read-only).

    kind: 'proc', 'rbind' (a tree with what is mounted below it), 'bind' (a directory or
    file). What jobs need is mounted at its own path: the cluster's directory (config, munge
    socket, spool, logs), the shared paths (the workspace, a venv) and the read-only ones
    (the interpreter a venv was made from).
    """
    def inside(path):
        return os.path.join(root, path.lstrip("/"))

    mounts = [("proc", "proc", inside("/proc"), False),
              ("rbind", "/dev", inside("/dev"), False),
              ("rbind", "/sys", inside("/sys"), False),
              ("bind", "/etc/hosts", inside("/etc/hosts"), False),
              ("bind", cluster_dir, inside(cluster_dir), False)]
    wanted = {}
    for paths, readonly in ((shared_paths, False), (readonly_paths, True)):
        for path in paths:
            path = os.path.normpath(path)
            if path != cluster_dir:
                wanted.setdefault(path, readonly)  # a shared path is writable, even if also read-only
    for path in sorted(wanted):  # a directory before the ones below it
        mounts.append(("bind", path, inside(path), wanted[path]))
    return mounts
