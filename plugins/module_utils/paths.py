# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""File names that put_files and read_files take relative to their directory, and reading a
file of the workspace: bounded in size, and never through a link."""

from __future__ import annotations

import errno
import os
import stat


def relative_name_error(name):
    """Why a file name cannot be used inside a directory (None when it can)."""
    if not name or name.startswith("/") or "\0" in name:
        return "must be a relative path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "must not contain '..', '.' or an empty part"
    return None


def read_text(path, max_bytes):
    """(text, None), (None, why) or (None, None) when the file does not exist. A link is not
    followed (it could lead out of the directory) and a FIFO is never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None, None
        if err.errno == errno.ELOOP:
            return None, "a link, not followed"
        return None, (err.strerror or str(err)).lower()
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        return None, ("not a regular file" if not stat.S_ISREG(info.st_mode) else
                      "%d bytes, more than max_bytes=%d" % (info.st_size, max_bytes))
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        return None, "more than max_bytes=%d" % max_bytes
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
