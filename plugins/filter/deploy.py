# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the deploy role.

  venv_dir | llmtrain.slurm.venv_dir_errors(entries, slurm_python, workspace) -> [message]
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


class FilterModule(object):
    def filters(self):
        return {"venv_dir_errors": venv_dir_errors}
