# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The exit codes of the run's job scripts, checks and trainer: the one table of them.

Who reads it: the checks' shell scripts through roles/run/files/exit_codes.sh, the job scripts
(plugins/module_utils/jobs/) and templates through exit_code (all give the numbers below), the filters that explain
a failed job (plugins/filter/messages.py), node_check.py, and docs/exit-codes.md.
tools/exit_codes.py writes exit_codes.sh and docs/exit-codes.md from it (`make docs`), and
tests/unit/test_exit_codes.py fails when a script, a template, the trainer or a page uses an
exit code that is not here, or another number for one that is.

This file is also run on the nodes, beside node_check.py: it imports nothing.
"""

from __future__ import annotations

from collections import namedtuple

# name: EXIT_<name> in the shell scripts and the trainer; by: who ends with it; meaning: what
# happened; action: what the play says, and what to do.
ExitCode = namedtuple("ExitCode", "name code by meaning action")

FAILED = ExitCode(
    "FAILED", 1, "node_check.sh, network_check.sh, the training job script, the training launcher",
    "A step could not do its work: the check cannot write the run directory on the batch node, or its Python "
    "could not judge the nodes' records; the training job found no master address. Also what the training "
    "launcher ends with when a rank fails.",
    "The job's log says which, on a line that starts with `llmtrain:` (a failed rank: the play shows the first "
    "traceback); fix that and run the playbook again.")
SETTING = ExitCode(
    "SETTING", 2, "the training, generation and venv job scripts, network_check.sh",
    "A setting names something that cannot be used: the working directory of your script (run_script_chdir) "
    "is not a directory on the node; the directory of slurm_python's venv holds files that are not a venv made by "
    "llmtrain.slurm; the network check was given an unknown option.",
    "The log names the setting: change it and run the playbook again.")
ENV_FILE_MISSING = ExitCode(
    "ENV_FILE_MISSING", 3, "the training step, on a node",
    "The node found no NCCL/UCX env file in the run's env/ directory.",
    "Run the nccl_env stage (playbooks/nccl_env.yml), or the whole pipeline, again.")
RENDEZVOUS = ExitCode(
    "RENDEZVOUS", 3, "a rank of the trainer (the launcher's summary in the log shows it)",
    "The rank did not reach the others within pretrain_rendezvous_timeout: an interface that does not route "
    "between the nodes, or a firewall.",
    "The rank's message names the settings that decide the route: set nccl_env_socket_ifname "
    "(or nccl_env_gloo_socket_ifname) and nccl_env_ib_hca to interfaces that reach the other nodes.")
BAD_NODES = ExitCode(
    "BAD_NODES", 3, "node_check.py gather, to node_check.sh (never a job's exit code)",
    "The node check judged some of the job's nodes bad and recorded them in bad_nodes.json.",
    "Nothing: node_check.sh then has the job requeued without them (REQUEUED_HELD) or ends it (NODE_CHECK_FAILED).")
PREEMPTED = ExitCode(
    "PREEMPTED", 75, "the trainer, the training job script",
    "Stopped with a checkpoint on Slurm's stop notice (SIGUSR2 pretrain_signal_lead seconds before the time limit, "
    "a preemption, scancel --signal=USR2): the trainer saves a checkpoint, writes PREEMPTED and exits with it; the "
    "job script then requeues the job while run_requeue_max allows, and ends with it once the requeues are "
    "used up (also for a notice that came during the checks, before training started).",
    "The checkpoints are intact: run the playbook again to continue from the newest, or raise run_requeue_max.")
NODE_CHECK_FAILED = ExitCode(
    "NODE_CHECK_FAILED", 78, "node_check.sh, the first step of every job",
    "Bad nodes and no requeue (run_bad_node_policy=fail, or run_requeue_max requeues used up), or "
    "slurm_python does not run on the batch node; nothing else of the job ran.",
    "The play names each bad node with its reason and shows the check's table; they are in the run's "
    "bad_nodes.json and later jobs of the run keep off them. Repair them or leave them out (slurm_exclude_nodes), "
    "or set run_bad_node_policy=exclude.")
NETWORK_CHECK_FAILED = ExitCode(
    "NETWORK_CHECK_FAILED", 79, "network_check.sh, the training job's second step",
    "The fabric measured below pretrain_network_min_fraction and pretrain_network_policy=fail; nothing trained.",
    "The play gives the bus bandwidth and names the slow node: repair or leave out the slow node "
    "(slurm_exclude_nodes), check nccl_env_socket_ifname and nccl_env_ib_hca, or set pretrain_network_policy=exclude "
    "or warn.")
HANG = ExitCode(
    "HANG", 80, "the training job script (its hang watcher, llmtrain_node.hang)",
    "No progress (a new record or log line) for pretrain_hang_timeout while the job ran, and "
    "pretrain_hang_policy=fail, or requeue with the requeues used up: the watcher dumped every rank's stack into the "
    "run's hangs/<job>-<start>/ and ended the training step. The last checkpoint stands.",
    "The play names the node and the rank that held the others, with its first frames; the stacks are in "
    "hangs/<job>-<start>/ (<node>.txt). Repair or leave out that node (slurm_exclude_nodes), or find the "
    "deadlock in the stacks, and run the playbook again.")
STOPPED = ExitCode(
    "STOPPED", 81, "the training job script",
    "Stopped on request by playbooks/stop.yml: the job got the stop notice (SIGUSR2) as at a preemption, the "
    "training saved a checkpoint and stopped, and the job ended without requeueing itself (also when the request "
    "came while the job was queued or in its checks: nothing trained since the newest checkpoint).",
    "Nothing is lost: the run is stopped at its newest checkpoint; playbooks/pretrain.yml resumes it from there.")
REQUEUED_HELD = ExitCode(
    "REQUEUED_HELD", 100, "node_check.sh, network_check.sh (bad_nodes.sh)",
    "Not a failure: a check found bad nodes, the policy is exclude and requeues are left, so it asked Slurm to "
    "requeue the job held, and the job script ends without starting anything.",
    "Nothing: the play's watcher excludes the bad nodes and releases the job, which starts again on other nodes.")

TABLE = (FAILED, SETTING, ENV_FILE_MISSING, RENDEZVOUS, BAD_NODES, PREEMPTED, NODE_CHECK_FAILED, NETWORK_CHECK_FAILED,
         HANG, STOPPED, REQUEUED_HELD)
BY_NAME = {entry.name: entry for entry in TABLE}


def code(name):
    """The number of the exit code called name (KeyError for a name the table does not hold)."""
    return BY_NAME[name].code


def name_of(status):
    """The name of an exit status of the table (None for another)."""
    return next((entry.name for entry in TABLE if entry.code == status), None)
