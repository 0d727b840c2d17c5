#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: source_sync
short_description: Make room for a new deploy of your training code, leaving what your job wrote alone
description:
  - Your training script runs in the directory its code is deployed to, and scripts written the
    usual way write there too (nanoGPT's C(out/ckpt.pt), prepared C(data/), Hydra's C(outputs/)).
    This module removes from O(dest) only what an earlier deploy wrote (the files and directories
    the manifest O(manifest) lists) and is no longer in the source, never what O(keep) or the
    always-skipped names match, and never a file that changed since it was deployed (it is kept,
    with a warning). Directories are removed only when empty.
  - It makes the source's missing directories (under your umask with group and other write
    removed) and returns the files to copy (RV(to_copy), missing or with other content or mode)
    with the mode each gets - its own, less group and other write and what your umask removes.
    Only the source's files are looked at, so a directory that also holds a week of checkpoints
    costs what an empty one does.
  - Something of the job's in the way of the source (a directory where the source has a file, a
    file where it has a directory) fails the task, naming it; nothing of the job's is removed.
  - Copy RV(to_copy) with M(ansible.builtin.copy), then write RV(manifest) to O(manifest) with
    M(llmtrain.slurm.put_files), so that the next deploy knows what this one wrote.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  dest:
    description: The directory the source is deployed to (it exists).
    type: path
    required: true
  manifest:
    description: The manifest of the last deploy to O(dest) (JSON), read if it exists; none means that nothing is removed.
    type: path
    required: true
  files:
    description:
      - The source's files, as the P(llmtrain.slurm.source_tree#lookup) lookup lists them - each with
        C(path) (relative), C(mode) (octal text), C(checksum) (SHA-1) and C(size); other keys (C(src))
        are returned as they are.
    type: list
    elements: dict
    required: true
  dirs:
    description: The source's directories (relative).
    type: list
    elements: str
    default: []
  keep:
    description: Glob patterns of paths or names never removed (the source's excludes, such as C(data/*)).
    type: list
    elements: str
    default: []
  variable:
    description: The inventory variable the source comes from, named in the messages.
    type: str
    default: run_source_dir
notes:
  - Supports check mode (it says what it would remove, make and copy).
"""

EXAMPLES = r"""
- name: Make room for the new source
  llmtrain.slurm.source_sync:
    dest: /shared/me/runs/tiny/src
    manifest: /shared/me/runs/tiny/deployed.json
    files: "{{ run_source.files }}"
    dirs: "{{ run_source.dirs }}"
    keep: "{{ run_source_exclude }}"
  register: sync
"""

RETURN = r"""
to_copy:
  description: The files to copy, each as given in O(files) with C(mode) set to the mode it gets.
  returned: always
  type: list
  elements: dict
removed:
  description: The files an earlier deploy wrote that are no longer in the source (relative to O(dest)).
  returned: always
  type: list
  elements: str
removed_dirs:
  description: The directories of an earlier deploy removed because they were empty and no longer in the source.
  returned: always
  type: list
  elements: str
created:
  description: The source's directories made.
  returned: always
  type: list
  elements: str
kept:
  description: Deployed files no longer in the source that were left because they changed since (each also a warning).
  returned: always
  type: list
  elements: str
manifest:
  description: The manifest of this deploy, to write to O(manifest) once the files are copied.
  returned: always
  type: str
"""

import errno
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import source_sync, trusted_dirs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            manifest=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True),
            dirs=dict(type="list", elements="str", default=[]),
            keep=dict(type="list", elements="str", default=[]),
            variable=dict(type="str", default="run_source_dir"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    missing = [f.get("path") for f in p["files"] if not all(k in f for k in ("path", "mode", "checksum"))]
    if missing:
        module.fail_json(msg="files: each needs path, mode and checksum (the source_tree lookup's files): %r" % missing[0])
    dest = os.path.normpath(p["dest"])
    if not os.path.isdir(dest):
        module.fail_json(msg="dest %s is not a directory" % dest)
    umask = trusted_dirs.strict_umask()
    manifest, why = source_sync.read_manifest(p["manifest"])
    if why:
        module.fail_json(msg="%s: the record of what the last deploy wrote, which tells what a deploy may remove. "
                             "Remove it if you made it: the next deploy then removes nothing." % why)
    try:
        plan = source_sync.plan(dest, p["files"], p["dirs"], manifest, p["keep"], umask, os.geteuid(), p["variable"])
    except OSError as err:
        module.fail_json(msg="cannot read %s: %s" % (dest, err))
    result = dict(changed=bool(plan["to_remove"] or plan["to_rmdir"] or plan["new_dirs"] or plan["to_copy"]),
                  to_copy=plan["to_copy"], removed=plan["to_remove"], removed_dirs=[], created=plan["new_dirs"],
                  kept=plan["kept"], manifest=source_sync.manifest_text(dest, p["files"], p["dirs"]))
    if plan["problems"]:
        module.fail_json(msg="\n".join(plan["problems"]), **result)
    for why in plan["kept"]:
        module.warn(why)
    if module.check_mode:
        result["removed_dirs"] = plan["to_rmdir"]
        module.exit_json(**result)
    try:
        for path in plan["to_remove"]:
            os.unlink(os.path.join(dest, path))
        for path in plan["to_rmdir"]:
            try:
                os.rmdir(os.path.join(dest, path))
                result["removed_dirs"].append(path)
            except OSError as err:
                if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                    raise
        for path in plan["new_dirs"]:
            os.mkdir(os.path.join(dest, path), 0o777)
    except OSError as err:
        module.fail_json(msg="cannot change %s: %s" % (dest, err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
