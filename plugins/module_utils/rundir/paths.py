# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""File names that put_files, read_files and fetch_files take relative to their directory,
reading a file of the workspace (bounded in size, never through a link), and why fetch_files
leaves a file of the run directory where it is."""

from __future__ import annotations

import errno
import os
import stat

MIB = 1048576


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


def fetch_refusal(path, real_run_dir, name=None, real=None, kind=None, size=None, max_bytes=None, limit_name=None):
    """The sentence that says why path (as the caller named it) is not copied to the controller,
    or None when it may be: '..' in name (the path as given, relative to the run directory or
    absolute), its real path outside the real run directory (a
    link planted there that leads elsewhere), not a regular file (kind names what it is), or
    larger than max_bytes (limit_name: the setting in MiB that max_bytes comes from, named
    instead of max_bytes)."""
    if name is not None and ".." in name.split("/"):
        return "%s is not fetched: its name goes up ('..') out of the run directory %s." % (path, real_run_dir)
    if real is not None and not real.startswith(real_run_dir.rstrip("/") + "/"):
        return "%s is not fetched: it leads to %s, outside the run directory %s." % (path, real, real_run_dir)
    if kind is not None and kind != "file":
        return "%s is not fetched: it is a %s, not a regular file." % (path, kind)
    if size is not None and max_bytes is not None and size > max_bytes:
        limit = "%s=%d" % (limit_name, max_bytes // MIB) if limit_name else "max_bytes=%d" % max_bytes
        return ("%s is not fetched: it has %.0f MiB, more than %s; it stays in the run directory."
                % (path, size / float(MIB), limit))
    return None


def owned_dirs(workspace, uid, markers):
    """The directories of workspace (not links) that uid owns and that hold one of markers (relative
    names), sorted by name: the runs the status lists, the sweeps it counts."""
    return owned_dirs_of(workspace, uid, [markers])[0]


def owned_dirs_of(workspace, uid, groups):
    """[names] for each group of markers: the directories of workspace (not links) that uid owns and
    that hold one of the group's markers, sorted by name; one listing of the workspace and one lstat
    of each entry for all the groups."""
    found = [[] for _group in groups]
    for entry in sorted(os.listdir(workspace)):
        path = os.path.join(workspace, entry)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        for names, markers in zip(found, groups):
            if any(os.path.lexists(os.path.join(path, marker)) for marker in markers):
                names.append(entry)
    return found
