# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: source_tree
author: llmtrain.slurm maintainers (!UNKNOWN)
version_added: 0.1.0
short_description: The files of your training source on the controller, with one digest
description:
  - Lists what the deploy stage copies of your training source, read on the controller - a
    directory (O(_terms) one directory, such as C(run_source_dir)) walked whole, or files
    (C(run_script) and C(run_extra_files)) that go side by side.
  - Left out wherever they are in a directory - version control (C(.git), C(.hg), C(.svn)), Python
    caches (C(__pycache__), C(*.pyc), C(.mypy_cache), C(.pytest_cache), C(.ruff_cache)), virtual
    environments (C(.venv), C(venv), any directory with a C(pyvenv.cfg)), C(.tox), C(.nox),
    C(.eggs), C(.ipynb_checkpoints), C(node_modules), C(.DS_Store) - and what O(exclude) matches.
  - Left out as well, and listed in RV(_raw.secrets), wherever it is in a directory - what looks like
    a secret - C(.env), C(.env.*), C(.envrc), C(.netrc), C(.pgpass), C(.pypirc), C(.npmrc),
    C(.git-credentials), C(.htpasswd), keys (C(*.pem), C(*.key), C(*.p12), C(*.pfx), C(*.jks),
    C(*.keystore), C(id_rsa*), C(id_ed25519*), ...) and the directories C(.secrets), C(.ssh), C(.aws),
    C(.gnupg), C(.docker), C(.kube), C(.azure). A file named in O(_terms) itself is never left out.
    Links to directories are not followed.
  - Relative paths are found the way M(ansible.builtin.copy) finds its C(src) (the role's and the
    playbook's C(files) directories, then the playbook's directory).
options:
  _terms:
    description: One directory, or files and directories that go side by side (controller paths).
    required: true
  exclude:
    description: Glob patterns of paths (relative to the directory) or of names to leave out, such as C(data/*) or C(*.ckpt).
    type: list
    elements: str
    default: []
  variable:
    description: The variable the paths came from, named in the error when one is missing.
    type: str
    default: run_source_dir
"""

EXAMPLES = r"""
- name: What run_source_dir deploys
  ansible.builtin.debug:
    msg: "{{ lookup('llmtrain.slurm.source_tree', run_source_dir, exclude=['data/*']).digest }}"
"""

RETURN = r"""
_raw:
  description: One dict per call.
  type: list
  elements: dict
  contains:
    files:
      description: The files, sorted by C(path) - C(src) (absolute, on the controller), C(path) (relative), C(mode) (octal text), C(size), C(checksum) (SHA-1).
      type: list
      elements: dict
    dirs:
      description: The directories under the source directory, relative, sorted (empty for files).
      type: list
      elements: str
    skipped:
      description: The paths that O(exclude) left out (directories end in C(/)).
      type: list
      elements: str
    secrets:
      description: The paths left out because they look like secrets (directories end in C(/)).
      type: list
      elements: str
    digest:
      description: SHA-1 over each file's relative path, mode and checksum; it changes when anything deployed changes.
      type: str
    size:
      description: The bytes of all the files.
      type: int
"""

import os

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import source_tree


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        name = self.get_option("variable")
        paths = []
        for term in terms:
            path = self.find_file_in_search_path(variables, "files", str(term), ignore_missing=True)
            if not path or not os.path.exists(path):
                raise AnsibleError("%s: %s does not exist on the controller (the machine that runs ansible-playbook): "
                                   "give its absolute path, or one relative to the playbook's directory." % (name, term))
            paths.append(os.path.abspath(path))
        try:
            return [source_tree.source(paths, self.get_option("exclude"))]
        except (IOError, OSError) as err:
            raise AnsibleError("%s: cannot read %s: %s" % (name, getattr(err, "filename", "") or paths, err))
