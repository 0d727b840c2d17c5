"""One definition per variable: each role's meta/argument_specs.yml is where a variable is declared
(type, choices, default, description), and these tests fail when that drifts from what the
collection reads.

- a role's defaults/main.yml gives exactly the defaults its spec gives;
- no variable is declared by two roles, nor twice with different specs in one role;
- every declared variable is read somewhere (a task, a template, a playbook, or the Python that
  checks the inputs), and every run variable read in a task, template or playbook is declared
  (by a spec, or as the role's own computed value in vars/main.yml, a set_fact, a register or a
  task's vars);
- what the roles compute, and every name the collection's own inventories, scenarios and tests
  set, passes the check that refuses a name with a role's prefix that no role defines.
"""

import glob
import os
import re

import pytest
import yaml
from jinja2 import Environment, nodes

from ansible_collections.llmtrain.slurm.plugins.filter.variables import computed, prefixes, unknown_variables
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import PARAMS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(os.path.basename(os.path.dirname(path)) for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta")))
# the prefixes of the variables a user sets; a name with one of them is a run variable
PUBLIC = re.compile(r"^(slurm|nccl_env|preflight|deploy|pretrain|inference|local_cluster|run|status|sweep)_[a-z0-9_]+$")
# keys whose string value is a bare Jinja expression, not a template
BARE = {"when", "until", "changed_when", "failed_when", "that"}
JINJA = Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def specs():
    """role -> {option: spec}, over all entry points of the role; a name declared twice differently fails."""
    found = {}
    for role in ROLES:
        options = {}
        for entry_name, entry in load(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"))["argument_specs"].items():
            for name, spec in (entry.get("options") or {}).items():
                assert options.get(name, spec) == spec, (
                    "roles/%s/meta/argument_specs.yml declares %s twice, differently (entry point %s): "
                    "share one definition (a YAML anchor)" % (role, name, entry_name))
                options[name] = spec
        found[role] = options
    return found


SPECS = specs()


def yaml_files():
    patterns = ["roles/*/tasks/*.yml", "roles/*/handlers/*.yml", "roles/*/vars/*.yml", "roles/*/defaults/*.yml",
                "playbooks/*.yml"]
    return sorted(path for pattern in patterns for path in glob.glob(os.path.join(ROOT, pattern)))


def template_files():
    return sorted(glob.glob(os.path.join(ROOT, "roles", "*", "templates", "*.j2"))
                  + glob.glob(os.path.join(ROOT, "playbooks", "templates", "*.j2")))


def names_read(text, bare=False):
    """The variable names a Jinja template (or a bare expression) loads."""
    if bare:
        text = "{{ %s }}" % text
    elif "{{" not in text and "{%" not in text:
        return set()
    return set(node.name for node in JINJA.parse(text).find_all(nodes.Name) if node.ctx == "load")


def walk(value, found, declared, key=None):
    """Jinja reads of a YAML document into found; the names it sets (set_fact, register, vars,
    loop_var) into declared."""
    if isinstance(value, dict):
        for name in ("register", "loop_var"):
            if isinstance(value.get(name), str):
                declared.add(value[name])
        for name in ("ansible.builtin.set_fact", "set_fact", "vars"):
            if isinstance(value.get(name), dict):
                declared.update(value[name])
        for child_key, child in value.items():
            walk(child, found, declared, child_key)
    elif isinstance(value, list):
        for child in value:
            walk(child, found, declared, key)
    elif isinstance(value, str):
        found.update(names_read(value, bare=key in BARE))


def jinja_reads():
    """name -> [file that reads it], and the names tasks and role vars set."""
    reads, declared = {}, set()
    for path in yaml_files():
        found = set()
        document = load(path)
        walk(document, found, declared)
        if os.sep + "vars" + os.sep in path and isinstance(document, dict):
            declared.update(document)
        for name in found:
            reads.setdefault(name, []).append(os.path.relpath(path, ROOT))
    for path in template_files():
        with open(path, encoding="utf-8") as handle:
            for name in names_read(handle.read()):
                reads.setdefault(name, []).append(os.path.relpath(path, ROOT))
    return reads, declared


def python_reads():
    """Run variables the input checks read by name in Python (a string literal that is exactly the
    name), and the nccl_env_* names read through module_utils/node/nccl.py's table."""
    found = set()
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        found.update(name for name in re.findall(r"""["']([a-z0-9_]+)["']""", text) if PUBLIC.match(name))
        if path.endswith(os.path.join("module_utils", "node", "nccl.py")):
            table = re.search(r"^VARIABLES = \{(.*?)^\}", text, re.M | re.S).group(1)
            found.update("nccl_env_" + suffix for suffix in re.findall(r"""^\s*"([a-z_]+)":""", table, re.M))
            found.add("nccl_env_extra")  # values.get("extra"), the table's catch-all
    return found


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_the_specs_defaults(role):
    path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    defaults = (load(path) if os.path.exists(path) else None) or {}
    spec = SPECS[role]
    where = "roles/%s/defaults/main.yml against roles/%s/meta/argument_specs.yml" % (role, role)
    assert not sorted(set(defaults) - set(spec)), "%s: defaults of undeclared variables" % where
    missing = sorted(name for name, option in spec.items() if "default" in option and name not in defaults)
    assert not missing, "%s: declared defaults missing from defaults/main.yml" % where
    differ = sorted("%s (spec %r, defaults %r)" % (name, spec[name].get("default"), value)
                    for name, value in defaults.items() if spec[name].get("default") != value)
    assert not differ, "%s: the two defaults differ" % where


def test_no_variable_is_declared_by_two_roles():
    owners = {}
    for role, options in SPECS.items():
        for name in options:
            owners.setdefault(name, []).append(role)
    assert not dict((name, roles) for name, roles in owners.items() if len(roles) > 1)


def test_each_role_declares_only_names_with_its_own_prefix():
    """A variable's name says which role owns it (ansible-lint's var-naming[no-role-prefix], with no skip):
    slurm_* are the slurm role's, run_* the run role's, pretrain_* the pretrain role's, and so on. A
    role's own name may be its required input (the sweep role's sweep): it has no default, so the
    role defines it nowhere."""
    stray = sorted("%s (roles/%s)" % (name, role) for role, options in SPECS.items() for name in options
                   if not name.startswith(role + "_") and not (name == role and options[name].get("required")
                                                               and "default" not in options[name]))
    assert not stray, "declared by a role whose prefix they do not carry: rename them or move them"


def test_the_run_fingerprint_takes_every_input_and_nothing_computed():
    """roles/run/vars/main.yml fingerprints the run from the variables with the inputs' prefixes, less
    _run_computed: every run_* name the run role computes or records must be listed there (or the
    fingerprint would hold a computed value, and a finished run would never be recognised), and no
    declared input may be (or a changed one would not train again)."""
    run_vars = load(os.path.join(ROOT, "roles", "run", "vars", "main.yml"))
    computed = set(run_vars["_run_computed"])
    declared = jinja_reads()[1]
    made = set(name for name in run_vars if name.startswith("run_")) | set(
        name for name in declared if name.startswith("run_"))
    inputs = set(name for options in SPECS.values() for name in options)
    assert sorted(made - inputs - computed) == [], "computed by the run role but missing from _run_computed"
    assert sorted(computed & inputs) == [], "declared inputs listed in _run_computed: they would leave the fingerprint"
    assert re.search(r"varnames', '\^\((\w+\|)*run(\|\w+)*\)_'", open(
        os.path.join(ROOT, "roles", "run", "vars", "main.yml")).read()), "the fingerprint's prefixes lack run_"


def test_every_declared_variable_is_read():
    read = set(jinja_reads()[0]) | python_reads()
    unread = sorted("%s (roles/%s)" % (name, role) for role, options in SPECS.items() for name in options
                    if name not in read)
    assert not unread, "declared and read nowhere: remove them from the spec and defaults, or read them"


def test_every_run_variable_read_is_declared():
    reads, declared = jinja_reads()
    spec_names = set(name for options in SPECS.values() for name in options)
    undeclared = sorted("%s (%s)" % (name, ", ".join(sorted(set(files)))) for name, files in reads.items()
                        if PUBLIC.match(name) and name not in spec_names and name not in declared)
    assert not undeclared, "read but declared by no argument spec: add each to its role's meta/argument_specs.yml"


def test_the_checks_see_undeclared_and_unread_names(tmp_path):
    """The scanners themselves: a read in a when, a template, a bare that; a name set by set_fact."""
    found, declared = set(), set()
    walk([{"name": "t", "when": "pretrain_x | bool", "ansible.builtin.debug": {"msg": "{{ slurm_y ~ run_z }}"},
           "vars": {"_private": "{{ deploy_w }}"}},
          {"ansible.builtin.set_fact": {"run_made": 1}, "register": "run_result"},
          {"ansible.builtin.assert": {"that": ["inference_v > 0"]}}], found, declared)
    assert {"pretrain_x", "slurm_y", "run_z", "deploy_w", "inference_v"} <= found
    assert {"run_made", "run_result", "_private"} <= declared
    assert names_read("{% for x in nccl_env_list %}{{ x }}{% endfor %}") >= {"nccl_env_list"}


def fallbacks(text, bare=False):
    """Names read through `| default(...)` in a template or bare expression."""
    if bare:
        text = "{{ %s }}" % text
    elif "{{" not in text and "{%" not in text:
        return set()
    return set(node.node.name for node in JINJA.parse(text).find_all(nodes.Filter)
               if node.name in ("default", "d") and isinstance(node.node, nodes.Name))


def role_time(document, path):
    """What of a file runs where the roles' defaults are loaded: a playbook's plays themselves (their
    `when`, `hosts`) are read before any role, so only their tasks count."""
    if not path.startswith(os.path.join(ROOT, "playbooks")):
        return document
    return [play.get(key) for play in document or [] for key in ("pre_tasks", "tasks", "post_tasks", "roles")
            if play.get(key)]


def test_no_declared_variable_has_a_second_default():
    """`run_gpu_policy | default('strict')` in another role is a second definition of its default,
    free to drift from the spec's: a stage that reads a variable depends on the role that declares it."""
    spec_names = set(name for options in SPECS.values() for name in options)
    found = []
    for path in yaml_files() + template_files():
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if path.endswith(".j2"):
            names = fallbacks(text)
        else:
            names = set()

            def visit(value, key=None):
                if isinstance(value, dict):
                    for child_key, child in value.items():
                        visit(child, child_key)
                elif isinstance(value, list):
                    for child in value:
                        visit(child, key)
                elif isinstance(value, str):
                    names.update(fallbacks(value, bare=key in BARE))
            visit(role_time(yaml.safe_load(text), path))
        found.extend("%s in %s" % (name, os.path.relpath(path, ROOT)) for name in sorted(names & spec_names))
    assert not found, "declared variables given a second default with | default(...)"


def python_constant(path, name):
    """A module-level tuple/list constant of a Python file, read without importing it (the trainer
    imports torch; module_utils import ansible_collections)."""
    import ast
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("%s has no constant %s" % (path, name))


def module_choices(module, option):
    """The choices a module's documentation (checked against its argument_spec by ansible-test) gives."""
    import ast
    with open(os.path.join(ROOT, "plugins", "modules", module + ".py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    text = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets))
    return list(yaml.safe_load(text)["options"][option]["choices"])


# Where code other than the spec lists a variable's choices: the input checks (which a stage run
# alone also applies), the reference trainer's own CLI, the modules the roles pass the value to.
CHOICE_COPIES = {
    "pretrain_parallel": [("roles/deploy/files/trainer/config.py", "PARALLEL")],
    "run_wandb_mode": [("roles/deploy/files/trainer/config.py", "WANDB_MODES")],
    "slurm_gpu_request": [("plugins/filter/run.py", "GPU_REQUESTS")],
    "slurm_container_runtime": [("plugins/module_utils/rundir/container.py", "RUNTIMES")],
    "run_gpu_policy": [("module:slurm_node_check", "gpu_policy"), ("plugins/module_utils/node/node_check.py", "GPU_POLICIES")],
    "run_gpu_diag": [("module:slurm_node_check", "gpu_diag"), ("plugins/module_utils/node/gpu_health.py", "DIAG_LEVELS")],
}


@pytest.mark.parametrize("name", sorted(CHOICE_COPIES))
def test_choices_listed_elsewhere_are_the_specs(name):
    spec = dict((option, value) for options in SPECS.values() for option, value in options.items())[name]
    for where, attribute in CHOICE_COPIES[name]:
        if where.startswith("module:"):
            copy = module_choices(where.split(":", 1)[1], attribute)
        else:
            copy = python_constant(where, attribute)
        assert sorted(copy) == sorted(spec["choices"]), "%s: %s %s lists %s, the spec %s" % (
            name, where, attribute, copy, spec["choices"])


# The input checks read these choices from the specs themselves (inputs/specs.py).
CHOICES_READ_FROM_SPECS = {"pretrain_parallel": "ddp", "pretrain_network_policy": "warn", "pretrain_hang_policy": "requeue",
                           "run_wandb_mode": "online"}


@pytest.mark.parametrize("name", sorted(CHOICES_READ_FROM_SPECS))
def test_the_input_checks_take_every_choice_of_the_spec_and_refuse_another(name):
    from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs
    spec = dict((option, value) for options in SPECS.values() for option, value in options.items())[name]
    extra = dict(run_wandb_project="p") if name == "run_wandb_mode" else {}
    for choice in spec["choices"]:
        assert [m for m in inputs.validate(dict(extra, **{name: choice})) if name in m] == [], (name, choice)
    refused = [m for m in inputs.validate(dict(extra, **{name: "no-such-choice"})) if name in m]
    assert refused and all(str(c) in refused[0] for c in spec["choices"] if name != "pretrain_parallel"), refused


def test_every_spec_choice_list_is_accounted_for():
    """A new choice variable whose choices code repeats belongs in CHOICE_COPIES; one that only the spec
    lists is listed here as such."""
    only_in_spec = {"run_bad_node_policy", "local_cluster_state", "local_cluster_task_plugin", "inference_serve_state"}
    with_choices = set(name for options in SPECS.values() for name, spec in options.items() if spec.get("choices"))
    assert with_choices == set(CHOICE_COPIES) | only_in_spec | set(CHOICES_READ_FROM_SPECS)


def test_the_unknown_variable_check_knows_the_prefixes_and_every_name_the_roles_compute():
    """llmtrain.slurm.unknown_variables refuses a name with a role's prefix that no argument spec
    declares, unless the roles compute it (its list: the run role's _run_computed). A public name
    that a role's vars, a set_fact or a register makes and that list lacks would be refused by the
    next stage's check."""
    assert sorted(prefixes()) == sorted(name + "_" for name in PUBLIC.pattern[2:].split(")")[0].split("|"))
    spec_names = set(name for options in SPECS.values() for name in options)
    made = set(name for name in jinja_reads()[1] if PUBLIC.match(name)) - spec_names
    assert sorted(made - computed()) == [], "computed by a role but missing from roles/run/vars/main.yml _run_computed"


def inventory_names(group):
    """The variable names an inventory group sets: its vars, its hosts' and its children's."""
    group = group or {}
    names = set(group.get("vars") or {})
    for host in (group.get("hosts") or {}).values():
        names.update(host or {})
    for child in (group.get("children") or {}).values():
        names |= inventory_names(child)
    return names


# a setting in a YAML file, commented out as an example to take (an inventory's)
COMMENTED = re.compile(r"^\s*#\s*([a-z][a-z0-9_]*):", re.M)
# name=value: an extra variable (-e name=value, --extra-vars=name=value)
EXTRA_VAR = re.compile(r"(?:^|--extra-vars=)([a-z][a-z0-9_]*)=")


def names_set_in_python(path):
    """What an integration test sets: keyword arguments and dict keys (its extra vars), -e
    name=value strings, and the inventories it writes as YAML text."""
    import ast
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.Dict):
            # a sweep's key below a variable (pretrain_model.n_layer) sets that variable; a list
            # member's sweep_params is its parameter count, no variable (sweep/members.py PARAMS)
            names.update(key.value.split(".")[0] for key in node.keys if isinstance(key, ast.Constant)
                         and isinstance(key.value, str) and key.value != PARAMS)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.lstrip().startswith("all:"):  # its %s placeholders filled in
                names |= inventory_names(yaml.safe_load(re.sub(r"%[sdr]", "x", node.value))["all"])
            else:
                names.update(EXTRA_VAR.findall(node.value))
    return names


def names_the_collection_sets():
    """{name: [file]} of every variable the shipped inventories (commented examples included), the
    molecule scenarios and the integration tests set."""
    found = {}

    def add(names, path):
        for name in names:
            found.setdefault(name, []).append(os.path.relpath(path, ROOT))
    for path in glob.glob(os.path.join(ROOT, "inventories", "*", "hosts.yml")):
        add(set().union(*(inventory_names(group) for group in load(path).values())), path)
    for path in glob.glob(os.path.join(ROOT, "inventories", "*", "*_vars", "*.yml")):
        with open(path, encoding="utf-8") as handle:
            add(set(load(path) or {}) | set(COMMENTED.findall(handle.read())), path)
    for path in glob.glob(os.path.join(ROOT, "extensions", "molecule", "*", "*.yml")):
        declared = set()
        walk(load(path), set(), declared)
        with open(path, encoding="utf-8") as handle:
            add(declared | set(EXTRA_VAR.findall(handle.read())), path)
    for path in glob.glob(os.path.join(ROOT, "tests", "integration", "*.py")):
        add(names_set_in_python(path), path)
    return found


# Set by tests/integration/test_minimal_inventory.py to be refused.
REFUSED_ON_PURPOSE = {"slurm_node", "pretrain_run_name", "nccl_env_socket_ifnam"}


def test_nothing_the_collection_itself_sets_is_refused():
    found = names_the_collection_sets()
    assert {"slurm_nodes", "local_cluster_state", "nccl_env_ib_hca", "pretrain_steps", "run_force"} <= set(found)
    refused = dict((message.split()[0], message) for message in unknown_variables(sorted(found)))
    assert set(refused) >= REFUSED_ON_PURPOSE, "the integration test of the refusal sets these: the scan missed them"
    assert sorted(set(refused) - REFUSED_ON_PURPOSE) == [], "\n".join(
        "%s (%s)" % (refused[name], ", ".join(sorted(set(found[name])))) for name in sorted(set(refused) - REFUSED_ON_PURPOSE))
