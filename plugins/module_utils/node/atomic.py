# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Replace a file atomically: a reader sees the old file or the new one, never half of one;
and the test that spares a write when the file already holds the same.

This file imports nothing from Ansible: the run role copies it beside node_check.py into the
run's scripts directory; modules import it as module_utils.
"""

from __future__ import annotations

import os
import stat
import tempfile


def holds(path, data, mode):
    """Whether path is a regular file (not a link) with this content (bytes) and mode."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != mode or info.st_size != len(data):
        return False
    with open(path, "rb") as handle:
        return handle.read() == data


def replace_with(path, write, mode=0o644, prefix=".tmp-"):
    """write(temp) to a temporary file beside path (named prefix + random), give it mode and rename
    it over path; the temporary file is removed on any error. The one way the collection replaces
    a file: replace_file below, the run report's outputs, the fetched files."""
    handle, temp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=prefix)
    os.close(handle)
    try:
        write(temp)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise


def replace_file(path, data, mode=0o644, prefix=".tmp-", fsync=False):
    """Write data (bytes) to a temporary file beside path, optionally fsync it, and rename it over
    path (replace_with)."""
    def write(temp):
        with open(temp, "wb") as stream:
            stream.write(data)
            if fsync:
                stream.flush()
                os.fsync(stream.fileno())
    replace_with(path, write, mode, prefix)
