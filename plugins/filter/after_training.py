# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters on a run's model after training (module_utils/inference/after_training.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmtrain.slurm.plugins.module_utils.inference import after_training


def model_lines(model, run_name):
    """runs/<run>/model.json (a dict) -> the play's lines on the run's model."""
    return after_training.model_lines(model, run_name)


class FilterModule(object):
    def filters(self):
        return {"model_lines": model_lines}
