"""Crash-safe file writes: a file appears under its final name complete, or not at all."""

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

TEMP_MARK = ".tmp-"


def fsync_dir(directory):
    """Make renames in directory durable (the rename lives in the directory's own data)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path):
    """A hidden name next to path, unique per process, so readers never pick it up."""
    path = Path(path)
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}")


@contextmanager
def atomic_file(path, mode="wb"):
    """Yield a file to write; on success it is flushed, fsynced and renamed to path."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def remove_temp_files(directory):
    """Delete temp files (and temp directories of sharded checkpoints) left in directory by
    writers that were killed; return their names."""
    removed = []
    for tmp in Path(directory).glob(f".*{TEMP_MARK}*"):
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        removed.append(tmp.name)
    return sorted(removed)


def first_os_error(error):
    """The OSError (disk full, quota, read-only) behind error, or error itself: when a write
    fails inside torch.save, closing its zip file raises again, and that second error hides
    the cause a user can act on."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return error
