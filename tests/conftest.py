"""Make `ansible_collections.llmtrain.slurm` importable from this checkout.

.collections/ansible_collections/llmtrain/slurm links to the repository root, the same
wiring ansible.cfg uses, so tests import the collection exactly as Ansible does."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".collections")
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# ansible-core replaces sys.intern with a patch object when its module_utils load; torch's
# compiler (torch._dynamo), imported later in the same process, then refuses to start.
# The trainer tests share the process with the plugin tests, so torch loads first.
try:
    import torch._dynamo  # noqa: F401  pylint: disable=unused-import
except ImportError:
    pass
