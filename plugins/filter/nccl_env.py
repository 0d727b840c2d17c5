# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the nccl_env_* inventory variables, and environment variable names.

  {{ hostvars[node] | llmtrain.slurm.nccl_env }}          -> {NCCL_...: value}; fails on bad values
  {{ vars | llmtrain.slurm.nccl_env(hostvars[node]) }}    -> the same with a node's values laid over
  {{ hostvars[node] | llmtrain.slurm.nccl_env_errors }}   -> [message, ...] ([] when all is well)
  {{ hostvars[node] | llmtrain.slurm.nccl_interfaces }}   -> interfaces that must exist on the node
  {{ slurm_secret_env | llmtrain.slurm.env_name_errors('slurm_secret_env key') }} -> [message, ...]
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.module_utils import nccl


def _settings(variables):
    return {key: variables[key] for key in list(variables) if str(key).startswith(nccl.PREFIX)}


def nccl_env(variables, overrides=None):
    """overrides: a node's own variables, laid over variables (the cluster-wide values)."""
    settings = _settings(variables)
    settings.update(_settings(overrides or {}))
    env, errors = nccl.build_env(settings)
    if errors:
        raise AnsibleFilterError("Invalid NCCL/UCX/Gloo settings:\n" + "\n".join(errors))
    return env


def nccl_interfaces(variables):
    return nccl.interfaces(nccl.build_env(_settings(variables))[0])


def nccl_env_errors(variables):
    return nccl.build_env(_settings(variables))[1]


def env_name_errors(names, what):
    """names: a list, or a mapping whose keys are the names."""
    return nccl.env_name_errors(list(names), what)


class FilterModule(object):
    def filters(self):
        return {"nccl_env": nccl_env, "nccl_env_errors": nccl_env_errors, "nccl_interfaces": nccl_interfaces,
                "env_name_errors": env_name_errors}
