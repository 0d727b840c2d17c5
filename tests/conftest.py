"""Make `ansible_collections.llmtrain.slurm` importable from this checkout.

.collections/ansible_collections/llmtrain/slurm links to the repository root, the same
wiring ansible.cfg uses, so tests import the collection exactly as Ansible does."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

TRAINER_TESTS = os.path.join(ROOT, "tests", "unit", "trainer")


def pytest_configure(config):
    """ansible-core replaces sys.intern with a patch object when its module_utils load; torch's
    compiler (torch._dynamo), imported later in the same process, then refuses to start.
    Where the trainer tests share the process with the plugin tests, torch loads first; a run
    of other tests only (ansible-test units runs tests/unit/plugins) skips that import."""
    for arg in config.args:
        path = os.path.join(str(config.invocation_params.dir), str(arg).split("::", 1)[0])
        path = os.path.realpath(path)
        if path == TRAINER_TESTS or path.startswith(TRAINER_TESTS + os.sep) or TRAINER_TESTS.startswith(path + os.sep):
            try:
                import torch._dynamo  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
            except ImportError:
                pass
            return
