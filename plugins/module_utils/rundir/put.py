# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Small text files put in a directory, only those that differ, each replaced atomically.

Shared by put_files and secure_dir (which puts the run's check scripts in the run directory it
has just checked, in the same module call).
"""

from __future__ import annotations

import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import holds, replace_file


def parse_mode(text):
    """An octal mode string such as '0644' -> int; ValueError when it is not one."""
    mode = int(text, 8)
    if not 0 <= mode <= 0o7777:
        raise ValueError(text)
    return mode


def encode(text):
    """A file's text, as a module argument gives it, -> the bytes written (UTF-8)."""
    return ("" if text is None else str(text)).encode("utf-8", "surrogateescape")


def write_files(dest, files, mode, check_mode=False, fsync=True):
    """Write each name -> text of files (names relative to dest, already checked) that is not
    already in dest with that content and mode: to a temporary file beside it, fsynced, then
    renamed into place, so that a reader sees the old file or the new one, never half of one
    (fsync=False: not synced first, for files made again on every run).
    A missing subdirectory is made (mode 0755 under the umask). Check mode writes nothing.
    -> (written, unchanged, problem): the names, in order; problem is None, or why the first
    file that could not be written was not (those after it are neither written nor listed)."""
    written, unchanged = [], []
    for name in sorted(files):
        data = encode(files[name])
        path = os.path.join(dest, name)
        if holds(path, data, mode):
            unchanged.append(name)
            continue
        if not check_mode:
            try:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                replace_file(path, data, mode, prefix="." + os.path.basename(path) + ".", fsync=fsync)
            except OSError as err:
                return written, unchanged, "cannot write %s: %s" % (path, err.strerror or err)
        written.append(name)
    return written, unchanged, None
