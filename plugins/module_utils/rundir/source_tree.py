# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files of your training source, as the deploy stage copies them and the training job's
fingerprint counts them.

A source is a directory (run_source_dir, deployed whole) or a list of files (your
run_script with its run_extra_files, deployed side by side). Version control, Python
caches and virtual environments are left out, and so are what looks like a secret (SECRET_DIRS,
SECRET_FILES) and what matches the user's own patterns; the digest (SHA-1 over each file's relative path, mode and content) changes when
anything deployed changes, and so a finished run trains again only when its source changed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat

# Left out wherever they are: names of directories and files, and glob patterns of files.
SKIPPED_DIRS = frozenset((".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                          ".tox", ".nox", ".ipynb_checkpoints", ".venv", "venv", ".eggs", "node_modules"))
SKIPPED_FILES = ("*.pyc", "*.pyo", ".DS_Store")
# Left out too, and listed as such: what looks like a secret. The deployed source is readable by
# whoever can read the workspace; secrets reach the job through slurm_secret_env instead.
SECRET_DIRS = frozenset((".secrets", ".ssh", ".aws", ".gnupg", ".docker", ".kube", ".azure"))
SECRET_FILES = (".env", ".env.*", ".envrc", ".netrc", "_netrc", ".pgpass", ".pypirc", ".npmrc", ".git-credentials",
                ".htpasswd", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",
                "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*")


def sha1(path):
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def matches(relpath, patterns):
    name = relpath.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(relpath, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


def _is_venv(path):
    return os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def _entry(src, relpath):
    info = os.stat(src)
    return dict(src=src, path=relpath, mode="%04o" % stat.S_IMODE(info.st_mode), size=info.st_size,
                checksum=sha1(src))


def walk(root, exclude=()):
    """(files, dirs, skipped, secrets) under root: files as dicts (src, path relative to root,
    mode, size, checksum), sorted by path; dirs relative, sorted; skipped: the relative paths left
    out by the user's patterns (exclude), for the user to see; secrets: those left out because
    they look like secrets (directories end in /). Links to files are followed; links to
    directories are not (a link can lead out of the source or round in a loop)."""
    files, dirs, skipped, secrets = [], [], [], []
    for top, subdirs, names in os.walk(root):
        rel_top = os.path.relpath(top, root)
        rel_top = "" if rel_top == "." else rel_top.replace(os.sep, "/") + "/"
        keep = []
        for name in sorted(subdirs):
            rel = rel_top + name
            full = os.path.join(top, name)
            if name in SKIPPED_DIRS or os.path.islink(full) or _is_venv(full):
                continue
            if matches(rel, exclude) or matches(rel + "/", exclude):
                skipped.append(rel + "/")
                continue
            if name in SECRET_DIRS:
                secrets.append(rel + "/")
                continue
            keep.append(name)
            dirs.append(rel)
        subdirs[:] = keep
        for name in sorted(names):
            rel = rel_top + name
            full = os.path.join(top, name)
            if matches(rel, SKIPPED_FILES) or not os.path.isfile(full):
                continue
            if matches(rel, exclude):
                skipped.append(rel)
                continue
            if matches(name, SECRET_FILES):
                secrets.append(rel)
                continue
            files.append(_entry(full, rel))
    files.sort(key=lambda f: f["path"])
    return files, sorted(dirs), sorted(skipped), sorted(secrets)


def digest(files):
    """One SHA-1 over what is deployed: each file's relative path, mode and checksum."""
    total = hashlib.sha1()
    for f in sorted(files, key=lambda f: f["path"]):
        total.update(("%s\0%s\0%s\n" % (f["path"], f["mode"], f["checksum"])).encode("utf-8", "surrogateescape"))
    return total.hexdigest()


def source(paths, exclude=()):
    """paths: [a directory] (deployed as its content) or files and directories that go side
    by side (a directory under its own name, as ansible.builtin.copy puts one).
    -> dict(files, dirs, skipped, secrets, digest, size). A file named on its own is deployed
    even when it looks like a secret: naming it is asking for it."""
    if len(paths) == 1 and os.path.isdir(paths[0]):
        files, dirs, skipped, secrets = walk(paths[0], exclude)
    else:
        files, dirs, skipped, secrets = [], [], [], []
        for path in paths:
            name = os.path.basename(os.path.normpath(path))
            if not os.path.isdir(path):
                files.append(_entry(path, name))
                continue
            inner_files, inner_dirs, inner_skipped, inner_secrets = walk(path, exclude)
            files += [dict(f, path=name + "/" + f["path"]) for f in inner_files]
            dirs += [name] + [name + "/" + d for d in inner_dirs]
            skipped += [name + "/" + s for s in inner_skipped]
            secrets += [name + "/" + s for s in inner_secrets]
    return dict(files=files, dirs=dirs, skipped=skipped, secrets=secrets, digest=digest(files),
                size=sum(f["size"] for f in files))
