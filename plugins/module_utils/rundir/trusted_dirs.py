# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Directories whose contents a job runs or sources, and the directories above them.

A job runs code from the run directory and sources the secrets there, on every start and
requeue, days after it was submitted. Whoever can replace any directory on the way to it can
put their own code there: not only the owner of the run directory, but anyone who can rename
an entry of a directory above it (the owner of that directory, or anyone who may write it,
unless its sticky bit restricts renames to the entry's owner, as in /tmp). So, as OpenSSH's
StrictModes does for authorized_keys:

- every directory from / down to the workspace (and every link on the way, which is followed)
  is owned by the user or root and not writable by group or others unless it is sticky;
- the directory itself and those below it are the user's, writable by no one else, and real
  directories, not links.

What the collection makes follows the user's umask with group and other write removed
(strict_umask), so that it never makes what it then refuses, whatever the login shell's umask.
"""

from __future__ import annotations

import errno
import os
import stat

# links followed on the way to a directory before giving up, as the kernel's ELOOP limit
MAX_LINKS = 40


def strict_umask():
    """Remove group and other write from this process's umask (a private 077 stays 077); return it."""
    current = os.umask(0o022)
    os.umask(current | 0o022)
    return current | 0o022


def _mode(info):
    return "%04o" % stat.S_IMODE(info.st_mode)


def _writers(info):
    """'group and others', 'its group', 'others' or None."""
    group, other = info.st_mode & stat.S_IWGRP, info.st_mode & stat.S_IWOTH
    return "group and others" if group and other else "its group" if group else "others" if other else None


def _owner(uid):
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "another user"


def _above_problem(path, info, uid, variable):
    """Why a directory (or link) above the user's own directories lets someone else replace them."""
    if info.st_uid not in (uid, 0):
        return ("%s belongs to %s (uid %d), not to you (uid %d) or root: its owner can rename what is in it and "
                "put their own directory in place of yours, and your jobs would run their code as you. Point %s at "
                "a directory whose every parent only you or root can change, such as a directory of your own in "
                "/scratch." % (path, _owner(info.st_uid), info.st_uid, uid, variable))
    if stat.S_ISLNK(info.st_mode):
        return None  # the permission bits of a link mean nothing; who owns it does
    writers = _writers(info)
    if writers and not info.st_mode & stat.S_ISVTX:
        return ("%s is writable by %s (mode %s) without the sticky bit: anyone who can write there can rename your "
                "directory in it and put their own in its place, and your jobs would run their code as you. Point %s "
                "at a directory of your own under one that only you or root can write, or have the owner of %s run "
                "`chmod +t %s` (as /tmp has: then only you can rename what you own in it)."
                % (path, writers, _mode(info), variable, path, path))
    return None


def own_problem(path, info, uid, variable):
    """Why one of the user's own directories (the run directory and those below it) cannot be used."""
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return ("%s is in the way: it exists and is not a directory%s. Remove it, or point %s elsewhere."
                % (path, " (a link)" if stat.S_ISLNK(info.st_mode) else "", variable))
    if info.st_uid != uid:
        return ("%s belongs to %s (uid %d), not to you (uid %d): the job would run the code and source the "
                "environment files that its owner puts there. Choose another %s, or have it removed."
                % (path, _owner(info.st_uid), info.st_uid, uid, variable))
    writers = _writers(info)
    if writers:
        return ("%s is writable by %s (mode %s): anyone who can write there runs code as you, with your secrets "
                "loaded. Run `chmod go-w %s` if nobody else has written there, or remove it."
                % (path, writers, _mode(info), path))
    return None


def lstat(path):
    """os.lstat, or None when the path does not exist."""
    try:
        return os.lstat(path)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise


def walk_above(path, uid, variable, _links=None):
    """Check every directory and link from / down to path (absolute), following links.
    -> (problems, the real path of the deepest directory that exists, the names below it that
    do not). Stops at the first problem: what is below it is not worth checking."""
    links = [0] if _links is None else _links
    real = "/"
    problem = _above_problem(real, os.lstat(real), uid, variable)
    if problem:
        return [problem], real, []
    names = [n for n in path.split("/") if n not in ("", ".")]
    for index, name in enumerate(names):
        if name == "..":  # of a link's target: the parent of where the walk has got to, as the kernel does
            real = os.path.dirname(real)
            continue
        candidate = os.path.join(real, name)
        info = lstat(candidate)
        if info is None:
            return [], real, names[index:]
        problem = _above_problem(candidate, info, uid, variable)
        if problem:
            return [problem], real, []
        if stat.S_ISLNK(info.st_mode):
            links[0] += 1
            if links[0] > MAX_LINKS:
                return ["%s: more than %d links on the way to %s" % (variable, MAX_LINKS, path)], real, []
            target = os.readlink(candidate)
            problems, real, missing = walk_above(os.path.join(real, target), uid, variable, links)
            if problems:
                return problems, real, []
            if missing:
                return ["%s is a link to %s, which does not exist: point %s at a directory that does"
                        % (candidate, target, variable)], real, []
            continue
        if not stat.S_ISDIR(info.st_mode):
            return ["%s is not a directory: point %s at a directory" % (candidate, variable)], real, []
        real = candidate
    return [], real, []


def check(path, uid, variable, subdirs=()):
    """The problems of path (the user's own directory) and its subdirs (relative names), and of
    everything above it. -> (problems, the real path of path, the directories to make: absolute,
    through the real path of what exists, parents first)."""
    parent, name = os.path.split(os.path.normpath(path))
    problems, real, missing = walk_above(parent, uid, variable)
    if problems:
        return problems, None, []
    own = os.path.join(real, *(missing + [name]))
    wanted = [own]
    for sub in subdirs:  # with the directories between, parents first
        parts = sub.split("/")
        wanted += [p for p in (os.path.join(own, *parts[:i + 1]) for i in range(len(parts))) if p not in wanted]
    to_make = [os.path.join(real, *missing[:i + 1]) for i in range(len(missing))]
    for directory in wanted:
        info = None if missing else lstat(directory)
        if info is None:
            to_make.append(directory)
            continue
        problem = own_problem(directory, info, uid, variable)
        if problem:
            problems.append(problem)
    return problems, own, to_make


def make(paths, uid, variable, private=()):
    """mkdir each path in order (parents first) under the strict umask; private ones 0700. One
    that appears meanwhile (someone else's, in a sticky directory) is checked, not trusted.
    -> (made, problems)."""
    strict_umask()
    made = []
    for path in paths:
        try:
            os.mkdir(path, 0o700 if path in private else 0o777)
            made.append(path)
        except OSError as err:
            if err.errno != errno.EEXIST:
                return made, ["cannot create %s on the login node: %s. Point %s at a shared directory you can write."
                              % (path, err.strerror or err, variable)]
            problem = own_problem(path, os.lstat(path), uid, variable)
            if problem:
                return made, [problem]
    return made, []
