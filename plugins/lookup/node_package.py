# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: node_package
author: llmtrain.slurm maintainers (!UNKNOWN)
version_added: 0.1.0
short_description: The files of the code that runs on the compute nodes, to ship them
description:
  - Returns the C(llmtrain_node) package - the node check, the network check and what they need,
    the collection's C(module_utils.node) package - as one dict of file name to text, read from the
    installed collection on the controller.
  - The run role writes it to C(<run>/scripts/) with M(llmtrain.slurm.secure_dir), and every job runs
    C(python -m llmtrain_node.node_check) with C(<run>/scripts) first on E(PYTHONPATH).
    M(llmtrain.slurm.slurm_node_check) ships the same files.
options:
  _terms:
    description: At most one, prepended to every file name, such as C(scripts/); none without it.
    required: false
"""

EXAMPLES = r"""
- name: Ship the node-side package into the run's scripts directory
  llmtrain.slurm.put_files:
    dest: /shared/runs/tiny
    files: "{{ lookup('llmtrain.slurm.node_package', 'scripts/') }}"
"""

RETURN = r"""
_raw:
  description: One dict, C({prefix}llmtrain_node/<module>.py) to the module's text.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmtrain.slurm.plugins.module_utils import node_package


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        if len(terms) > 1:
            raise AnsibleLookupError("node_package takes at most one term, the prefix of the file names; got %r" % (terms,))
        return [node_package.files(terms[0] if terms else "")]
