#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fetch_files
short_description: Copy the files of a run directory that may leave it to the controller, with one module call
description:
  - Looks at the files O(files) names and those that O(patterns) match under O(src), in one module
    call on the host that has O(src), and vets each. A file whose real path leads out of the real
    O(src) (a link planted in a shared workspace), one that is not a regular file (a directory, a
    FIFO) and one larger than O(max_bytes) (a log grown to gigabytes) stays where it is and is named
    in RV(refused) with a sentence that says why. A missing file is left out, not an error.
  - The action plugin of the same name then copies each accepted file whose copy under O(dest) on
    the controller differs (by SHA-1) through the connection, into a temporary file beside it that
    is renamed into place (mode C(0644), directories it makes C(0755), never group-writable; an umask
    of 077 keeps them C(0600) and C(0700)). With privilege
    escalation (C(become)) the file is read with M(ansible.builtin.slurp) instead, as
    M(ansible.builtin.fetch) does, because the connection reads as the login user.
  - M(ansible.builtin.find), C(realpath), M(ansible.builtin.stat) and M(ansible.builtin.fetch) per
    file took the pretrain role's collect step about four seconds a run on a login node; this is
    one module call and one transfer per file that changed.
  - The counterpart of M(llmtrain.slurm.read_files) for files that need not be text or small.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  src:
    description:
      - The run directory on the host. Nothing whose real path is outside its real path is copied.
    type: path
    required: true
  dest:
    description:
      - The directory on the controller the files go into (the action plugin's option). Created
        when missing; a relative path is taken from the playbook's directory.
    type: path
    required: true
  files:
    description:
      - The name of the copy under O(dest) (relative, no C(..)) -> the file's path, relative to
        O(src) or absolute (then it must still lie in O(src)).
    type: dict
    default: {}
  patterns:
    description:
      - Files to copy that are found by their names, as M(ansible.builtin.find) would find them.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - The directory under O(src) (relative, no C(..)) that is searched. A missing one finds nothing.
        type: str
        required: true
      pattern:
        description:
          - A shell-style pattern (C(*), C(?), C([...])) of the path relative to O(patterns[].path);
            no part of it matches a C(/), so C(offline-run-*/run-*.wandb) matches a file one
            directory down.
        type: str
        required: true
      recurse:
        description:
          - Match the pattern against the end of the path at any depth, not only at the depth it names.
            Links to directories are not followed.
        type: bool
        default: false
      dest:
        description:
          - The directory under O(dest) (relative, no C(..)) that a match goes into, at its path
            relative to O(patterns[].path). Defaults to O(patterns[].path).
        type: str
  max_bytes:
    description:
      - A file larger than this stays where it is and is named in RV(refused).
    type: int
    default: 268435456
  limit_name:
    description:
      - The setting, in MiB, that O(max_bytes) comes from (such as C(pretrain_fetch_max_mb)). The
        sentence for a file over the limit names it with its value, so that the reader knows what to
        raise; without it the sentence names O(max_bytes).
    type: str
  checksum:
    description:
      - Return the SHA-1 of each accepted file (read in chunks, never more than O(max_bytes) of it).
        The action plugin always asks for it, to copy only what differs.
    type: bool
    default: true
notes:
  - Supports check mode. The module only reads; in check mode the action plugin writes nothing and
    names in RV(fetched) what it would copy.
  - Files are opened without following a link at the last part of their real path, and FIFOs are
    never waited on.
"""

EXAMPLES = r"""
- name: Copy the metrics, the job's log and the TensorBoard event files of a run to the controller
  llmtrain.slurm.fetch_files:
    src: /shared/ws/tiny
    dest: "{{ playbook_dir }}/runs/tiny"
    files:
      metrics.jsonl: metrics.jsonl
      logs/llmtrain-tiny-1234.out: /shared/ws/tiny/logs/llmtrain-tiny-1234.out
    patterns:
      - path: tensorboard
        pattern: "events.out.tfevents.*"
      - path: wandb
        pattern: "offline-run-*/run-*.wandb"
    max_bytes: "{{ 1024 * 1048576 }}"
    limit_name: pretrain_fetch_max_mb
  register: collected

- name: Say which files stay on the cluster
  ansible.builtin.debug:
    msg: "{{ collected.refused.values() | list }}"
  when: collected.refused | length > 0
"""

RETURN = r"""
files:
  description:
    - The name under O(dest) -> the file accepted (its real path on the host, size in bytes, SHA-1
      when O(checksum), modification time in seconds since the epoch).
  returned: always
  type: dict
  sample: {"metrics.jsonl": {"path": "/shared/ws/tiny/metrics.jsonl", "size": 5120,
           "sha1": "0a4d55a8d778e5022fab701977c5d840bbc486d0", "mtime": 1767225600.0}}
refused:
  description:
    - The path (O(src) joined with the name given, or the match found) -> why it is not copied.
  returned: always
  type: dict
  sample: {"/shared/ws/tiny/metrics.jsonl": "/shared/ws/tiny/metrics.jsonl is not fetched: it leads to /home/u/x, outside the run directory /shared/ws/tiny."}
missing:
  description: The names of O(files) whose file does not exist on the host.
  returned: always
  type: list
  elements: str
  sample: [node_times.json]
fetched:
  description:
    - The names under O(dest) that were copied because the controller's copy was missing or differed
      (in check mode, those that would be). Returned by the action plugin.
  returned: always
  type: list
  elements: str
  sample: [metrics.jsonl, logs/llmtrain-tiny-1234.out]
"""

import errno
import fnmatch
import hashlib
import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import fetch_refusal, relative_name_error

CHUNK = 1048576
KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
         (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISLNK, "link"))


def kind_of(mode):
    if stat.S_ISREG(mode):
        return "file"
    return next((name for test, name in KINDS if test(mode)), "special file")


def vet(path, real_src, name=None, max_bytes=268435456, limit_name=None, checksum=True):
    """(info, None) for a file that may be copied, (None, why) for one that may not, (None, None)
    for one that does not exist. path is as the caller names it (name: the part given relative
    to the run directory, or the whole path when absolute); info's path is its real path."""
    why = fetch_refusal(path, real_src, name=name)
    if why:
        return None, why
    if not os.path.lexists(path):
        return None, None
    real = os.path.realpath(path)
    why = fetch_refusal(path, real_src, real=real)
    if why:
        return None, why
    try:
        info = os.lstat(real)
    except FileNotFoundError:
        return None, None  # a link inside the run directory to nothing
    why = fetch_refusal(path, real_src, real=real, kind=kind_of(info.st_mode), size=info.st_size,
                        max_bytes=max_bytes, limit_name=limit_name)
    if why:
        return None, why
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None, None  # removed meanwhile
        reason = "it became a link" if err.errno == errno.ELOOP else (err.strerror or str(err)).lower()
        return None, "%s is not fetched: it cannot be read (%s)." % (path, reason)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())  # what was opened, which may differ from what was looked at
        why = fetch_refusal(path, real_src, real=real, kind=kind_of(info.st_mode), size=info.st_size,
                            max_bytes=max_bytes, limit_name=limit_name)
        if why:
            return None, why
        found = dict(path=real, size=info.st_size, mtime=info.st_mtime)
        if checksum:
            digest, size = hashlib.sha1(), 0
            while size <= max_bytes:
                block = handle.read(min(CHUNK, max_bytes + 1 - size))
                if not block:
                    break
                digest.update(block)
                size += len(block)
            if size > max_bytes:  # grown since it was measured
                return None, fetch_refusal(path, real_src, real=real, size=size, max_bytes=max_bytes,
                                           limit_name=limit_name)
            found.update(size=size, sha1=digest.hexdigest())
    return found, None


def walk(top, depth):
    """The relative paths (as lists of parts) of what is not a directory under top, at most depth
    parts deep (None: any depth); links to directories are not followed. Sorted."""
    found = []
    pending = [[]]
    while pending:
        parts = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(top, *parts)))
        except OSError:
            continue  # missing or unreadable: nothing found there
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if depth is None or len(parts) + 1 < depth:
                    pending.append(parts + [entry.name])
            else:
                found.append(parts + [entry.name])
    return sorted(found)


def matches(parts, pattern_parts, recurse):
    if len(parts) < len(pattern_parts) or (not recurse and len(parts) != len(pattern_parts)):
        return False
    tail = parts[len(parts) - len(pattern_parts):]
    return all(fnmatch.fnmatchcase(part, pat) for part, pat in zip(tail, pattern_parts))


def option_problems(p):
    problems = ["files: %r %s" % (name, why) for name, why in ((n, relative_name_error(n)) for n in sorted(p["files"]))
                if why]
    problems += ["files: %r has no path" % name for name in sorted(p["files"]) if not p["files"][name]]
    for index, spec in enumerate(p["patterns"]):
        for key in ("path", "pattern", "dest"):
            value = spec.get(key)
            why = None if value is None and key == "dest" else relative_name_error(value or "")
            if why:
                problems.append("patterns[%d].%s: %r %s" % (index, key, value, why))
    if p["max_bytes"] < 0:
        problems.append("max_bytes=%d: give a size in bytes, 0 or more" % p["max_bytes"])
    return problems


def collect(p):
    """files, refused and missing for the module's parameters."""
    src = p["src"]
    real_src = os.path.realpath(src)
    files, refused, missing = {}, {}, []
    limits = dict(max_bytes=p["max_bytes"], limit_name=p["limit_name"], checksum=p["checksum"])

    def take(name, path, given=None):
        info, why = vet(path, real_src, name=given, **limits)
        if info is not None:
            files[name] = info
        elif why:
            refused[path] = why
        return info is not None or why is not None

    for name in sorted(p["files"]):
        given = str(p["files"][name])
        if not take(name, os.path.join(src, given), given):
            missing.append(name)
    for spec in p["patterns"]:
        top = os.path.join(src, spec["path"])
        why = fetch_refusal(top, real_src, real=os.path.realpath(top))
        if why:
            refused[top] = why
            continue
        pattern_parts = spec["pattern"].split("/")
        dest = spec.get("dest") or spec["path"]
        for parts in walk(top, None if spec.get("recurse") else len(pattern_parts)):
            if matches(parts, pattern_parts, spec.get("recurse")):
                take("/".join([dest] + parts), os.path.join(top, *parts))
    return files, refused, missing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),  # the action plugin's: where the copies go on the controller
            files=dict(type="dict", default={}),
            patterns=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="str", required=True),
                pattern=dict(type="str", required=True),
                recurse=dict(type="bool", default=False),
                dest=dict(type="str"),
            )),
            max_bytes=dict(type="int", default=268435456),
            limit_name=dict(type="str"),
            checksum=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    problems = option_problems(module.params)
    if problems:
        module.fail_json(msg="fetch_files: each name is a path inside its directory: %s" % "; ".join(problems))
    files, refused, missing = collect(module.params)
    module.exit_json(changed=False, files=files, refused=refused, missing=missing)


if __name__ == "__main__":
    main()
