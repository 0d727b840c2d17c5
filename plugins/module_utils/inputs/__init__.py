# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the inventory's variables, done before anything reaches Slurm: what each role's
meta/argument_specs.yml cannot say (Slurm's syntax, ranges, how one value bounds another), one
module per role whose variables they check. Every message names the variable, the bad value
and the fix."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import deploy, inference, pretrain, run, slurm
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import nccl

workspace_need = pretrain.workspace_need


def validate(values):
    """values: the run's variables (slurm_*, run_*, nccl_env_*, preflight_*, deploy_*, pretrain_*,
    inference_*) -> [message]. A null value is unset (the role defaults use null for "Slurm's
    own default")."""
    values = dict((name, value) for name, value in values.items() if value is not None)
    found = []
    for stage in (slurm, run, deploy, pretrain, inference):
        found.extend(stage.errors(values))
    found.extend(nccl.build_env({k: v for k, v in values.items() if k.startswith(nccl.PREFIX)})[1])
    return found
