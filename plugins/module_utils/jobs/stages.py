# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stages of a run whose work is a Slurm job, by name: each one's class (jobs/<stage>.py), in
the order a run's jobs come."""

from __future__ import annotations

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.batch import Batch
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.export import Export
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.generate import Generate
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.prepare import Prepare
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.serve import Serve
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import Train
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.venv import Venv

STAGES = dict((job.stage, job) for job in (Venv, Prepare, Train, Generate, Export, Batch, Serve))
