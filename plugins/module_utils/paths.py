# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""File names that put_files and read_files take relative to their directory."""

from __future__ import annotations


def relative_name_error(name):
    """Why a file name cannot be used inside a directory (None when it can)."""
    if not name or name.startswith("/") or "\0" in name:
        return "must be a relative path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "must not contain '..', '.' or an empty part"
    return None
