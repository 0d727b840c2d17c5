"""The exit codes of the job scripts, checks and trainer come from one table
(plugins/module_utils/node/exit_codes.py): the files made from it are up to date, and no script,
template, trainer module or page uses an exit code the table does not hold, or another number
for one it does."""

import glob
import os
import re
import runpy

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.llmtrain.slurm.plugins.action import run_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL_PATH = os.path.join(ROOT, "tools", "exit_codes.py")
TOOL = runpy.run_path(TOOL_PATH)  # its functions: {name: function}
TABLE = TOOL["load_table"]()
CODES = {entry.name: entry.code for entry in TABLE.TABLE}
NUMBERS = set(CODES.values())

LITERAL_EXIT = re.compile(r"\bexit\s+(\d+)\b")
SHELL_NAME = re.compile(r"\bEXIT_([A-Z_]+)\b")
FILTER_NAME = re.compile(r"""['"]([A-Za-z_]+)['"]\s*\|\s*llmtrain\.slurm\.exit_code\b""")
SOURCE_LINE = '. "${scripts}/exit_codes.sh" || exit %d' % CODES["FAILED"]
# "exit code 78", "exit 75", "exits with 75", "ends with 75", "exit status 2" in prose
PROSE = re.compile(r"\b(?:exit(?:s|ed)?(?:\s+(?:code|status))?(?:\s+with)?|ends?\s+with(?:\s+exit\s+code)?)\s+(\d+)\b",
                   re.IGNORECASE)
# other programs' codes that pages quote: nvidia-smi's "no driver"
NOT_OURS = re.compile(r"nvidia-smi(?:`|\))?\s*$")


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def rel(path):
    return os.path.relpath(path, ROOT)


def files(*patterns):
    found = sorted({path for pattern in patterns for path in glob.glob(os.path.join(ROOT, pattern), recursive=True)})
    assert found, patterns
    return found


SHELL_SCRIPTS = files("roles/*/files/**/*.sh", "playbooks/**/*.sh")
TEMPLATES = files("roles/*/templates/**/*.j2", "playbooks/templates/**/*.j2")
TRAINER = files("roles/deploy/files/trainer/**/*.py")
PAGES = [path for path in files("docs/**/*.md", "README.md", "roles/*/files/**/README.md", "roles/*/meta/*.yml",
                                "plugins/filter/*.yml", "plugins/modules/*.py", "roles/deploy/files/trainer/**/*.py")
         if rel(path) != TOOL["PAGE"]]


def test_the_files_made_from_the_table_are_up_to_date():
    for path, text in TOOL["outputs"]().items():
        assert read(os.path.join(ROOT, path)) == text, (
            "%s is out of date with %s: run `make docs` and commit the result" % (path, TOOL["TABLE_SOURCE"]))


def test_the_table_names_each_code_once_with_a_number_a_job_can_end_with():
    assert len(CODES) == len(TABLE.TABLE) and TABLE.BY_NAME.keys() == CODES.keys()
    assert all(re.fullmatch(r"[A-Z][A-Z_]*", name) and 0 < code < 256 for name, code in CODES.items())
    assert all(entry.by and entry.meaning and entry.action for entry in TABLE.TABLE)
    # the numbers as they have always been: a job that ended with one means the same after an upgrade
    assert (CODES["PREEMPTED"], CODES["NODE_CHECK_FAILED"], CODES["NETWORK_CHECK_FAILED"], CODES["REQUEUED_HELD"]) == (
        75, 78, 79, 100)


@pytest.mark.parametrize("path", SHELL_SCRIPTS, ids=rel)
def test_the_shell_scripts_take_their_exit_codes_from_the_table(path):
    text = read(path)
    for number, line in ((int(m.group(1)), text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())])
                         for m in LITERAL_EXIT.finditer(text)):
        # a number of their own only where exit_codes.sh itself could not be read
        assert number == 0 or line.strip() == SOURCE_LINE, "%s: %r: use ${EXIT_<name>}" % (rel(path), line)
    # a status compared or returned: 0 and 1 (bad_nodes.sh: "did not requeue") are no code of the table's
    compared = [int(n) for n in re.findall(r"(?:\$\?\s+-(?:eq|ne)|\breturn)\s+(\d+)\b", text) if int(n) > 1]
    assert not compared, "%s: %s: use ${EXIT_<name>}" % (rel(path), compared)
    unknown = set(SHELL_NAME.findall(text)) - set(CODES)
    assert not unknown, "%s: EXIT_%s not in %s" % (rel(path), unknown, TOOL["TABLE_SOURCE"])
    if SHELL_NAME.search(text) and os.path.basename(path) not in ("exit_codes.sh", "bad_nodes.sh"):
        assert SOURCE_LINE in text, "%s uses EXIT_<name> without sourcing exit_codes.sh" % rel(path)


def test_the_checks_ship_the_table_beside_them():
    assert "exit_codes.sh" in run_dirs.CHECK_SOURCES and "llmtrain_node/exit_codes.py" in node_package.files()
    bad_nodes = read(os.path.join(ROOT, "roles", "run", "files", "bad_nodes.sh"))
    # bad_nodes.sh is sourced by the scripts that source exit_codes.sh
    for script in ("node_check.sh", "network_check.sh"):
        text = read(os.path.join(ROOT, "roles", "run", "files", script))
        assert text.index(SOURCE_LINE) < text.index('"${scripts}/bad_nodes.sh"')
    assert "EXIT_REQUEUED_HELD" in bad_nodes


@pytest.mark.parametrize("path", TEMPLATES, ids=rel)
def test_the_job_templates_take_their_exit_codes_from_the_table(path):
    text = read(path)
    literal = [int(number) for number in LITERAL_EXIT.findall(text) if int(number)]
    assert not literal, "%s: exit %s: use {{ 'NAME' | llmtrain.slurm.exit_code }}" % (rel(path), literal)
    unknown = set(FILTER_NAME.findall(text)) - set(CODES)
    assert not unknown, "%s: %s not in %s" % (rel(path), unknown, TOOL["TABLE_SOURCE"])


def test_the_trainer_agrees_with_the_table():
    found = {}
    for path in TRAINER:
        for name, number in re.findall(r"^EXIT_([A-Z_]+)\s*=\s*(\d+)\b", read(path), re.MULTILINE):
            found[name] = int(number)
            assert CODES.get(name) == int(number), "%s: EXIT_%s = %s, the table says %s" % (
                rel(path), name, number, CODES.get(name))
    assert {"PREEMPTED", "RENDEZVOUS"} <= set(found)


def test_the_plugins_keep_no_exit_codes_of_their_own():
    for path in files("plugins/**/*.py"):
        if rel(path) == TOOL["TABLE_SOURCE"]:
            continue
        for name in re.findall(r"^([A-Z_]*(?:_RC|EXIT_)[A-Z_]*)\s*=\s*\d+\b", read(path), re.MULTILINE):
            # nvidia-smi's own exit code for "no driver", not one of ours
            assert (rel(path), name) == ("plugins/module_utils/node/gpu.py", "NO_DRIVER_RC"), (
                "%s: %s: take it from %s" % (rel(path), name, TOOL["TABLE_SOURCE"]))


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_pages_name_only_exit_codes_the_table_holds(path):
    text = read(path)
    for match in PROSE.finditer(text):
        number = int(match.group(1))
        if number == 0 or NOT_OURS.search(text[max(0, match.start() - 40):match.start()]):
            continue
        assert number in NUMBERS, "%s: %r: not in %s (docs/exit-codes.md)" % (
            rel(path), match.group(0), TOOL["TABLE_SOURCE"])


def test_the_messages_and_the_node_check_use_the_table():
    from ansible_collections.llmtrain.slurm.plugins.filter import messages
    from ansible_collections.llmtrain.slurm.plugins.module_utils.node import node_check
    from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import messages as composed

    assert composed.NODE_CHECK_FAILED_RC == CODES["NODE_CHECK_FAILED"]
    assert composed.NETWORK_CHECK_FAILED_RC == CODES["NETWORK_CHECK_FAILED"]
    assert node_check.BAD_NODES_RC == CODES["BAD_NODES"]
    assert all(messages.exit_code(name) == code for name, code in CODES.items())
    assert messages.FilterModule().filters()["exit_code"] is messages.exit_code
    with pytest.raises(AnsibleFilterError, match="no exit code 'PREEMPT'; the table has FAILED, SETTING"):
        messages.exit_code("PREEMPT")
