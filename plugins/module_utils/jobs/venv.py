# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The venv job: the Python venv that slurm_python names, made on a compute node (so that pip
finds the nodes' own libraries) from deploy_venv_packages, built beside its place and swapped in
once it imports torch.

Its script stays shell, with its two Python heredocs (re-pointing the venv's scripts at its final
directory, marking the job's record completed): the job is the same for every run and runs in the
workspace before any run's scripts directory (and its copy of the node package) is there, so it
cannot run a module of that package."""

from __future__ import annotations

import posixpath

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.base import Job, exit_code, q, words

# the record of the job that made the venv, in the venv: the sbatch module writes it as it submits
# the job, the job marks it completed at its end
RECORD = ".llmtrain-venv.json"


def venv_dir(slurm_python):
    """The venv's directory: slurm_python is its bin/python."""
    return posixpath.dirname(posixpath.dirname(str(slurm_python)))


def record_file(slurm_python):
    """The venv job's record, which a job that must start after it waits for (after_records)."""
    return venv_dir(slurm_python) + "/" + RECORD


class Venv(Job):

    stage = "venv"
    variables = ("deploy_venv_base_python", "deploy_venv_packages", "deploy_venv_pip_args",
                 "deploy_venv_system_site_packages", "deploy_venv_time_limit", "deploy_venv_mem", "deploy_tokenizer",
                 "run_wandb_project")

    @property
    def name(self):
        # one venv for every run that names this slurm_python
        return "llmtrain-venv"

    @property
    def chdir(self):
        # its log goes to the workspace's logs/ (the job belongs to no run); slurm_workspace as it is
        # written, a trailing / too: the job's fingerprint holds its chdir
        return str(self.run["slurm_workspace"])

    @property
    def dir(self):
        return venv_dir(self.run["slurm_python"])

    @property
    def done_file(self):
        return record_file(self.run["slurm_python"])

    @property
    def packages(self):
        """deploy_venv_packages, then what the run needs: tokenizers for a tokenizer other than bytes,
        wandb for W&B logging (run_wandb_project); also where deploy_venv_packages names them (pip takes
        a package's two requirements together)."""
        needed = (["tokenizers"] if self.run["deploy_tokenizer"] != "bytes" else []) + (
            ["wandb"] if self.run.get("run_wandb_project") else [])
        return [str(package) for package in self.run.get("deploy_venv_packages", [])] + needed

    def options(self):
        run = self.run
        return self.slurm_options({"nodes": 1, "ntasks": 1, "cpus-per-task": run.int("slurm_cpus_per_task"),
                                   "mem": run["deploy_venv_mem"], "time": run["deploy_venv_time_limit"]}, requeue=False)

    def lines(self):
        run = self.run
        # in the run's container where there is one: the venv is made by, and for, the image's Python
        python_in = words(run.container(run.scripts)["batch"])
        base_python = q(run["deploy_venv_base_python"])
        site_packages = " --system-site-packages" if boolean(run.get("deploy_venv_system_site_packages", False), strict=False) else ""
        pip_words = words([str(arg) for arg in run.get("deploy_venv_pip_args", [])] + self.packages)
        lines = [
            "# The Python venv that slurm_python names, made on a compute node (so that pip finds the",
            "# nodes' own libraries), from deploy_venv_packages. It is built beside its place and swapped",
            "# in once it imports torch: a failed build leaves the old venv as it was, and no directory",
            "# but a venv made here is ever replaced.",
            "set -eu",
        ]
        lines += run.env_setup
        lines += [
            "venv=%s" % q(self.dir),
            'new="${venv}.llmtrain-new"',
            'old="${venv}.llmtrain-old"',
            "mark=.llmtrain-venv",
            "",
            "ours() {  # missing, empty, or holding this collection's mark (or its job record)",
            '    [ ! -e "$1" ] && return 0',
            '    [ -d "$1" ] || return 1',
            '    [ -e "$1/${mark}" ] || [ -e "$1/${mark}.json" ] || [ -z "$(ls -A "$1")" ]',
            "}",
            'for dir in "${venv}" "${new}" "${old}"; do',
            '    if ! ours "${dir}"; then',
            '        echo "llmtrain: ${dir} holds files that are not a venv made by llmtrain.slurm; nothing was changed." \\',
            '             "Point slurm_python at a directory of its own." >&2',
            "        exit %d" % exit_code("SETTING"),
            "    fi",
            "done",
            "",
            'echo "llmtrain: making ${venv} on $(hostname) with $(%s %s --version 2>&1)"' % (python_in, base_python),
            'rm -rf -- "${new}" "${old}"',
            '%s %s -m venv%s "${new}"' % (python_in, base_python, site_packages),
            'touch "${new}/${mark}"',
            '%s "${new}/bin/python" -m pip install --disable-pip-version-check --no-input \\' % python_in,
            "    " + pip_words,
            '%s "${new}/bin/python" -c \'import sys, torch; print("llmtrain: venv ready: Python", sys.version.split()[0], '
            '"torch", torch.__version__)\'' % python_in,
            "",
            "# Scripts and activate files name the directory they were made in: make them name the final one.",
            '%s "${new}/bin/python" - "${new}" "${venv}" <<\'PYTHON\'' % python_in,
            "import os, sys",
            "new, final = (os.fsencode(p) for p in sys.argv[1:])",
            'for name in os.listdir(os.path.join(new, b"bin")) + [b"../pyvenv.cfg"]:',
            '    path = os.path.join(new, b"bin", name)',
            "    if os.path.islink(path) or not os.path.isfile(path):",
            "        continue",
            '    with open(path, "rb") as handle:',
            "        data = handle.read()",
            '    if new in data and b"\\0" not in data:',
            '        with open(path, "wb") as handle:',
            "            handle.write(data.replace(new, final))",
            "PYTHON",
            "",
            "# the job's record (llmtrain.slurm.sbatch wrote it as it submitted the job) goes with the new venv",
            'if [ -f "${venv}/${mark}.json" ]; then cp -p -- "${venv}/${mark}.json" "${new}/${mark}.json"; fi',
            'if [ -e "${venv}" ]; then mv -T -- "${venv}" "${old}"; fi',
            'mv -T -- "${new}" "${venv}"',
            'rm -rf -- "${old}"',
            'echo "llmtrain: ${venv} is in place"',
            "",
            "# ... and says this job completed (as llmtrain_node.job_end does for the run's jobs; this script is",
            "# the same for every run, so it does not run the run's copy): a run that did not wait for the job",
            "# (pretrain_watch=false) knows it made the venv, also once Slurm has forgotten it",
            '%s "${venv}/bin/python" - "${venv}/${mark}.json" "${SLURM_JOB_ID:-}" <<\'PYTHON\'' % python_in,
            "import json, os, sys, time",
            "path, job_id = sys.argv[1:]",
            "try:",
            "    with open(path) as handle:",
            "        record = json.load(handle)",
            "except (OSError, ValueError):",
            "    sys.exit(0)",
            'if isinstance(record, dict) and str(record.get("job_id")) == job_id and record.get("fingerprint"):',
            '    record.update(state="COMPLETED", exit_code="0:0", end_time=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()))',
            '    with open(path + ".tmp", "w") as handle:',
            "        json.dump(record, handle, sort_keys=True)",
            '    os.replace(path + ".tmp", path)',
            "PYTHON",
        ]
        return lines
