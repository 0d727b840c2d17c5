# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""File names that put_files, read_files and fetch_files take relative to their directory, and
why fetch_files leaves a file of the run directory where it is."""

from __future__ import annotations

MIB = 1048576


def relative_name_error(name):
    """Why a file name cannot be used inside a directory (None when it can)."""
    if not name or name.startswith("/") or "\0" in name:
        return "must be a relative path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "must not contain '..', '.' or an empty part"
    return None


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
