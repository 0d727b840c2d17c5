# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Slurm job of a run, made in Python as submitit makes one: its options, its script (the
environment and one launch of the node package's Python for the stage), its done record and its
name. One class per stage (prepare, venv, train, generate, export, batch, serve) in this package;
the action of llmtrain.slurm.sbatch builds one from a task's `stage` and the run's variables and
submits it, and tests/unit/jobs renders every stage's script for a handful of inventories against
the golden files kept there.

Every value goes into a script line quoted (`words`), and into a comment as JSON (`js`), so that no
value of an inventory or of the workspace adds a line or a command to a job."""

from __future__ import annotations

import json
import shlex

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import exit_codes

# The second line of every job script. The templates the scripts were made from before had
# Ansible's default ansible_managed there; it stays, so that a run made with them keeps its jobs'
# fingerprints and a rerun submits nothing.
MANAGED = "# Ansible managed"
SHEBANG = "#!/usr/bin/env bash"
# the sbatch log of a job, relative to its working directory (Slurm's %x: the job name, %j: its id)
LOG = "logs/%x-%j.out"


def q(word):
    """One word of a shell line, quoted (None is the empty word)."""
    return shlex.quote("" if word is None else str(word))


def words(argv):
    """A command's words, each quoted, joined by spaces."""
    return " ".join(q(word) for word in argv)


def js(value):
    """A value as a comment shows it: JSON, on one line whatever it holds."""
    return json.dumps(value)


def exit_code(name):
    """The number of an exit code of the table (node/exit_codes.py), by its name."""
    return exit_codes.code(name)


def gpu_options(count, gpu_type=None, how="gres"):
    """The sbatch options that ask for `count` GPUs on each node: {} for none, else
    {'gres': 'gpu[:TYPE]:N'}, or with how=gpus-per-node {'gpus-per-node': '[TYPE:]N'}."""
    count = int(count or 0)
    if count <= 0:
        return {}
    typed = "%s:%d" % (gpu_type, count) if gpu_type else "%d" % count
    if how == "gpus-per-node":
        return {"gpus-per-node": typed}
    if how != "gres":
        raise ValueError("slurm_gpu_request=%r must be gres or gpus-per-node" % (how,))
    return {"gres": "gpu:" + typed}


class Run(object):
    """A run's settings (the roles' variables, resolved) and what every job of the run derives from
    them: where the run lives, how its jobs start Python, what the site requires of each job."""

    def __init__(self, variables):
        self.variables = dict(variables)

    def __getitem__(self, name):
        try:
            return self.variables[name]
        except KeyError:
            raise KeyError("the job needs the variable %s, which is not set" % name) from None

    def get(self, name, default=None):
        value = self.variables.get(name, default)
        return default if value is None else value

    def int(self, name):
        return int(self[name])

    @property
    def name(self):
        return str(self["run_name"])

    @property
    def workspace(self):
        return str(self["slurm_workspace"]).rstrip("/")

    @property
    def dir(self):
        return "%s/%s" % (self.workspace, self.name)

    def path(self, *parts):
        """A path in the run directory."""
        return "/".join((self.dir,) + tuple(str(part) for part in parts))

    @property
    def data_dir(self):
        """The run's prepared data: its own data/, or a sweep member's the sweep's (jobs/sweep.py)."""
        return self.get("_sweep_data_dir") or self.path("data")

    @property
    def scripts(self):
        return self.path("scripts")

    @property
    def script(self):
        """run_script: your training script ('' for the reference trainer)."""
        return self.get("run_script") or ""

    @property
    def code_dir(self):
        """Where your training code is deployed."""
        return self.path("src" if self.get("run_source_dir") else "scripts")

    @property
    def code_script(self):
        if not self.script:
            return ""
        name = self.script if self.get("run_source_dir") else self.script.rsplit("/", 1)[-1]
        return self.code_dir + "/" + name

    @property
    def code_chdir(self):
        """The directory your script's processes run in (run_script_chdir)."""
        chdir = self.get("run_script_chdir") or ""
        if not chdir:
            return self.code_dir
        return chdir if chdir.startswith("/") else self.code_dir + "/" + chdir

    @property
    def bad_nodes_file(self):
        return self.path("bad_nodes.json")

    @property
    def exclude(self):
        return list(self.get("slurm_exclude_nodes", []))

    @property
    def env_setup(self):
        """The first lines of every job script: slurm_env_setup, and with Charliecloud a USER for
        ch-run, which refuses to start without one (a job's environment is its submitter's)."""
        lines = [str(line) for line in self.get("slurm_env_setup", [])]
        if self.get("slurm_container_runtime") == "charliecloud":
            lines.append('export USER="${USER:-$(id -un)}"')
        return lines

    def container(self, workdir):
        """{step, task, batch}: how a job whose commands run in workdir starts them in the run's
        container (module_utils/rundir/container.py); all empty without one."""
        return container.argv(container.settings(self.variables), workdir)

    @property
    def batch_python(self):
        """slurm_python as a job script runs it on its batch node, in the run's scripts directory."""
        return self.container(self.scripts)["batch"] + [str(self["slurm_python"])]

    def check_settings(self):
        """scripts/node_check.conf: the run's node check settings, which every job reads when it
        starts (node_check.sh sources it), each value quoted."""
        box = self.container(self.scripts)
        return "\n".join([
            "# The node check settings of run %s, written by llmtrain.slurm.run_dirs" % js(self.name),
            "python=" + q(self["slurm_python"]),
            "timeout_s=%d" % self.int("slurm_node_check_timeout"),
            "policy=" + q(self["run_bad_node_policy"]),
            "requeue_max=%d" % self.int("run_requeue_max"),
            "gpu_policy=" + q(self["run_gpu_policy"]),
            "gpu_diag=%d" % self.int("run_gpu_diag"),
            "# the run's container (slurm_container_*): srun options of a step, the prefix of a step's",
            "# command, the prefix of a command on the batch node (all empty without one)",
        ] + ["container_%s=(%s)" % (part, words(box[part])) for part in ("step", "task", "batch")]) + "\n"

    def node_check(self, gpus, *extra):
        """The node check, the first step of every job of the run (its settings are in
        scripts/node_check.conf); gpus: what the job asks Slurm for."""
        return ["bash", self.path("scripts", "node_check.sh"), "--gpus", gpus] + list(extra)

    @property
    def job_options(self):
        """What the site requires of every job of the run, as sbatch options; a null or false one is
        not given (the module leaves it out)."""
        options = dict(self.get("slurm_sbatch_options", {}))
        options.update({"account": self.get("slurm_account"), "qos": self.get("slurm_qos"),
                        "reservation": self.get("slurm_reservation"), "constraint": self.get("slurm_constraint"),
                        "exclusive": self.get("slurm_exclusive"), "mail-type": self.get("slurm_mail_type"),
                        "mail-user": self.get("slurm_mail_user")})
        return options

    def gpu_options(self, count):
        return gpu_options(count, self.get("slurm_gpu_type"), self.get("slurm_gpu_request", "gres"))

    @property
    def threads(self):
        """CPU threads of each of a node's processes: its CPUs over its processes, at least one."""
        return max(1, self.int("slurm_cpus_per_task") // self.int("slurm_procs_per_node"))


class Facts(dict):
    """The facts a job was given; one it needs and was not given is named."""

    def __init__(self, stage, given):
        super(Facts, self).__init__(given)
        self.stage = stage

    def __missing__(self, name):
        raise KeyError("the %s job needs the fact %s, which the task did not give (facts: {%s: ...})"
                       % (self.stage, name, name))


class Job(object):
    """One Slurm job of a run's stage. A stage's class says what it is: its name, its sbatch
    options, its script's text, its done record and what the sbatch module is given besides."""

    stage = ""
    # the variables the stage reads besides the run's (RUN_VARIABLES); the action resolves these
    variables = ()
    # the values the play finds before the job (a checkpoint's name, a prompts file's digest), by name
    facts = ()

    def __init__(self, run, facts=None):
        self.run = run if isinstance(run, Run) else Run(run)
        given = dict(facts or {})
        unknown = sorted(set(given) - set(self.facts))
        if unknown:
            raise ValueError("the %s job takes no fact %s (it takes: %s)"
                             % (self.stage, ", ".join(unknown), ", ".join(self.facts) or "none"))
        self.fact = Facts(self.stage, given)

    # --- what a stage says -------------------------------------------------------------------

    @property
    def name(self):
        return "llmtrain-%s-%s" % (self.stage, self.run.name)

    @property
    def chdir(self):
        return self.run.dir

    @property
    def done_file(self):
        return None

    def options(self):
        raise NotImplementedError

    def lines(self):
        """The script's lines after its first two."""
        raise NotImplementedError

    def submit(self):
        """What the sbatch module is given besides the script (wait, exclude, after_records, ...)."""
        return {}

    # --- made of those -----------------------------------------------------------------------

    def script(self):
        return "\n".join([SHEBANG, MANAGED] + list(self.lines())) + "\n"

    def module_args(self):
        """The llmtrain.slurm.sbatch options that submit this job."""
        args = dict(name=self.name, content=self.script(), options=self.options(), chdir=self.chdir)
        if self.done_file:
            args["done_file"] = self.done_file
        args.update(self.submit())
        return args

    def slurm_options(self, own, gpus=0, requeue=True):
        """The job's sbatch options: the run's partition and one log per job id (its working directory's
        logs/), its own, its GPUs on each node, and what the site requires of every job of the run. A
        job that requeues is put back in the queue by its node check when a node is bad (run role)."""
        options = {"partition": self.run["slurm_partition"], "output": LOG}
        if requeue:
            options["requeue"] = True
        options.update(own)
        options.update(self.run.gpu_options(gpus))
        options.update(self.run.job_options)
        return options

    # --- the lines most jobs share ------------------------------------------------------------

    def threads_line(self, threads):
        return ("export OMP_NUM_THREADS=${OMP_NUM_THREADS:-%d} MKL_NUM_THREADS=${MKL_NUM_THREADS:-%d} "
                "OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-%d}" % (threads, threads, threads))

    def node_check_line(self, gpus, *extra):
        return words(self.run.node_check(gpus, *extra)) + " || exit $?"

    def secrets_line(self):
        """slurm_secret_env's file, sourced with tracing off: set -x in slurm_env_setup would print
        the exported secrets into the log."""
        secrets = q(self.run.path("env", "secrets.env"))
        return ("if [ -f %s ]; then case $- in *x*) set +x; . %s; set -x ;; *) . %s ;; esac; fi"
                % (secrets, secrets, secrets))

    def cd_scripts_line(self):
        return "cd %s/scripts || exit %d" % (q(self.run.dir), exit_code("SETTING"))

    def job_end_line(self, done_file):
        """The job records its own end: a play that did not wait for it knows it completed, also
        once Slurm has forgotten the job."""
        return ('exec %s -m llmtrain_node.job_end --done-file %s --job-id "${SLURM_JOB_ID}"'
                % (words(self.run.batch_python), q(done_file)))


# The variables every job reads through Run.
RUN_VARIABLES = (
    "run_name", "slurm_workspace", "slurm_python", "slurm_env_setup", "slurm_container_runtime",
    "slurm_container_image", "slurm_container_mounts", "slurm_container_args", "slurm_partition",
    "slurm_cpus_per_task", "slurm_procs_per_node", "slurm_gpus_per_node", "slurm_gpu_type", "slurm_gpu_request",
    "slurm_exclude_nodes", "slurm_sbatch_options", "slurm_account", "slurm_qos", "slurm_reservation",
    "slurm_constraint", "slurm_exclusive", "slurm_mail_type", "slurm_mail_user", "run_script", "run_source_dir",
    "run_script_chdir",
)
