#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: put_files
short_description: Put several text files in one directory with one module call, writing only those that differ
description:
  - Writes each file of O(files) into O(dest) unless it is already there with the same content
    and mode. A file is written to a temporary file beside it and renamed into place, so a job
    that starts meanwhile reads the old file or the new one, never half of one.
  - One call for the whole set. M(ansible.builtin.copy) in a loop runs two modules per file;
    for the dozen files a run's jobs need, that was most of a stage's time on a login node.
  - The contents travel as module arguments, so this is for small text files (scripts,
    source code), read on the controller with the P(ansible.builtin.file#lookup) lookup.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  dest:
    description:
      - The directory the files go into. Created (with its parents, mode C(0755)) when missing.
    type: path
    required: true
  files:
    description:
      - File name relative to O(dest) (no C(..), not absolute; a subdirectory is created) ->
        the file's text, written as UTF-8.
    type: dict
    required: true
  mode:
    description:
      - The mode of every file, as an octal string.
    type: str
    default: "0644"
  private:
    description:
      - Names of O(files) written with mode C(0600) whatever O(mode) says, such as a file of secrets
        written in the same call as the files beside it.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  prune:
    description:
      - A pattern of names, shell-style such as C(*.env). The regular files directly in O(dest)
        whose names match it and that are neither in O(files) nor in O(keep) are removed, so that
        a file an earlier call wrote and this one no longer gives stops being used.
      - Links, directories and subdirectories are left alone; O(dest) itself is not followed when
        it is a link. Without O(prune) nothing is removed.
    type: str
  keep:
    description:
      - Names that O(prune) leaves in place although they are not in O(files), such as a file
        another task writes.
    type: list
    elements: str
    default: []
notes:
  - Supports check mode (says what it would write and remove) and diff mode (the names written and removed).
"""

EXAMPLES = r"""
- name: Put the checks in the run's scripts directory (only those that differ are written)
  llmtrain.slurm.put_files:
    dest: /shared/runs/tiny/scripts
    files: "{{ dict(sources | map('basename') | zip(query('ansible.builtin.file', *sources, rstrip=false))) }}"

- name: Put the env files, removing the *.env files of nodes no longer listed (secrets.env is another task's)
  llmtrain.slurm.put_files:
    dest: /shared/runs/tiny/env
    files: "{{ env_files }}"
    prune: "*.env"
    keep: [secrets.env]
"""

RETURN = r"""
written:
  description: The names (relative to O(dest)) written, because they were missing or differed.
  returned: always
  type: list
  elements: str
  sample: [node_check.sh]
unchanged:
  description: The names that were already in place with the same content and mode.
  returned: always
  type: list
  elements: str
removed:
  description: The names removed (or, in check mode, that would be) because they match O(prune).
  returned: always
  type: list
  elements: str
  sample: [gpu-0017.env]
"""

import fnmatch
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import relative_name_error
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.put import parse_mode, write_files


def prune(dest, pattern, wanted, check_mode):
    """Remove the regular files directly in dest whose names match pattern and are not in
    wanted, through a descriptor of dest (never following a link); returns their names."""
    try:
        fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []  # check mode: dest is not made yet
    try:
        with os.scandir(fd) as entries:
            names = sorted(entry.name for entry in entries if entry.name not in wanted
                           and fnmatch.fnmatchcase(entry.name, pattern) and entry.is_file(follow_symlinks=False))
        for name in [] if check_mode else names:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass  # gone meanwhile, as asked
    finally:
        os.close(fd)
    return names


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            mode=dict(type="str", default="0644"),
            prune=dict(type="str"),
            keep=dict(type="list", elements="str", default=[]),
            private=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        mode = parse_mode(p["mode"])
    except ValueError:
        module.fail_json(msg="mode=%r: give an octal mode such as '0644'" % p["mode"])
    problems = ["%r %s" % (name, why) for name, why in ((n, relative_name_error(n)) for n in sorted(p["files"]))
                if why]
    if problems:
        module.fail_json(msg="files: each name is a path inside dest: %s" % "; ".join(problems))
    if os.path.exists(p["dest"]) and not os.path.isdir(p["dest"]):
        module.fail_json(msg="dest %s exists and is not a directory" % p["dest"])
    if p["prune"] is not None and (not p["prune"] or "/" in p["prune"]):
        module.fail_json(msg="prune=%r: give a pattern of names directly in dest, such as '*.env'" % p["prune"])

    private = set(p["private"])
    written, unchanged = [], []
    for files, its_mode in ((dict((k, v) for k, v in p["files"].items() if k not in private), mode),
                            (dict((k, v) for k, v in p["files"].items() if k in private), 0o600)):
        done, same, problem = write_files(p["dest"], files, its_mode, module.check_mode) if files else ([], [], None)
        written += done
        unchanged += same
        if problem:
            module.fail_json(msg=problem, written=written, unchanged=unchanged)
    removed = []
    if p["prune"]:
        try:
            removed = prune(p["dest"], p["prune"], set(p["files"]) | set(p["keep"]), module.check_mode)
        except OSError as err:
            why = "it is a link, not followed" if os.path.islink(p["dest"]) else err.strerror or err
            module.fail_json(msg="cannot remove the files matching %s in %s: %s" % (p["prune"], p["dest"], why),
                             written=written, unchanged=unchanged)
    result = dict(changed=bool(written or removed), written=written, unchanged=unchanged, removed=removed)
    if module._diff and (written or removed):
        result["diff"] = dict(before="".join(name + "\n" for name in removed),
                              after="".join(name + "\n" for name in written),
                              before_header="%s (files removed)" % p["dest"],
                              after_header="%s (files written)" % p["dest"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
