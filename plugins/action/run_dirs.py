# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.run_dirs: the run directory checked, made and filled in one task.

The job puts scripts/ first on PYTHONPATH and sources env/ on every start and requeue, so whoever can
write there runs code as the user, with the secrets loaded: llmtrain.slurm.secure_dir refuses a run
directory that others control or could replace, then writes, in the same call and only where they
differ, the node and network checks (roles/run/files), the llmtrain_node package they run (the
collection's module_utils.node), their settings (scripts/node_check.conf, jobs/base.py) and the
reference trainer (roles/deploy/files/trainer, scripts/trainer/).

Every stage runs it before it writes or submits anything. The first of an ansible-playbook run does
the work and records it in the host's facts; the others, with the same run directory and settings,
find it done and call no module. A separate ansible-playbook run checks it all again."""

from __future__ import annotations

import hashlib
import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base

MODULE = "llmtrain.slurm.secure_dir"
# the fact that says which run directory and settings this ansible-playbook run has made
FACT = "_run_dirs_done"
FREE_FACT = "_run_dirs_free_bytes"
# src/: your training code, run from there when run_source_dir is set; env/: the secrets are
# sourced from it, so it is the user's alone
SUBDIRS = ("env", "scripts", "scripts/trainer", "scripts/llmtrain_node", "data", "checkpoints", "logs")
PRIVATE = ("env",)
# the scripts that start the checks, the first steps of every job of the run
CHECK_SOURCES = ("node_check.sh", "network_check.sh", "bad_nodes.sh", "exit_codes.sh")
FILES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "run", "files")
TRAINER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles", "deploy", "files", "trainer")
VARIABLES = base.RUN_VARIABLES + ("slurm_node_check_timeout", "run_bad_node_policy", "run_requeue_max",
                                  "run_gpu_policy", "run_gpu_diag")


def check_sources():
    """{'scripts/<name>': its text} of the checks' scripts, and {'scripts/trainer/<name>': its text} of the
    reference trainer (roles/deploy/files/trainer), which every job of the reference trainer runs and the
    samples, export and batch jobs of any run."""
    out = {}
    for name in CHECK_SOURCES:
        with open(os.path.join(FILES_DIR, name), encoding="utf-8") as handle:
            out["scripts/" + name] = handle.read()
    for name in sorted(os.listdir(TRAINER_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(TRAINER_DIR, name), encoding="utf-8") as handle:
                out["scripts/trainer/" + name] = handle.read()
    return out


def made_key(run, settings):
    """What the fact records: the run directory, whether it holds src/, and the settings written there
    (the scripts and the package are the collection's own, the same all through one playbook run)."""
    return hashlib.sha1(json.dumps([run.dir, bool(run.get("run_source_dir")), settings]).encode()).hexdigest()


class RunAction(ActionBase):
    """An action that takes no options and reads the run's variables from the play (also preflight_cluster)."""

    _supports_check_mode = True

    def run_values(self, task_vars, names):
        """The variables of names that the play has, resolved."""
        if self._task.args:
            raise AnsibleActionFail("%s takes no options (got %s): it reads the run's variables"
                                    % (self._task.action, ", ".join(sorted(self._task.args))))
        return dict((name, self._templar.template(task_vars[name])) for name in names if name in task_vars)


class ActionModule(RunAction):

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        values = self.run_values(task_vars, VARIABLES)
        run = base.Run(values)
        try:
            settings = run.check_settings()
        except (KeyError, TypeError, ValueError) as err:
            raise AnsibleActionFail("the run directory cannot be made: %s" % (err.args[0] if err.args else err)) from None
        key = made_key(run, settings)
        if key in (task_vars.get(FACT), task_vars.get("ansible_facts", {}).get(FACT)):
            result.update(changed=False, path=run.dir, msg="made and checked earlier in this ansible-playbook run")
            return result
        files = check_sources()
        files.update(node_package.files("scripts/"))
        files["scripts/node_check.conf"] = settings
        subdirs = list(SUBDIRS) + (["src"] if run.get("run_source_dir") else [])
        result.update(self._execute_module(
            module_name=MODULE, task_vars=task_vars,
            module_args=dict(path=run.dir, subdirs=subdirs, private=list(PRIVATE), files=files)), path=run.dir)
        if not result.get("failed"):
            # the room left where the run writes, for the pretrain stage's check (roles/pretrain/tasks/validate.yml)
            result["ansible_facts"] = {FACT: key, FREE_FACT: result.get("free_bytes")}
        return result
