# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' argument specs as the input checks read them: the one place a variable's choices are
listed is its role's meta/argument_specs.yml, which ansible-doc, the roles' validation, the
reference pages (make docs) and these checks all read."""

from __future__ import annotations

import os

try:
    import yaml
except ImportError:  # in a module's payload; the controller, where the input checks run, has it (ansible-core needs it)
    yaml = None

ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles")
# a variable's role: the longest role name its name starts with (nccl_env_, not nccl_)
ROLES = ("slurm", "run", "nccl_env", "preflight", "deploy", "pretrain", "inference", "local_cluster", "status")
_SPECS = {}


def options(role):
    """{variable: its spec} of role's main entry point."""
    if role not in _SPECS:
        with open(os.path.join(ROLES_DIR, role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
            _SPECS[role] = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    return _SPECS[role]


def role_of(name):
    return max((role for role in ROLES if name.startswith(role + "_")), key=len)


def choices(name):
    """The choices the spec of variable `name` lists, as a tuple."""
    return tuple(options(role_of(name))[name]["choices"])
