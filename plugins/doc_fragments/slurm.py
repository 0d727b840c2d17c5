# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    # What every module that talks to Slurm shares: where it runs and what it needs.
    DOCUMENTATION = r"""
options: {}
requirements:
  - The Slurm client commands (C(scontrol), C(squeue); C(sbatch) and C(scancel) to submit
    and cancel) on the target's PATH, configured to reach the controller (C(slurm.conf) or
    E(SLURM_CONF)).
notes:
  - Runs on the login node; compute nodes need no Ansible access.
  - Works without Slurm accounting. Job details come from C(scontrol show job) and
    C(squeue); C(sacct) is asked only when the controller has forgotten a job and
    accounting is enabled. A finished job known to neither is reported with state
    V(UNKNOWN), not as an error.
  - Every Slurm command is run as an argument vector, never through a shell.
"""

    # Job states, for RETURN blocks and descriptions.
    JOB_STATES = r"""
options: {}
notes:
  - "Active job states (the job still holds or waits for resources): V(PENDING),
    V(CONFIGURING), V(RUNNING), V(COMPLETING), V(SUSPENDED), V(STOPPED), V(SIGNALING),
    V(STAGE_OUT), V(REQUEUED), V(REQUEUE_HOLD), V(REQUEUE_FED), V(RESIZING),
    V(RESV_DEL_HOLD)."
  - "Finished job states: V(COMPLETED) (the only success), V(FAILED), V(CANCELLED),
    V(TIMEOUT), V(NODE_FAIL), V(OUT_OF_MEMORY), V(BOOT_FAIL), V(DEADLINE), V(PREEMPTED),
    V(SPECIAL_EXIT), V(REVOKED), and V(UNKNOWN) for a job the controller has forgotten."
"""

    # Tolerance of a controller that does not answer, for modules that wait on jobs.
    UNREACHABLE = r"""
options:
  unreachable_timeout:
    description:
      - Seconds to keep retrying, once per check, while the Slurm controller does not answer
        (stopped, restarting, overloaded) before failing. The jobs keep running meanwhile; the
        failure message says so and that running the task again re-attaches.
      - V(0) fails at the first unanswered query.
    type: float
    default: 0
    version_added: 0.1.0
"""
