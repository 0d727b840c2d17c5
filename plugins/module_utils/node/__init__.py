# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The code that runs on the compute nodes: the training job's own logic (job.py, and run_files.py, the
run directory's shared files), the node check (node_check.py), the network check
(network_check.py, link_speed.py), the training job's hang watch (hang.py) and what they need (gpu.py, nccl.py, atomic.py, bad_nodes.py,
exit_codes.py; event_files.py, a script's TensorBoard event files: its progress where it writes no metrics file). The
modules use the same files. llmtrain.slurm.run_dirs ships this package to
<run>/scripts/llmtrain_node/ (node_package.py's list), and the
job scripts run `python -m llmtrain_node.node_check` with <run>/scripts first on PYTHONPATH.
Inside the package, imports are relative and nothing outside Python's standard library is
imported at import time (network_check.py imports torch when it measures), so that it imports
in a bare interpreter on the nodes."""
