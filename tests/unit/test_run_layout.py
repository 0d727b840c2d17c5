"""The run directory is defined in one place (plugins/module_utils/node/run_files.py, LAYOUT): every file or
directory that role YAML, a template or a playbook names under run_dir is listed there with what it holds,
who writes it and who reads it, and the file names the modules use come from there."""

import glob
import os
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_status
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# "{{ run_dir }}/name..." and "run_dir ~ '/name..." (a name made by a template is left out)
UNDER_RUN_DIR = re.compile(r"""run_dir \}\}/([A-Za-z0-9_.-]+)|run_dir ~ '/([A-Za-z0-9_.-]+)""")


def named_under_run_dir():
    found = {}
    for pattern in ("roles/**/*.yml", "roles/**/*.j2", "playbooks/*.yml"):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            with open(path, encoding="utf-8") as handle:
                for match in UNDER_RUN_DIR.finditer(handle.read()):
                    name = match.group(1) or match.group(2)
                    # a temporary file is its file's, written whole then renamed over it
                    found.setdefault(re.sub(r"[.]tmp\Z", "", name), os.path.relpath(path, ROOT))
    return found


def test_every_path_the_roles_name_in_the_run_directory_is_in_its_layout():
    found = named_under_run_dir()
    assert {"checkpoints", "train.done.json", "bad_nodes.json", "STOP"} <= set(found)
    missing = dict((name, where) for name, where in found.items() if name not in run_files.LAYOUT)
    assert not missing, "named under run_dir but not in run_files.LAYOUT (say what it holds there): %s" % missing


def test_the_modules_take_the_run_directorys_file_names_from_its_layout():
    for name in (run_status.DONE_FILE, run_status.STARTS_FILE, run_status.STOP_FILE, run_status.METRICS_FILE,
                 run_status.BAD_NODES_FILE, run_files.FACTS, run_files.PREEMPTED, run_files.HANG):
        assert name in run_files.LAYOUT and run_files.LAYOUT[name].strip()


# run.path("name", ...) and run.path(run_files.NAME) in the stages' job classes
JOB_PATH = re.compile(r"""run\.path\(\s*(?:"([A-Za-z0-9_.-]+)"|run_files\.([A-Z_]+))""")


def test_every_path_a_stages_job_names_in_the_run_directory_is_in_its_layout():
    found = {}
    for path in glob.glob(os.path.join(ROOT, "plugins", "module_utils", "jobs", "*.py")):
        with open(path, encoding="utf-8") as handle:
            for literal, constant in JOB_PATH.findall(handle.read()):
                name = literal or getattr(run_files, constant)
                # a temporary file is its file's, written whole then renamed over it
                found.setdefault(re.sub(r"[.]tmp\Z", "", name.split("/")[0]), os.path.relpath(path, ROOT))
    assert {"scripts", "checkpoints", "train.done.json", "metrics.jsonl", "export.done.json"} <= set(found), found
    missing = dict((name, where) for name, where in found.items() if name not in run_files.LAYOUT)
    assert not missing, "named under the run directory but not in run_files.LAYOUT (say what it holds there): %s" % missing


def test_the_trainer_keeps_the_run_directorys_names_as_the_layout_has_them():
    # the reference trainer runs without the collection: its own copies of the names must agree
    trainer = os.path.join(ROOT, "roles", "deploy", "files", "trainer")
    copies = {"metrics.py": {"METRICS_FILE": run_files.METRICS, "NODE_TIMES_FILE": run_files.NODE_TIMES},
              "runfiles.py": {"STARTS_FILE": run_files.STARTS}}
    for module, names in copies.items():
        with open(os.path.join(trainer, module), encoding="utf-8") as handle:
            text = handle.read()
        for name, value in names.items():
            assert re.search(r'^%s = "%s"' % (name, re.escape(value)), text, re.M), (module, name, value)
