#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: secure_dir
short_description: Make a directory that only you can change, refusing one that others could replace
description:
  - For directories a Slurm job runs code from or sources secrets from, days after it was
    submitted (the run directory, its C(scripts/), C(src/) and C(env/)). Checks, before it makes
    anything, that nobody else can put their own code there.
  - Every directory from C(/) down to the parent of O(path), and every link on the way (which is
    followed), must belong to you or root and be writable by neither group nor others unless it
    has the sticky bit (as C(/tmp) has); otherwise its owner, or whoever can write it, could
    rename your directory and put their own in its place.
  - O(path) and O(subdirs) must be directories (not links) that you own and that neither group
    nor others can write.
  - What is missing is made (with its missing parents) under your umask with group and other
    write removed, so that a login shell's umask 002 never leaves a directory this module would
    then refuse, and a private umask such as 077 is kept. O(private) ones are made C(0700), and
    an existing one is narrowed to C(0700).
  - Fails, naming each directory, why, and the fix, before it makes anything.
  - Then it puts O(files) in those directories, as M(llmtrain.slurm.put_files) does, so that a stage
    checks, makes and fills the run directory with one module call.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  path:
    description:
      - The directory (absolute).
    type: path
    required: true
  subdirs:
    description:
      - Directories below O(path) (relative, such as C(scripts/trainer)), checked and made the same way.
    type: list
    elements: str
    default: []
  private:
    description:
      - Those of O(subdirs) that are for you alone (mode C(0700)), such as C(env).
    type: list
    elements: str
    default: []
  create:
    description:
      - Make what is missing. V(false) only checks; a missing directory is then no problem.
    type: bool
    default: true
  variable:
    description:
      - The inventory variable the path comes from, named in the messages.
    type: str
    default: slurm_workspace
  files:
    description:
      - "File name relative to O(path) -> the file's text, written as UTF-8, as M(llmtrain.slurm.put_files) takes
        them: small text files, such as the scripts a job runs first."
      - Each file goes directly into O(path) or into one of O(subdirs) (such as C(scripts/node_check.sh)), so
        only into directories this call has checked or made.
      - Written after the directories are checked and made, and never when one is refused; only those that
        are missing or differ in content or mode, each to a temporary file beside it that is renamed into
        place, so that a job that starts meanwhile reads the old file or the new one, never half of one.
      - Needs O(create=true).
    type: dict
    default: {}
  files_mode:
    description:
      - The mode of every file of O(files), as an octal string.
    type: str
    default: "0644"
notes:
  - Supports check mode (it checks, and says what it would make and write).
  - Root runs the same checks against uid 0.
"""

EXAMPLES = r"""
- name: Check and make the run directory
  llmtrain.slurm.secure_dir:
    path: /shared/me/runs/tiny
    subdirs: [env, scripts, scripts/trainer, data, checkpoints, logs]
    private: [env]

- name: Check and make the run directory, and put the node check in its scripts directory
  llmtrain.slurm.secure_dir:
    path: /shared/me/runs/tiny
    subdirs: [env, scripts]
    private: [env]
    files:
      scripts/node_check.sh: "{{ lookup('ansible.builtin.file', 'node_check.sh', rstrip=false) }}"
      scripts/node_check.conf: "timeout_s=120\n"

- name: Check where the venv goes, making nothing
  llmtrain.slurm.secure_dir:
    path: /shared/me/venvs/llmtrain
    create: false
    variable: slurm_python
"""

RETURN = r"""
created:
  description: The directories made, parents first.
  returned: always
  type: list
  elements: str
  sample: [/shared/me/runs/tiny, /shared/me/runs/tiny/env]
narrowed:
  description: The O(private) directories whose mode was narrowed to C(0700).
  returned: always
  type: list
  elements: str
written:
  description: The names of O(files) written (in check mode, that would be), because they were missing or differed.
  returned: always
  type: list
  elements: str
  sample: [scripts/node_check.sh]
unchanged:
  description: The names of O(files) that were already in place with the same content and mode.
  returned: always
  type: list
  elements: str
uid:
  description: The user the checks were made for.
  returned: always
  type: int
free_bytes:
  description:
    - The bytes free to the user on the filesystem of O(path) once O(files) are written (of its nearest existing
      parent where it does not exist yet, as in check mode), as C(df) counts them; null when it cannot be measured.
  returned: unless the checks fail
  type: int
  sample: 53687091200
entries:
  description:
    - With O(create=false), what O(path) holds - null when it does not exist, false when it is no directory, else the
      names in it, sorted, at most the first 1,000 (such as the directory a venv would be made in).
  returned: when O(create=false)
  type: raw
  sample: [bin, include, lib, pyvenv.cfg]
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import trusted_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import relative_name_error
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.put import parse_mode, write_files

ENTRIES_MAX = 1000


def entries(path):
    """The names in path (the first ENTRIES_MAX, sorted), None when it does not exist, False when it is no directory."""
    if not os.path.isdir(path):
        return False if os.path.lexists(path) else None
    return sorted(os.listdir(path))[:ENTRIES_MAX]


def free_bytes(path):
    """The bytes free to the user where path is (its nearest existing parent), None where it cannot be told."""
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        found = os.statvfs(path)
    except OSError:
        return None
    return found.f_bavail * found.f_frsize


def file_name_error(name, subdirs):
    """Why a name of files cannot be written (None when it can): only into the directories checked."""
    why = relative_name_error(name)
    if why:
        return why
    if name in subdirs:
        return "is one of subdirs, a directory"
    if os.path.dirname(name) and os.path.dirname(name) not in subdirs:
        return "is in %s, which is not among subdirs" % os.path.dirname(name)
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            subdirs=dict(type="list", elements="str", default=[]),
            private=dict(type="list", elements="str", default=[]),
            create=dict(type="bool", default=True),
            variable=dict(type="str", default="slurm_workspace"),
            files=dict(type="dict", default={}),
            files_mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p["path"].startswith("/"):
        module.fail_json(msg="path=%r must be absolute" % p["path"])
    wrong = ["%r %s" % (name, why) for name, why in ((n, relative_name_error(n)) for n in p["subdirs"]) if why]
    wrong += ["%r is not among subdirs" % name for name in p["private"] if name not in p["subdirs"]]
    if wrong:
        module.fail_json(msg="subdirs and private: %s" % "; ".join(wrong))
    wrong = ["%r %s" % (name, why) for name, why in ((n, file_name_error(n, p["subdirs"])) for n in sorted(p["files"]))
             if why]
    if wrong:
        module.fail_json(msg="files: each name is a file directly in path or in one of subdirs: %s" % "; ".join(wrong))
    if p["files"] and not p["create"]:
        module.fail_json(msg="files needs create=true: nothing is written where nothing may be made")
    try:
        files_mode = parse_mode(p["files_mode"])
    except ValueError:
        module.fail_json(msg="files_mode=%r: give an octal mode such as '0644'" % p["files_mode"])
    uid = os.geteuid()
    path = os.path.normpath(p["path"])
    try:
        problems, own, missing = trusted_dirs.check(path, uid, p["variable"], p["subdirs"])
    except OSError as err:
        module.fail_json(msg="cannot check %s: %s" % (path, err))
    result = dict(changed=False, created=[], narrowed=[], written=[], unchanged=[], uid=uid)
    if problems:
        module.fail_json(msg="\n".join(problems), problems=problems, **result)
    if not p["create"]:
        module.exit_json(entries=entries(path), free_bytes=free_bytes(path), **result)
    if module.check_mode:
        result["written"], result["unchanged"], _problem = write_files(path, p["files"], files_mode, check_mode=True)
        result.update(changed=bool(missing or result["written"]), created=missing)
        module.exit_json(free_bytes=free_bytes(path), **result)
    private = [os.path.join(own, name) for name in p["private"]]
    made, problems = trusted_dirs.make(missing, uid, p["variable"], private)
    result["created"] = made
    if problems:
        module.fail_json(msg="\n".join(problems), problems=problems, **result)
    for directory in private:
        if directory not in made and stat.S_IMODE(os.lstat(directory).st_mode) & 0o077:
            os.chmod(directory, 0o700)
            result["narrowed"].append(directory)
    result["written"], result["unchanged"], problem = write_files(path, p["files"], files_mode)
    result["changed"] = bool(made or result["narrowed"] or result["written"])
    if problem:
        module.fail_json(msg=problem, **result)
    # what is left once the files are in place
    module.exit_json(free_bytes=free_bytes(path), **result)


if __name__ == "__main__":
    main()
