"""The code that runs on the compute nodes is one package, module_utils.node, shipped as llmtrain_node
from one list (module_utils/rundir/node_package.py) by llmtrain.slurm.run_dirs: the list holds every file
of the package, and the shipped tree imports in a bare interpreter (no site-packages: no Ansible,
no torch)."""

import json
import os
import subprocess
import sys

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.join(ROOT, "plugins", "module_utils", "node")


def ship_node_package(dest):
    """Writes the llmtrain_node package into dest as run_dirs ships it (test_run_dirs_ships_the_list_s_files)."""
    for name, text in node_package.files().items():
        path = os.path.join(str(dest), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)


def test_the_list_is_every_file_of_the_package():
    shipped = sorted(name.split("/", 1)[1] for name in node_package.files())
    assert shipped == sorted(name for name in os.listdir(PACKAGE_DIR) if name.endswith(".py"))
    for name, text in node_package.files().items():
        with open(os.path.join(PACKAGE_DIR, name.split("/", 1)[1]), encoding="utf-8") as handle:
            assert handle.read() == text, name


def test_run_dirs_ships_the_list_s_files(tmp_path):
    # the controller's plugin, imported here only: the modules' unit tests import this file's helper
    from ansible_collections.llmtrain.slurm.tests.unit.plugins.action.test_run_dirs_action import run_dirs, variables

    (tmp_path / "ws").mkdir()
    result, _calls = run_dirs(tmp_path, variables(tmp_path))
    assert "scripts/llmtrain_node/node_check.py" in result["written"]
    for name, text in node_package.files("scripts/").items():
        assert (tmp_path / "ws" / "tiny" / name).read_text() == text, name


def test_the_shipped_tree_imports_in_a_bare_interpreter(tmp_path):
    ship_node_package(tmp_path)
    code = ("import json, sys\n"
            "import llmtrain_node.node_check, llmtrain_node.network_check, llmtrain_node.gpu, llmtrain_node.hang\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('llmtrain_node', 'ansible', 'ansible_collections', 'torch'))))\n")
    # -I: no PYTHONPATH, no user site, not the current directory; -S: no site-packages
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, %r)\n%s" % (str(tmp_path), code)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "llmtrain_node.atomic" in loaded and "llmtrain_node.exit_codes" in loaded
    assert not [m for m in loaded if not m.startswith("llmtrain_node")], loaded


def test_no_role_reaches_out_of_itself_for_a_file():
    """A role ships what it has (its files/ and templates/) or what a plugin gives it (run_dirs
    above), never a file found by a path that climbs out of the role."""
    climbing = []
    for top in ("roles", "playbooks"):
        for base, _dirs, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith((".yml", ".yaml", ".j2")):
                    with open(os.path.join(base, name), encoding="utf-8") as handle:
                        if "role_path }}/.." in handle.read():
                            climbing.append(os.path.relpath(os.path.join(base, name), ROOT))
    assert not climbing
