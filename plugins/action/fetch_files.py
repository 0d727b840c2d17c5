# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.fetch_files: one call of the module (on the host, it vets the
files and hashes them), then a transfer through the connection for each file whose copy on the
controller differs. See plugins/modules/fetch_files.py for the options."""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import stat

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_with
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import relative_name_error

MODULE = "llmtrain.slurm.fetch_files"
CHUNK = 1048576


def local_sha1(path):
    """The SHA-1 of the regular file at path (not a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        digest = hashlib.sha1()
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def private_bits():
    """What the user's umask keeps from group and others beyond their write bit, which no fetched
    file or directory gets anyway: an umask of 002 (user-private groups) gives 0755 directories
    and 0644 files, as 022 does; 077 keeps them the user's alone (0700, 0600)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask & 0o055


def make_dirs(path):
    """Make path and its missing parents, each 0755 less private_bits() whatever the umask."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o755)
        except OSError as err:
            if err.errno != errno.EEXIST or not os.path.isdir(directory):
                raise
            continue  # made meanwhile by someone else: theirs to keep as it is
        os.chmod(directory, 0o755 & ~private_bits())


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("src", "dest", "files", "patterns", "max_bytes", "limit_name", "checksum"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        try:
            result.update(self.fetch_files(self._task.args, task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def fetch_files(self, args, task_vars):
        """One call of the module with args, then the transfer of each file that differs here: the
        task's result (the collect step's action calls it too)."""
        dest = args.get("dest")
        if not isinstance(dest, str) or not dest:
            raise AnsibleActionFail("dest (the directory on the controller the files go into) is required")
        dest = os.path.expanduser(dest)
        if not os.path.isabs(dest):
            dest = self._loader.path_dwim(dest)
        found = self._execute_module(module_name=MODULE, module_args=dict(args, checksum=True), task_vars=task_vars)
        if found.get("failed"):
            return found
        files, fetched = found.get("files", {}), []
        bad = ["%r %s" % (name, why) for name, why in ((n, relative_name_error(n)) for n in sorted(files)) if why]
        if bad:
            raise AnsibleActionFail("the host named files that are not paths inside dest: %s" % "; ".join(bad))
        for name in sorted(files):
            local = os.path.join(dest, name)
            if local_sha1(local) == files[name].get("sha1"):
                continue
            if not self._task.check_mode:
                try:
                    self._transfer(files[name]["path"], local, task_vars)
                except (AnsibleError, OSError) as err:
                    return dict(failed=True, changed=bool(fetched), fetched=fetched, files=files,
                                refused=found.get("refused", {}),
                                msg="cannot fetch %s to %s: %s" % (files[name]["path"], local, to_text(err)))
            fetched.append(name)
        return dict(changed=bool(fetched), files=files, refused=found.get("refused", {}),
                    missing=found.get("missing", []), fetched=fetched)

    def _transfer(self, remote, local, task_vars):
        """Copy remote into a temporary file beside local and rename it into place (0644 less
        private_bits())."""
        make_dirs(os.path.dirname(local))

        def copy(temp):
            if self._connection.become:
                # the connection reads as the login user: the become user reads the file with slurp
                read = self._execute_module(module_name="ansible.legacy.slurp", module_args=dict(src=remote),
                                            task_vars=task_vars)
                if read.get("failed"):
                    raise AnsibleError(read.get("msg", "slurp failed"))
                with open(temp, "wb") as stream:
                    stream.write(base64.b64decode(read["content"]))
            else:
                self._connection.fetch_file(remote, temp)
        replace_with(local, copy, 0o644 & ~private_bits(), prefix="." + os.path.basename(local) + ".")
