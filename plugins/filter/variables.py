# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the collection's variable names.

  names | llmtrain.slurm.unknown_variables(workers, facts) -> [message] for each name with a role's
                                                              prefix that no role defines
"""

from __future__ import annotations

import difflib
import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import argument_specs

# Former names (CHANGELOG.md): a renamed variable, and the one that replaces it.
RENAMED = {
    "pretrain_run_name": "run_name",
    "pretrain_runs_dir": "run_results_dir",
    "pretrain_script": "run_script",
    "pretrain_source_dir": "run_source_dir",
    "pretrain_source_exclude": "run_source_exclude",
    "pretrain_script_chdir": "run_script_chdir",
    "pretrain_dataset": "run_dataset",
    "pretrain_bad_node_policy": "run_bad_node_policy",
    "pretrain_requeue_max": "run_requeue_max",
    "pretrain_force": "run_force",
    "pretrain_wandb_project": "run_wandb_project",
    "pretrain_wandb_entity": "run_wandb_entity",
    "pretrain_wandb_mode": "run_wandb_mode",
    "preflight_gpu_policy": "run_gpu_policy",
    "deploy_extra_files": "run_extra_files",
}
# Removed variables, and what to do instead.
REMOVED = {
    "pretrain_container_image": "set slurm_container_runtime: pyxis and slurm_container_image instead",
    "preflight_step_time_limit": "preflight allocates nothing and each job checks its own nodes; remove it",
}
# How close a defined name must be to be suggested (difflib's ratio): a shared prefix alone
# (pretrain_xyzzy, pretrain_watch) scores about 0.6.
CLOSE = 0.75
# How many of the compute nodes that set a name a message names.
NODES_NAMED = 3


@functools.lru_cache(maxsize=1)
def declared():
    """{role: frozenset of the variables its meta/argument_specs.yml declares}, every entry point."""
    roles = dict((role, frozenset(name for options in entries.values() for name in options))
                 for role, entries in argument_specs.specs().items())
    if not roles:
        raise AnsibleFilterError("unknown_variables: no roles/*/meta/argument_specs.yml under %s" % argument_specs.ROOT)
    return roles


@functools.lru_cache(maxsize=1)
def computed():
    """The public names the roles compute or record (the run role's _run_computed), defined but no input."""
    return frozenset(argument_specs.load("roles", "run", "vars", "main.yml")["_run_computed"])


def prefixes():
    """The prefixes of the collection's variables: each role's name and _ (slurm_, run_, nccl_env_, ...)."""
    return tuple(role + "_" for role in declared())


def message(name, known):
    """Why name is refused, naming the variable meant where one is known or close."""
    if name in RENAMED:
        return "%s was renamed to %s: set %s instead." % (name, RENAMED[name], RENAMED[name])
    if name in REMOVED:
        return "%s was removed: %s." % (name, REMOVED[name])
    close = difflib.get_close_matches(name, known, n=1, cutoff=CLOSE)
    if close:
        return "%s is not a variable of llmtrain.slurm: did you mean %s?" % (name, close[0])
    role = argument_specs.role_of(name)
    return ("%s is not a variable of llmtrain.slurm: remove it, or find the one meant in "
            "ansible-doc -t role llmtrain.slurm.%s." % (name, role))


def unknown_variables(names, workers=None, facts=None):
    """One message per name with a role's prefix that no role declares nor computes.

    names: the play host's variable names (others and _private ones are left alone); workers:
    {compute node: its variables} of the slurm_workers group, whose names only are read (a name the
    play host has too is told once, as the play host's); facts: the names of the play host's facts,
    which are no settings (slurm_cluster_info's slurm_cluster)."""
    if isinstance(names, (str, dict)) or not hasattr(names, "__iter__"):
        raise AnsibleFilterError("unknown_variables: the input must be a list of variable names, not %r" % (names,))
    known = sorted(set().union(*declared().values()))
    defined = set(known) | computed() | set(facts or [])
    public = prefixes()
    own = set(str(name) for name in names)
    unknown = sorted(name for name in own if name.startswith(public) and name not in defined)
    errors = [message(name, known) for name in unknown]
    nodes = {}  # name -> the compute nodes that set it
    for node, variables in sorted((workers or {}).items()):
        for name in list(variables):
            name = str(name)
            if name.startswith(public) and name not in defined and name not in own:
                nodes.setdefault(name, []).append(node)
    for name, where in sorted(nodes.items()):
        more = " and %d more" % (len(where) - NODES_NAMED) if len(where) > NODES_NAMED else ""
        errors.append("%s (host vars of %s%s)" % (message(name, known), ", ".join(where[:NODES_NAMED]), more))
    return errors


class FilterModule(object):
    def filters(self):
        return {"unknown_variables": unknown_variables}
