"""The release artifact: `ansible-galaxy collection build` of this checkout, installed into an
empty collections path and used from there, without Slurm and without the checkout.

The build runs on a copy of the files git knows, with the debris of a working checkout
planted next to them (a virtualenv, caches, collected runs, ansible-test output, an older
tarball), so galaxy.yml's build_ignore is checked whatever state this checkout is in."""

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
TARBALL = "llmtrain-slurm-0.1.0.tar.gz"

# What a working checkout holds beside the sources: none of it may ship.
DEBRIS = [
    ".venv/bin/python",
    ".venv/lib/python3.11/site-packages/torch/__init__.py",
    ".pytest_cache/v/cache/nodeids",
    ".ansible/tmp/ansible-local-1/x",
    ".cache/pip/http/x",
    "runs/local-demo/report.md",
    "runs/local-demo/checkpoints/step_000800.pt",
    "tests/output/collection/ansible_collections/llmtrain/slurm/galaxy.yml",
    "tests/output/junit/python3.11-modules-units.xml",
    "plugins/modules/__pycache__/sbatch.cpython-311.pyc",
    "roles/deploy/files/trainer/__pycache__/train.cpython-311.pyc",
    "tests/unit/__pycache__/test_docs.cpython-311-pytest-9.2.0.pyc",
    "plugins/module_utils/slurm.pyc",
    "llmtrain-slurm-0.0.9.tar.gz",
    "changelogs/.plugin-cache.yaml",
]
# Paths (or first path components) that must not be in the tarball at all.
FORBIDDEN_TOP = {".venv", ".pytest_cache", ".ansible", ".cache", ".collections", ".ci", ".git", "runs"}
FORBIDDEN_ANYWHERE = {"__pycache__", ".pytest_cache"}


def run(argv, cwd, env, check=True, stderr=subprocess.STDOUT):
    """stderr=subprocess.PIPE keeps what the command warns about out of the output it prints (JSON)."""
    proc = subprocess.run(argv, cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=stderr,
                          universal_newlines=True, timeout=300, check=False)
    if check:
        command = " ".join(map(str, argv))
        assert proc.returncode == 0, "%s failed (%d):\n%s%s" % (command, proc.returncode, proc.stdout, proc.stderr or "")
    return proc


def clean_env(home, config, collections=None):
    """Nothing of this checkout's Ansible setup: an empty ansible.cfg, a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(config), ANSIBLE_HOME=str(home), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(collections or home / "collections"),
               ANSIBLE_ROLES_PATH=str(home / "roles"), PATH=BIN + os.pathsep + env.get("PATH", ""))
    return env


def copy_sources(target):
    """The files git knows (tracked, and untracked but not ignored), as make ansible-test-tree copies them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            stdout=subprocess.PIPE, check=True).stdout.decode().split("\0")
    for path in filter(None, listed):
        source = os.path.join(ROOT, path)
        if not os.path.lexists(source):
            continue  # deleted, not yet staged
        destination = target / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(source):
            os.symlink(os.readlink(source), str(destination))
        else:
            shutil.copy2(source, str(destination))


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """(tarball member names, environment using only the installed collection, work dir)."""
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout: the build copies the files git knows")
    base = tmp_path_factory.mktemp("release")
    source, dist, home, work = base / "src", base / "dist", base / "home", base / "work"
    for directory in (dist, home, work):
        directory.mkdir()
    config = base / "empty.cfg"
    config.write_text("")
    copy_sources(source)
    for path in DEBRIS:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text("debris\n")
    env = clean_env(home, config)

    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", dist, source], work, env)
    assert os.listdir(str(dist)) == [TARBALL]
    with tarfile.open(str(dist / TARBALL)) as tar:
        members = tar.getnames()

    installed = base / "collections"
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", installed,
         dist / TARBALL], work, env)
    yield members, clean_env(home, config, installed), work, installed
    shutil.rmtree(str(base), ignore_errors=True)


def test_tarball_ships_the_collection_and_nothing_of_the_working_tree(release):
    members = release[0]
    for wanted in ("MANIFEST.json", "FILES.json", "README.md", "meta/runtime.yml", "plugins/modules/sbatch.py",
                   "plugins/filter/nccl_env.yml", "roles/preflight/meta/argument_specs.yml",
                   "roles/deploy/files/trainer/train.py", "playbooks/pretrain.yml", "docs/reference.md",
                   "docs/modules/sbatch.md", "changelogs/changelog.yaml", "CHANGELOG.md"):
        assert wanted in members
    leaked = sorted(name for name in members
                    if name.split("/")[0] in FORBIDDEN_TOP
                    or FORBIDDEN_ANYWHERE & set(name.split("/"))
                    or name.startswith("tests/output")
                    or name == "changelogs/.plugin-cache.yaml"
                    or name.endswith((".pyc", ".tar.gz", ".pt")))
    assert leaked == []


def test_ansible_doc_reads_the_installed_collection(release):
    _members, env, work, installed = release
    proc = run([os.path.join(BIN, "ansible-doc"), "llmtrain.slurm.sbatch"], work, env)
    assert str(installed / "ansible_collections" / "llmtrain" / "slurm" / "plugins" / "modules" / "sbatch.py") in proc.stdout
    assert "Submits a batch script with `sbatch --parsable'" in proc.stdout
    for option in ("wait_timeout", "poll_interval", "cancel_on_timeout"):
        assert option in proc.stdout
    listed = json.loads(run([os.path.join(BIN, "ansible-doc"), "-t", "filter", "--list", "--json", "llmtrain.slurm"],
                            work, env, stderr=subprocess.PIPE).stdout)
    assert "llmtrain.slurm.nccl_env" in listed and "UNDOCUMENTED" not in json.dumps(listed)


def test_a_playbook_uses_the_installed_filters(release):
    _members, env, work, _installed = release
    playbook = work / "filters.yml"
    playbook.write_text("""---
- name: The collection's filters, from the installed collection
  hosts: localhost
  gather_facts: false
  vars:
    nccl_env_socket_ifname: ib0
    nccl_env_debug: warn
  tasks:
    - name: Cluster-wide values with a node's own laid over them
      ansible.builtin.assert:
        that:
          - "(vars | llmtrain.slurm.nccl_env) == {'NCCL_SOCKET_IFNAME': 'ib0', 'NCCL_DEBUG': 'WARN', 'GLOO_SOCKET_IFNAME': 'ib0'}"
          - "(vars | llmtrain.slurm.nccl_env({'nccl_env_socket_ifname': 'eth1'})).NCCL_SOCKET_IFNAME == 'eth1'"
          - "({'nccl_env_debug': 'loud'} | llmtrain.slurm.nccl_env_errors | length) == 1"
""")
    proc = run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)], work, env)
    assert "ok=1" in proc.stdout and "failed=0" in proc.stdout


def test_the_installed_preflight_playbook_rejects_missing_inputs_before_asking_slurm(release):
    _members, env, work, _installed = release
    inventory = work / "hosts.yml"
    inventory.write_text("all:\n  children:\n    slurm_login:\n      hosts:\n        localhost:\n"
                         "          ansible_connection: local\n")
    proc = run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "llmtrain.slurm.preflight",
                "-e", "slurm_gpus_per_node=0", "-e", "slurm_procs_per_node=2", "-e", "slurm_python=python3",
                "-e", "slurm_workspace=/shared/llmtrain", "-e", "slurm_node=2"], work, env, check=False)
    assert proc.returncode == 2, proc.stdout
    assert "slurm_nodes is not set: add it to the inventory" in proc.stdout
    # the installed roles' argument specs are what the variable names are checked against
    assert "slurm_node is not a variable of llmtrain.slurm: did you mean slurm_nodes?" in proc.stdout
    assert "Ask Slurm" not in proc.stdout


def test_an_execution_environment_gets_the_collections_controller_requirements_and_nothing_of_the_training(release):
    """ansible-builder reads the installed collection's meta/execution-environment.yml (not the root
    requirements.txt, which is this repository's development environment: torch, molecule, ...),
    and makes the build context of ee/execution-environment.yml. Building the image needs podman
    or docker and the base image's registry, which this machine has not."""
    _members, env, work, installed = release
    builder = os.path.join(BIN, "ansible-builder")
    found = run([builder, "introspect", "--sanitize", installed], work, env).stdout
    python = [line for line in found.splitlines() if "from collection llmtrain.slurm" in line]
    assert any(line.startswith("- 'matplotlib") for line in python), found
    assert not [line for line in python if any(name in line for name in ("torch", "molecule", "pytest", "ansible-lint"))]
    assert "openssh-client [platform:dpkg]" in found

    context = work / "ee-context"
    run([builder, "create", "-f", os.path.join(ROOT, "ee", "execution-environment.yml"), "-c", context,
         "--output-filename", "Containerfile"], work, env)
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    assert "ansible-galaxy collection install" in containerfile and "/usr/bin/python3.11" in containerfile
    requirements = (context / "_build" / "requirements.yml").read_text()
    assert "name: llmtrain.slurm" in requirements
