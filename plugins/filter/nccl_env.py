# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the nccl_env_* inventory variables, and environment variable names.

  {{ hostvars[node] | llmtrain.slurm.nccl_env }}          -> {NCCL_...: value}; fails on bad values
  {{ vars | llmtrain.slurm.nccl_env(hostvars[node]) }}    -> the same with a node's values laid over
  {{ vars | llmtrain.slurm.nccl_node_envs(hostvars, groups['slurm_workers']) }}
                                                          -> {node: env} of the nodes whose env differs
  {{ hostvars[node] | llmtrain.slurm.nccl_env_errors }}   -> [message, ...] ([] when all is well)
  {{ hostvars[node] | llmtrain.slurm.nccl_interfaces }}   -> interfaces that must exist on the node
  {{ slurm_secret_env | llmtrain.slurm.env_name_errors('slurm_secret_env key') }} -> [message, ...]
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import nccl

# bad nodes named in a failure besides the first, whose messages it shows
NAMED_NODES = 10


def _settings(variables):
    return {key: variables[key] for key in list(variables) if str(key).startswith(nccl.PREFIX)}


def _failure(errors):
    return AnsibleFilterError("Invalid NCCL/UCX/Gloo settings:\n" + "\n".join(errors))


def nccl_env(variables, overrides=None):
    """overrides: a node's own variables, laid over variables (the cluster-wide values)."""
    settings = _settings(variables)
    settings.update(_settings(overrides or {}))
    env, errors = nccl.build_env(settings)
    if errors:
        raise _failure(errors)
    return env


def nccl_node_envs(variables, hostvars, nodes):
    """{node: env} for each of nodes whose own nccl_env_* values (hostvars[node]) laid over
    variables give an env other than variables' own; the same work for every node, so a
    cluster of thousands costs one pass. Fails on the cluster-wide values or any node's."""
    cluster = _settings(variables)
    cluster_env = nccl_env(variables)
    envs, bad = {}, {}
    for node in nodes:
        own = _settings(hostvars[node])
        # most nodes repeat the group values: nothing to build or check again
        if all(key in cluster and cluster[key] == value for key, value in own.items()):
            continue
        env, errors = nccl.build_env(dict(cluster, **own))
        if errors:
            bad[node] = errors
        elif env != cluster_env:
            envs[node] = env
    if bad:
        first = sorted(bad)[0]
        others = sorted(bad)[1:]
        lines = ["%s (its host vars laid over the group values):" % first] + bad[first]
        if others:
            lines.append("Also invalid on %d other node(s): %s%s" % (
                len(others), ", ".join(others[:NAMED_NODES]), ", ..." if len(others) > NAMED_NODES else ""))
        raise _failure(lines)
    return envs


def nccl_interfaces(variables):
    return nccl.interfaces(nccl.build_env(_settings(variables))[0])


def nccl_env_errors(variables):
    return nccl.build_env(_settings(variables))[1]


def env_name_errors(names, what):
    """names: a list, or a mapping whose keys are the names."""
    return nccl.env_name_errors(list(names), what)


class FilterModule(object):
    def filters(self):
        return {"nccl_env": nccl_env, "nccl_node_envs": nccl_node_envs, "nccl_env_errors": nccl_env_errors,
                "nccl_interfaces": nccl_interfaces, "env_name_errors": env_name_errors}
