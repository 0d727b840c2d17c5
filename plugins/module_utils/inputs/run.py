# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the run_* variables (the run role's): the run's name, your training code's paths
(that the files exist is checked where they are read, on the controller), requeues, W&B."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, one_line, strings
from ansible_collections.llmtrain.slurm.plugins.module_utils.argument_specs import choices

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# characters W&B refuses in a project name
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"


def errors(values):
    """values: the variables that are set -> [message] about the run_* among them."""
    found = []
    if "run_name" in values and not RUN_NAME.fullmatch(str(values["run_name"] or "")):
        found.append("run_name=%r must be 1-64 letters, digits, . _ - starting with a letter or digit "
                     "(it names a directory and the job)." % values["run_name"])
    script, source = values.get("run_script"), values.get("run_source_dir")
    for name in ("run_script", "run_source_dir", "run_script_chdir"):
        if name in values and not one_line(values[name]):
            found.append("%s=%r must be a path on one line, or null." % (name, values[name]))
    if source and one_line(source):
        if not script:
            found.append("run_source_dir=%s is set but run_script is not: name your training script inside "
                         "it, such as run_script: train.py." % source)
        elif one_line(script) and (script.startswith("/") or ".." in script.split("/")):
            found.append("run_script=%s must be a path inside run_source_dir=%s, relative to it (such as "
                         "train.py or scripts/train.py), when run_source_dir is set." % (script, source))
    if "run_source_exclude" in values:
        message = strings(values, "run_source_exclude", "[\"data/*\", \"*.ckpt\"]")
        if message and values["run_source_exclude"] != []:
            found.append(message)
    count(found, values, "run_requeue_max", 0, "how often a preempted job may requeue itself")
    project = values.get("run_wandb_project")
    if project is not None and (not isinstance(project, str) or not project or len(project) > 128
                                or set(project) & set(WANDB_PROJECT_FORBIDDEN)):
        found.append("run_wandb_project=%r must be a W&B project name: 1-128 characters, none of %s (the "
                     "entity goes in run_wandb_entity)." % (project, " ".join(WANDB_PROJECT_FORBIDDEN)))
    if values.get("run_wandb_mode", "online") not in choices("run_wandb_mode"):
        found.append("run_wandb_mode=%r must be online (the nodes reach W&B) or offline (wandb sync later)."
                     % (values["run_wandb_mode"],))
    return found
