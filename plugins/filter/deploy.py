# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the deploy role.

  venv_dir | llmtrain.slurm.venv_dir_errors(entries, slurm_python, workspace) -> [message]
  source | llmtrain.slurm.source_changes(present, dest) -> {new_dirs, to_copy, to_remove}
"""

from __future__ import annotations

# The mark the venv job leaves in a venv it made, and the record of its completed job (which
# earlier releases wrote as well): a directory with either is one the job may replace.
VENV_MARKERS = (".llmtrain-venv", ".llmtrain-venv.json")


def venv_dir_errors(venv_dir, entries, slurm_python, workspace):
    """entries: the names in venv_dir, or None when it does not exist, or False when it is
    not a directory. Making the venv replaces the directory, so only a missing or empty one,
    or a venv made here, may be used."""
    if entries is None or (entries is not False and (not entries or set(entries) & set(VENV_MARKERS))):
        return []
    if entries is False:
        what = "%s is not a directory" % venv_dir
    else:
        names = sorted(entries)
        what = "%s holds files that are not a venv made by llmtrain.slurm (%s%s)" % (
            venv_dir, ", ".join(names[:5]), ", ..." if len(names) > 5 else "")
    return ["deploy_venv_create=true makes the venv that slurm_python=%s names, replacing what is in its directory, "
            "but %s. Point slurm_python at a directory of its own (missing or empty), such as "
            "%s/venvs/llmtrain/bin/python, or set deploy_venv_create=false to use %s as it is."
            % (slurm_python, what, workspace.rstrip("/"), slurm_python)]


def source_changes(source, present, dest):
    """source: the source_tree lookup's result; present: ansible.builtin.find's files under
    dest (recursive, file_type any, with checksums). -> the directories to create, the source
    files to copy (content or mode differ, or missing) and the paths to remove (files no
    longer in the source, and whatever stands where a directory or file of it must go)."""
    dest = dest.rstrip("/")
    here = dict((f["path"], f) for f in present or [])
    files = source.get("files") or []
    wanted_files = set(dest + "/" + f["path"] for f in files)
    wanted_dirs = set(dest + "/" + d for d in source.get("dirs") or [])
    remove = sorted(p for p, f in here.items()
                    if (p not in wanted_files and not f.get("isdir")) or (p in wanted_dirs and not f.get("isdir"))
                    or (p in wanted_files and f.get("isdir")))
    mkdir = sorted(d for d in wanted_dirs if not here.get(d, {}).get("isdir"))
    copy = []
    for f in files:
        there = here.get(dest + "/" + f["path"])
        if not there or there.get("isdir") or there.get("checksum") != f["checksum"] \
                or str(there.get("mode", "")).lstrip("0") != f["mode"].lstrip("0"):
            copy.append(f)
    return dict(new_dirs=mkdir, to_copy=copy, to_remove=remove)


class FilterModule(object):
    def filters(self):
        return {"venv_dir_errors": venv_dir_errors, "source_changes": source_changes}
