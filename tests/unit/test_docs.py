"""docs/: the committed reference is exactly what tools/docs.py writes from the sources."""

import importlib.util
import os
import subprocess
import sys

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


def test_every_page_is_linked_from_the_index():
    tool = load_docs_tool()
    index = read(os.path.join(ROOT, "docs", "reference.md"))
    pages = tool.generated_paths(os.path.join(ROOT, "docs")) - {"reference.md"}
    assert pages and all("](%s)" % page in index for page in pages)
