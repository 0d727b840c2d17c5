# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sweep's training as Slurm job arrays: each member a full run (its own run directory, node
checks, requeues and resume, done record), its training job the one a run of its settings would
submit (jobs/train.py), kept in its run directory as scripts/pretrain.sbatch; the members of one
shape (the same sbatch options: nodes, GPUs, time limit, site options) one array, whose task N
runs member N's script in that member's directory, its log there. The sweep's code, env files and
data are made once, in the sweep's own run directory (run_name: the sweep's name), and every
member's run directory gets them from there.

A task of the array has a job id of its own (SLURM_JOB_ID): its log, its requeue (node/slurm_job.py
names it to scontrol as <array>_<index>), its start records are its member's alone."""

from __future__ import annotations

import json
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import MANAGED, SHEBANG, Run, exit_code, js, q
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import NAME_PREFIX, Train
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv

# an array of a sweep is called this and the sweep's name; each of its tasks calls itself
# (SLURM_JOB_NAME, which names its check records) as its member's training job
ARRAY_PREFIX = "llmtrain-sweep-"
# in the sweep's run directory: the arrays submitted, each with the members its tasks run
RECORD = "sweep.json"
# the variable that points a member's training at the sweep's data (Run.data_dir)
DATA_VARIABLE = "_sweep_data_dir"
# a member's name (a run name: inputs/run.py RUN_NAME), which goes into its done record as it is
MEMBER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# a member's done record, in its run directory (run_files.DONE)
DONE_RECORD = run_files.DONE
# the array's own log (before a task is in its member's directory), in the sweep's run directory
ARRAY_LOG = "logs/%x-%A_%a.out"
# what a member's run directory gets from the sweep's: its scripts (the checks, the node package,
# the trainer), your code (src/) and the env files
SHARED = ("scripts", "src", "env")


def member_variables(variables, member):
    """A member's run variables: the sweep's, with the member's settings, its run name, and the
    sweep's data."""
    values = dict(variables)
    values.update(member["settings"])
    values["run_name"] = member["name"]
    values[DATA_VARIABLE] = Run(variables).path("data")
    return values


def shape(options):
    """What members must share to be tasks of one array: their sbatch options, as one string."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


class Sweep(object):
    """The sweep (its run directory is that of run_name, the sweep's name) and its members' training jobs."""

    def __init__(self, variables, members, parallel=0):
        self.base = Run(variables)
        self.members = list(members)
        self.parallel = int(parallel or 0)
        self.jobs = [Train(Run(member_variables(variables, member))) for member in self.members]

    @property
    def name(self):
        return self.base.name

    @property
    def array_name(self):
        return ARRAY_PREFIX + self.name

    def entries(self, files=True):
        """([member], [shape]): what the module makes of each member - its name, run directory, done
        record, the index of its shape (the sbatch options its training job asks for, each shape once),
        and (files) the files of its own: its job script, kept with the options as #SBATCH lines, and
        its node check settings (a watch's poll, which writes none, makes none)."""
        out, shapes = [], {}
        for member, job in zip(self.members, self.jobs):
            options = job.options()
            entry = dict(name=member["name"], run_dir=job.run.dir, done_file=job.done_file,
                         shape=shapes.setdefault(shape(options), len(shapes)), files={})
            if job.run.script:  # your script's: where its processes run (its event files, beside its run directory)
                entry["chdir"] = job.run.code_chdir
            if files:
                argv = sbatch_argv.option_argv(dict((k, v) for k, v in options.items() if v is not None and v is not False))
                entry["files"] = {"scripts/pretrain.sbatch": sbatch_argv.kept_script(job.script(), job.name, job.chdir, argv),
                                  "scripts/node_check.conf": job.run.check_settings()}
            out.append(entry)
        return out, [json.loads(key) for key, _index in sorted(shapes.items(), key=lambda item: item[1])]

    def module_args(self, files=True):
        base = Train(self.base)
        entries, shapes = self.entries(files)
        return dict(name=self.array_name, sweep=self.name, base_dir=self.base.dir, parallel=self.parallel,
                    members=entries, shapes=shapes, exclude=self.base.exclude,
                    after_records=base.submit()["after_records"],
                    progress_regex=[str(p) for p in self.base.get("pretrain_progress_regex") or []],
                    progress_tag=self.base.get("pretrain_progress_tag") or None)


def array_options(options, indices, parallel):
    """A shape's sbatch options as its array asks for them: the tasks' indices (at most parallel
    running at once, 0: as many as Slurm starts) and the array's own log."""
    spec = ",".join(str(index) for index in indices)
    if parallel > 0:
        spec += "%%%d" % parallel
    out = dict(options, array=spec, output=ARRAY_LOG)
    return out


def array_script(sweep, tasks, data_dir=None):
    """The array's script: task N runs member N's training job script (scripts/pretrain.sbatch) in
    the member's run directory, its output in the member's log as its own job's would be. Before,
    where the member has no data/ and the sweep's (data_dir) is prepared, the member gets it as hard
    links (no room taken, nothing read): its export, evaluation and batch inference, run by
    themselves, find it where a run's is. tasks: [(index, member name, member run directory)]."""
    wrong = [name for _index, name, _dir in tasks if not MEMBER_NAME.fullmatch(name)]
    if wrong:
        raise ValueError("sweep members must be named with letters, digits and . _ - alone: %r" % wrong[:3])
    lines = [SHEBANG, MANAGED,
             "# Sweep %s: each task of this array trains one member, with the member's own job script" % js(sweep),
             "# (scripts/pretrain.sbatch in its run directory), in its run directory, logging there.",
             'case "${SLURM_ARRAY_TASK_ID:-}" in']
    for index, name, run_dir in tasks:
        lines.append("    %d) member=%s run_dir=%s ;;" % (int(index), q(name), q(run_dir)))
    lines += [
        '    *) echo "llmtrain: array task ${SLURM_ARRAY_TASK_ID:-?} runs no member of this sweep" >&2; exit %d ;;'
        % exit_code("SETTING"),
        "esac",
        'cd "${run_dir}" || exit %d' % exit_code("SETTING"),
    ]
    if data_dir:
        lines += [
            "# the sweep's prepared data as the member's own too, hard links (nothing copied): for its export,",
            "# evaluation and batch inference by themselves (its training reads the sweep's); none where links fail",
            "if [ ! -e data ] && [ -f %s ]; then" % q(data_dir + "/meta.json"),
            '    cp -al %s ".data.$$" 2>/dev/null && mv -T ".data.$$" data 2>/dev/null || rm -rf ".data.$$"' % q(data_dir),
            "fi",
        ]
    lines += [
        "# the name its own job would have: the node and network checks name their records with it",
        'export SLURM_JOB_NAME="%s${member}"' % NAME_PREFIX,
        "# the member's done record names this task (<array>_<index>), which marks it completed at its end",
        "# (llmtrain_node.job); a member's name is letters, digits and . _ - alone",
        """printf '{"fingerprint": "%s:%%s", "job_id": "%%s_%%s", "name": "%%s", "state": "RUNNING"}\\n' \\"""
        % ARRAY_PREFIX.rstrip("-"),
        '    "${SLURM_ARRAY_JOB_ID}" "${SLURM_ARRAY_JOB_ID}" "${SLURM_ARRAY_TASK_ID}" "${SLURM_JOB_NAME}" \\',
        '    > "%s.$$" && mv -f "%s.$$" "%s"' % ((DONE_RECORD,) * 3),
        'exec >>"logs/${SLURM_JOB_NAME}-${SLURM_JOB_ID}.out" 2>&1',
        "exec bash scripts/pretrain.sbatch",
    ]
    return "\n".join(lines) + "\n"
