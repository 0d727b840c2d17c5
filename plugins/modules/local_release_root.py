#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_release_root
short_description: A Slurm release's minimal Debian root for the local test cluster
description:
  - Makes the root directory from which the C(local_cluster) role runs another Slurm release
    than this machine's own. A minimal Debian root of O(suite) (C(debootstrap --variant=minbase))
    with O(packages) installed is built once into O(cache) and kept there; it is built again
    when what it is built from changes or when it is older than O(max_age_days).
  - A release whose suite now packages another Slurm series is refused, naming what the suite
    has.
  - With O(state=present) the cluster gets its own view of that root at O(path), an overlay
    whose changes stay below O(state_dir), so that the cache is never written and several
    clusters can use it at once. In it are mounted C(/proc), this machine's C(/dev), C(/sys),
    C(/etc/hosts), and at their own paths O(cluster_dir), O(shared_paths) and
    O(readonly_paths). Daemons and jobs started from O(path) see only these of the machine's
    files.
  - With O(state=absent) everything mounted at O(path) or below it is unmounted and the
    overlay's directories are removed; the cache stays.
  - Needs root, C(debootstrap) and a reachable Debian mirror (only to build).
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  release:
    description:
      - The Slurm series the root must hold, digits 0-9, a dot and digits 0-9, such as V(24.11); it names the
        root's directory in O(cache). Required unless O(state=absent).
    type: str
  suite:
    description: The Debian suite or codename that packages it (a-z, 0-9 and -), such as V(trixie). Required unless O(state=absent).
    type: str
  mirror:
    description: The Debian mirror debootstrap and apt fetch from.
    type: str
    default: http://deb.debian.org/debian
  packages:
    description: The packages installed in the root (C(slurm-client) among them).
    type: list
    elements: str
    default: [slurmctld, slurmd, slurm-client, munge]
  cache:
    description: The directory that keeps the built roots, one per release. Required unless O(state=absent).
    type: path
  max_age_days:
    description: A root older than this is built again with the suite's packages of the day; 0 keeps it.
    type: int
    default: 7
  path:
    description: Where the cluster's view of the root is mounted.
    type: path
  state_dir:
    description: Where the overlay keeps what the cluster writes in its root.
    type: path
  cluster_dir:
    description: The cluster's own directory, mounted at its own path.
    type: path
  shared_paths:
    description: Directories mounted writable at their own paths (a workspace, a venv); made when missing.
    type: list
    elements: path
    default: []
  readonly_paths:
    description: Directories mounted read-only at their own paths (the interpreter a venv was made from).
    type: list
    elements: path
    default: []
  state:
    description: V(present) builds the root when needed and mounts it; V(built) only builds it; V(absent) unmounts it.
    type: str
    choices: [present, built, absent]
    default: present
notes:
  - Does not support check mode.
"""

EXAMPLES = r"""
- name: Slurm 24.11 from Debian 13 for the cluster in /var/lib/lc
  llmtrain.slurm.local_release_root:
    release: "24.11"
    suite: trixie
    cache: /var/cache/llmtrain-local-cluster
    path: /var/lib/lc/root
    state_dir: /var/lib/lc/overlay
    cluster_dir: /var/lib/lc
    shared_paths: [/var/tmp/llmtrain-workspace]
"""

RETURN = r"""
slurm_version:
  description: The Slurm version in the root (its slurm-client package).
  returned: unless state is absent
  type: str
  sample: 24.11.5-4+deb13u1
built:
  description: Whether the root was built by this task, and why.
  returned: unless state is absent
  type: str
  sample: it was built from other inputs
marker:
  description: The file at the top of the root that says it is one (and which Slurm it holds), as a path from the root.
  returned: unless state is absent
  type: str
  sample: .llmtrain-release-root.json
remounted:
  description: Whether the view at O(path) was mounted (again) by this task; daemons started from it before must start again.
  returned: always
  type: bool
unmounted:
  description: The mount points removed (state absent, or before mounting a rebuilt root again).
  returned: always
  type: list
  elements: str
"""

import fcntl
import json
import os
import re
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import release_root
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable

DEBOOTSTRAP_SCRIPTS = "/usr/share/debootstrap/scripts"
# A Debian suite or codename, as the local_cluster role takes one: it is debootstrap's argument, run as
# root, and names a file of DEBOOTSTRAP_SCRIPTS, so nothing else (an option, '../x') may pass.
SUITE = re.compile(r"[a-z][a-z0-9-]{1,30}\Z")
POLICY_RC_D = "#!/bin/sh\n# llmtrain.slurm: packages never start daemons in this root\nexit 101\n"


class Root:
    def __init__(self, module):
        self.module = module
        self.p = module.params

    def run(self, argv, what, **kwargs):
        rc, out, err = self.module.run_command(argv, **kwargs)
        if rc != 0:
            self.module.fail_json(msg="local_release_root: %s failed (rc %d): %s"
                                  % (what, rc, (err or out).strip()[-3000:]), cmd=argv)
        return out

    def mounted(self):
        with open("/proc/self/mountinfo") as handle:
            return release_root.mount_points(handle.read())

    def unmount_all(self, top):
        gone = []
        for point in release_root.under(self.mounted(), top):
            rc, _out, _err = self.module.run_command(["umount", point])
            if rc != 0:  # busy: detach it now, the kernel frees it when its last user goes
                self.run(["umount", "--lazy", point], "unmounting %s" % point)
            gone.append(point)
        return gone

    def build(self):
        """The cached root of the release, built when it must be: (its record, why it was built or None)."""
        p = self.p
        cache = p["cache"]
        os.makedirs(cache, mode=0o755, exist_ok=True)
        final = os.path.join(cache, p["release"])
        wanted = release_root.inputs(p["release"], p["suite"], p["mirror"], p["packages"])
        with open(os.path.join(cache, ".%s.lock" % p["release"]), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time: clusters of the same release share it
            record = release_root.read_marker(final)
            why = release_root.stale(record, wanted, time.time(), p["max_age_days"])
            if why is None:
                return record, None
            work = "%s.build" % final
            shutil.rmtree(work, ignore_errors=True)
            argv = ["debootstrap", "--variant=minbase", p["suite"], work, p["mirror"]]
            if not os.path.exists(os.path.join(DEBOOTSTRAP_SCRIPTS, p["suite"])):
                # a suite newer than this machine's debootstrap (bookworm's knows no forky) is
                # made the way its script for every suite since bullseye makes them: sid's
                argv.append(os.path.join(DEBOOTSTRAP_SCRIPTS, "sid"))
            self.run(argv, "debootstrap of Debian %s from %s" % (p["suite"], p["mirror"]))
            policy = os.path.join(work, "usr", "sbin", "policy-rc.d")
            with open(policy, "w") as handle:
                handle.write(POLICY_RC_D)
            os.chmod(policy, 0o755)
            env = dict(DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
            # a suite's Release file may have expired on the mirror (forky did): still its newest
            apt = ["chroot", work, "apt-get", "-q", "-o", "Acquire::Check-Valid-Until=false"]
            self.run(apt + ["update"], "apt-get update in the %s root" % p["suite"], environ_update=env)
            self.run(apt + ["install", "-y", "--no-install-recommends"] + wanted["packages"],
                     "installing %s in the %s root" % (", ".join(wanted["packages"]), p["suite"]), environ_update=env)
            version = self.run(["chroot", work, "dpkg-query", "-W", "-f=${Version}", "slurm-client"],
                               "reading the root's Slurm version").strip()
            if release_root.series(version) != p["release"]:
                shutil.rmtree(work, ignore_errors=True)
                self.module.fail_json(
                    msg="local_cluster_release %s: Debian %s now packages Slurm %s, not %s. Set "
                        "local_cluster_release_suites to a suite that packages %s, or local_cluster_release to %s."
                        % (p["release"], p["suite"], version, p["release"], p["release"],
                           release_root.series(version) or "system"))
            self.run(["chroot", work, "apt-get", "clean"], "apt-get clean in the %s root" % p["suite"])
            record = dict(inputs=wanted, slurm_version=version, built=time.time())
            with open(os.path.join(work, release_root.MARKER), "w") as handle:
                json.dump(record, handle)
            if os.path.lexists(final):
                old = "%s.old" % final
                shutil.rmtree(old, ignore_errors=True)
                os.rename(final, old)
                os.rename(work, final)
                shutil.rmtree(old, ignore_errors=True)  # an overlay still on it keeps what it opened
            else:
                os.rename(work, final)
            return record, why

    def overlay_options(self, lower):
        upper = os.path.join(self.p["state_dir"], "upper")
        work = os.path.join(self.p["state_dir"], "work")
        return "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, upper, work)

    def mount(self, lower, rebuilt):
        p = self.p
        path = p["path"]
        unmounted = []
        points = self.mounted()
        if (rebuilt and path in points) or (path not in points and release_root.under(points, path)):
            unmounted = self.unmount_all(path)  # a rebuilt root, or what is left of an earlier view
            points = self.mounted()
        remounted = False
        if path not in points:
            shutil.rmtree(p["state_dir"], ignore_errors=True)  # what an earlier view wrote goes with it
            for directory in (path, os.path.join(p["state_dir"], "upper"), os.path.join(p["state_dir"], "work")):
                os.makedirs(directory, mode=0o755, exist_ok=True)
            if any(c in lower + p["state_dir"] for c in ",:\\"):
                self.module.fail_json(msg="local_release_root: %s and %s must not hold ',', ':' or '\\' "
                                          "(overlay options)" % (lower, p["state_dir"]))
            self.run(["mount", "-t", "overlay", "overlay", "-o", self.overlay_options(lower), path],
                     "mounting the overlay of %s at %s" % (lower, path))
            remounted = True
            points = self.mounted()
        for kind, source, target, readonly in release_root.binds(path, p["cluster_dir"], p["shared_paths"],
                                                                 p["readonly_paths"]):
            if target in points:
                continue
            if kind == "bind" and not os.path.exists(source):
                os.makedirs(source, mode=0o755)
            if kind == "bind" and os.path.isfile(source):
                if not os.path.lexists(target):
                    open(target, "a").close()
            else:
                os.makedirs(target, mode=0o755, exist_ok=True)
            if kind == "proc":
                self.run(["mount", "-t", "proc", "proc", target], "mounting /proc in the root")
            elif kind == "rbind":
                self.run(["mount", "--rbind", source, target], "mounting %s in the root" % source)
                self.run(["mount", "--make-rslave", target], "making %s a follower" % target)
            else:
                self.run(["mount", "--bind", source, target], "mounting %s in the root" % source)
                if readonly:
                    self.run(["mount", "-o", "remount,bind,ro", target], "making %s read-only" % target)
            remounted = True
        return remounted, unmounted


def main():
    module = AnsibleModule(
        argument_spec=dict(
            release=dict(type="str"),
            suite=dict(type="str"),
            mirror=dict(type="str", default="http://deb.debian.org/debian"),
            packages=dict(type="list", elements="str", default=["slurmctld", "slurmd", "slurm-client", "munge"]),
            cache=dict(type="path"),
            max_age_days=dict(type="int", default=7),
            path=dict(type="path"),
            state_dir=dict(type="path"),
            cluster_dir=dict(type="path"),
            shared_paths=dict(type="list", elements="path", default=[]),
            readonly_paths=dict(type="list", elements="path", default=[]),
            state=dict(type="str", default="present", choices=["present", "built", "absent"]),
        ),
        required_if=[("state", "present", ["release", "suite", "cache", "path", "state_dir", "cluster_dir"]),
                     ("state", "built", ["release", "suite", "cache"]),
                     ("state", "absent", ["path", "state_dir"])],
        supports_check_mode=False,
    )
    p = module.params
    bad_release = p["release"] is not None and release_root.release_error(p["release"])
    if bad_release:  # before any path is made of it
        module.fail_json(msg="local_release_root: %s" % bad_release)
    if p["suite"] is not None and not SUITE.match(p["suite"]):  # before debootstrap is given it
        module.fail_json(msg="local_release_root: suite=%s must be a Debian suite or codename: a letter a-z, then 1 "
                             "to 30 of a-z, 0-9 and -, such as trixie" % printable(p["suite"]))
    root = Root(module)
    if p["state"] == "absent":
        gone = root.unmount_all(p["path"])
        left = release_root.under(root.mounted(), p["path"])
        if left:  # never remove a directory through a mount still there (a workspace)
            module.fail_json(msg="local_release_root: still mounted after unmounting: %s" % ", ".join(left))
        shutil.rmtree(p["state_dir"], ignore_errors=True)
        try:
            os.rmdir(p["path"])  # only the empty mount point
        except OSError:
            pass
        module.exit_json(changed=bool(gone), unmounted=gone, remounted=False)
    record, why = root.build()
    result = dict(slurm_version=record.get("slurm_version"), built=why, remounted=False, unmounted=[],
                  marker=release_root.MARKER)
    if p["state"] == "present":
        remounted, unmounted = root.mount(os.path.join(p["cache"], p["release"]), why is not None)
        result.update(remounted=remounted, unmounted=unmounted)
    module.exit_json(changed=bool(why or result["remounted"] or result["unmounted"]), **result)


if __name__ == "__main__":
    main()
