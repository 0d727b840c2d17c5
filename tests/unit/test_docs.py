"""docs/: the committed reference is exactly what tools/docs.py writes from the sources; the README stays
short, lists its guides, and no link in README.md, CONTRIBUTING.md or docs/ names a missing file."""

import glob
import importlib.util
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "docs.py")


def load_docs_tool():
    spec = importlib.util.spec_from_file_location("docs_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_committed_reference_matches_the_sources(tmp_path):
    subprocess.run([sys.executable, SCRIPT, "--out", str(tmp_path)], cwd=ROOT, check=True)
    tool = load_docs_tool()
    fresh = tool.generated_paths(str(tmp_path))
    committed = tool.generated_paths(os.path.join(ROOT, "docs"))
    assert {"reference.md", "modules/sbatch.md", "filter/nccl_env.md", "roles/preflight.md"} <= fresh
    hint = "docs/ is out of date with the plugin and role sources: run `make docs` and commit the result"
    assert sorted(committed) == sorted(fresh), hint
    stale = [path for path in sorted(fresh) if read(os.path.join(ROOT, "docs", path)) != read(tmp_path / path)]
    assert not stale, "%s (%s)" % (hint, ", ".join(stale))


def test_committed_defaults_are_written_from_the_specs():
    """A role's defaults/main.yml is generated from its argument spec: adding a variable is one entry there."""
    tool = load_docs_tool()
    written = tool.defaults_files()
    assert {"roles/run/defaults/main.yml", "roles/slurm/defaults/main.yml"} <= set(written)
    on_disk = set(os.path.relpath(path, ROOT) for path in glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml")))
    assert sorted(on_disk) == sorted(written), "a role's defaults/main.yml without a spec, or a spec without one"
    stale = [path for path in sorted(written) if read(os.path.join(ROOT, path)) != written[path]]
    assert not stale, "roles/*/defaults/main.yml out of date with meta/argument_specs.yml: run `make docs` (%s)" % ", ".join(stale)
    slurm = read(os.path.join(ROOT, "roles/slurm/defaults/main.yml"))
    # a required variable is named as such and left undefined (the input check names it when unset)
    values = yaml.safe_load(slurm)
    assert "slurm_nodes" not in values and "slurm_nodes," in slurm.split("Required, with no default", 1)[1]
    assert "slurm_partition" in values and values["slurm_partition"] is None


def test_every_page_is_linked_from_the_index():
    tool = load_docs_tool()
    index = read(os.path.join(ROOT, "docs", "reference.md"))
    pages = tool.generated_paths(os.path.join(ROOT, "docs")) - {"reference.md"}
    assert pages and all("](%s)" % page in index for page in pages)


README_LIMIT = 10240  # bytes: the README is the first page a user reads; the rest is in the guides
GUIDES_LISTED = re.compile(r"\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def hand_written_pages():
    """README.md, CONTRIBUTING.md and the guides in docs/ (the generated reference pages too)."""
    pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CONTRIBUTING.md")]
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.join(folder, name) for name in sorted(files) if name.endswith(".md")]
    return pages


def relative_links(text):
    """The link targets of a Markdown page that name a file of this repository, outside code blocks."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        yield target.split("#", 1)[0]


def test_readme_stays_short():
    size = os.path.getsize(os.path.join(ROOT, "README.md"))
    assert size <= README_LIMIT, "README.md is %d bytes, over %d: move the detail into a guide in docs/" % (
        size, README_LIMIT)


def test_every_relative_link_names_a_file_that_exists():
    broken = []
    for page in hand_written_pages():
        for target in relative_links(read(page)):
            path = os.path.normpath(os.path.join(os.path.dirname(page), target))
            if not os.path.exists(path):
                broken.append("%s -> %s" % (os.path.relpath(page, ROOT), target))
    assert not broken, "links to files that do not exist: %s" % ", ".join(broken)


def test_every_guide_the_readme_lists_exists():
    guides = set(GUIDES_LISTED.findall(read(os.path.join(ROOT, "README.md"))))
    assert {"docs/inventory.md", "docs/shared-cluster.md", "docs/own-script.md", "docs/reliability.md",
            "docs/tracking.md", "docs/local-cluster.md", "docs/large-runs.md"} <= guides
    missing = sorted(guide for guide in guides if not os.path.isfile(os.path.join(ROOT, guide)))
    assert not missing, "the README lists guides that do not exist: %s" % ", ".join(missing)
    assert os.path.isfile(os.path.join(ROOT, "CONTRIBUTING.md"))


def test_the_link_checks_notice_a_broken_link():
    page = "See [the guide](docs/gone.md#part), [a site](https://example.invalid/x), [here](#top),\n" \
           "`[not a link](in/code.md)` and\n```\n[nor](this.md)\n```\n"
    assert list(relative_links(page)) == ["docs/gone.md"]
    assert GUIDES_LISTED.findall(page) == ["docs/gone.md"]


def test_contributing_layout_names_every_module_plugin_role_playbook_and_tool():
    """A newcomer finds each file in CONTRIBUTING's layout: a new one that is not named there fails."""
    with open(os.path.join(ROOT, "CONTRIBUTING.md")) as handle:
        text = handle.read()
    layout = text.split("## Layout", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"[\w.]+", layout))

    def stems(folder, ext=".py"):
        path = os.path.join(ROOT, folder)
        return {name[:-len(ext)] if ext == ".py" else name for name in os.listdir(path)
                if name.endswith(ext) and name != "__init__.py"}

    wanted = {
        "plugins/modules": stems("plugins/modules"),
        "plugins/action": stems("plugins/action"),
        "plugins/callback": stems("plugins/callback"),
        # module_utils holds packages only, each named with its every file
        "plugins/module_utils": {s + ".py" for s in stems("plugins/module_utils")}
        | {name + "/" for name in os.listdir(os.path.join(ROOT, "plugins/module_utils"))
           if os.path.exists(os.path.join(ROOT, "plugins/module_utils", name, "__init__.py"))},
        "playbooks": stems("playbooks", ".yml"),
        "tools": {s + ".py" for s in stems("tools")},
    }
    for package in sorted(wanted["plugins/module_utils"]):
        if package.endswith("/"):
            wanted["plugins/module_utils/" + package[:-1]] = {s + ".py" for s in stems("plugins/module_utils/" + package[:-1])}
    named |= set(re.findall(r"[\w.]+/", layout))
    missing = {folder: sorted(names - named) for folder, names in wanted.items() if names - named}
    roles = sorted(name for name in os.listdir(os.path.join(ROOT, "roles"))
                   if "roles/%s/" % name not in layout)
    assert not missing and not roles, ("CONTRIBUTING.md's layout does not name", missing, roles)
