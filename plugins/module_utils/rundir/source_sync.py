# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a deploy of your training code changes in the directory it runs in.

Your script runs in that directory, and scripts written the usual way write there too:
nanoGPT's out/ckpt.pt, prepared data/.../train.bin, Hydra's outputs/. So a deploy removes only
what an earlier deploy wrote (the run's manifest lists it) and is no longer in the source,
never what your excludes or the always-skipped names match, and never a file that changed
since it was deployed. Only the files and directories of the source are looked at: a
directory holding a week of checkpoints costs the same as an empty one.
"""

from __future__ import annotations

import errno
import json
import os
import stat

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import source_tree, trusted_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import relative_name_error

# the manifest lists every deployed path with its checksum: about 100 bytes a file
MAX_MANIFEST_BYTES = 64 * 1048576


def manifest_text(dest, files, dirs):
    """The manifest of a deploy: dest, {path: checksum} of its files, its directories."""
    return json.dumps(dict(dest=os.path.normpath(dest), files=dict((f["path"], f["checksum"]) for f in files),
                           dirs=sorted(dirs)), sort_keys=True) + "\n"


def read_manifest(path):
    """-> (the manifest of the last deploy or None when there is none, why it cannot be used)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None, None
        return None, "%s cannot be read: %s" % (path, (err.strerror or str(err)).lower())
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None, "%s is not a regular file" % path
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        return None, "%s is larger than %d MiB" % (path, MAX_MANIFEST_BYTES // 1048576)
    try:
        manifest = untrusted.loads(data, MAX_MANIFEST_BYTES)
        if not (isinstance(manifest, dict) and isinstance(manifest.get("files"), dict)
                and isinstance(manifest.get("dirs"), list)):
            raise ValueError("not a manifest")
    except ValueError:
        return None, "%s is not a manifest of a deploy" % path
    return manifest, None


def deployed_mode(mode, umask):
    """The mode a file of the source gets: its own permission bits, less group and other write
    and what the umask removes (a script stays executable, a private file private)."""
    return "%04o" % (int(mode, 8) & 0o777 & ~(umask | 0o022))


def kept_by_pattern(relpath, keep):
    """Whether a path is one a deploy never removes: the user's excludes, the always-skipped names."""
    parts = relpath.split("/")
    return (any(part in source_tree.SKIPPED_DIRS or part in source_tree.SECRET_DIRS for part in parts[:-1])
            or source_tree.matches(relpath, source_tree.SKIPPED_FILES + source_tree.SECRET_FILES)
            or any(source_tree.matches("/".join(parts[:i + 1]), keep) or source_tree.matches("/".join(parts[:i + 1]) + "/", keep)
                   for i in range(len(parts))))


def _plain_parents(dest, path):
    """Whether every directory between dest and path is a directory, not a link (which could
    lead a removal out of dest)."""
    parts = path.split("/")[:-1]
    for i in range(len(parts)):
        info = trusted_dirs.lstat(os.path.join(dest, *parts[:i + 1]))
        if info is None or not stat.S_ISDIR(info.st_mode):
            return False
    return True


def plan(dest, files, dirs, manifest, keep, umask, uid, variable="run_source_dir"):
    """dest: the directory (exists); files: the source's files (dicts with path, mode, checksum,
    size, and whatever else, such as src, which is passed through); dirs: its directories
    (relative); manifest: the last deploy's, or None; keep: the user's exclude patterns.
    -> dict(to_copy (the file dicts, mode set to the deployed mode), new_dirs, to_remove,
    to_rmdir (deployed directories no longer in the source, removed when empty), kept
    (deployed files no longer in the source that changed since: left, with why), problems)."""
    dest = os.path.normpath(dest)
    wanted_files = dict((f["path"], f) for f in files)
    wanted_dirs = set(dirs)
    ours = manifest if manifest and os.path.normpath(str(manifest.get("dest", ""))) == dest else None
    deployed = dict(ours["files"]) if ours else {}
    deployed_dirs = set(ours["dirs"]) if ours else set()
    problems, to_copy, new_dirs, to_remove, to_rmdir, kept = [], [], [], [], [], []
    bad = [p for p in list(wanted_files) + sorted(wanted_dirs) + list(deployed) + sorted(deployed_dirs)
           if relative_name_error(p)]
    if bad:
        return dict(problems=["%s: %r is not a path inside %s" % (variable, bad[0], dest)], to_copy=[], new_dirs=[],
                    to_remove=[], to_rmdir=[], kept=[])

    # a deployed file no longer in the source: removed when it is as it was deployed, else kept
    for path in sorted(set(deployed) - set(wanted_files)):
        info = trusted_dirs.lstat(os.path.join(dest, path)) if _plain_parents(dest, path) else None
        if info is None or kept_by_pattern(path, keep):
            continue
        if stat.S_ISREG(info.st_mode) and source_tree.sha1(os.path.join(dest, path)) == deployed[path]:
            to_remove.append(path)
        else:
            kept.append("%s/%s changed since it was deployed and is no longer in %s: it is left as it is"
                        % (dest, path, variable))
    for path in sorted(wanted_dirs):
        full = os.path.join(dest, path)
        info = trusted_dirs.lstat(full)
        if info is None:
            new_dirs.append(path)
        elif stat.S_ISDIR(info.st_mode):
            problem = trusted_dirs.own_problem(full, info, uid, variable)
            if problem:
                problems.append(problem)
        elif path in deployed and path in to_remove:
            new_dirs.append(path)  # a file of an earlier deploy where the source now has a directory
        else:
            problems.append("%s is in the way of the directory %s of %s and was not deployed by llmtrain.slurm "
                            "(your job's?): move it away, or leave %s out with run_source_exclude."
                            % (full, path, variable, path))
    for path, entry in sorted(wanted_files.items()):
        full = os.path.join(dest, path)
        info = trusted_dirs.lstat(full)
        mode = deployed_mode(entry["mode"], umask)
        if info is not None and stat.S_ISDIR(info.st_mode):
            if path in deployed_dirs and not os.listdir(full):
                to_rmdir.append(path)
                to_copy.append(dict(entry, mode=mode))
            else:
                problems.append("%s is a directory where %s has the file %s: move it away, or leave %s out with "
                                "run_source_exclude." % (full, variable, path, path))
            continue
        if info is None or not stat.S_ISREG(info.st_mode) or "%04o" % stat.S_IMODE(info.st_mode) != mode \
                or info.st_size != entry.get("size", info.st_size) or source_tree.sha1(full) != entry["checksum"]:
            to_copy.append(dict(entry, mode=mode))
    # deployed directories no longer in the source, deepest first, removed if empty
    for path in sorted(deployed_dirs - wanted_dirs, key=lambda d: -d.count("/")):
        info = trusted_dirs.lstat(os.path.join(dest, path)) if _plain_parents(dest, path) else None
        if info is not None and stat.S_ISDIR(info.st_mode) and not kept_by_pattern(path, keep):
            to_rmdir.append(path)
    return dict(problems=problems, to_copy=to_copy, new_dirs=new_dirs, to_remove=to_remove, to_rmdir=to_rmdir,
                kept=kept)
