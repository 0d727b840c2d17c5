# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The messages a watched training job that ended badly fails its collect step with (the collect_run
action; the filters of plugins/filter/messages.py are these functions): lost nodes, a dependency
never met, a failed job. A message holds what the job wrote (its log's lines, a check's table,
Slurm's reasons): it is made printable (node/untrusted.py), whatever stdout callback shows it."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import exit_codes
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.untrusted import printable
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import node_state_text, parse_dependency

# Lines of a job log in which Slurm says that a node of the job was lost.
NODE_LOST = re.compile(r"Node failure|NODE FAILURE|not responding")


def lost_nodes_message(job, job_name, down_nodes, log_errors, newest_checkpoint):
    """job: as slurm_job_info returns it, requeued and waiting for nodes; down_nodes: the
    partition's nodes out of service, as slurm_cluster_info returns them."""
    down = ",".join(" %s (%s)" % (node["name"], node_state_text(node)) for node in down_nodes)
    lines = [
        "Training job %s (%s) lost a node and was requeued by Slurm (restart %s); it is pending (Slurm's reason: %s) "
        "and cannot start while the nodes it needs are out of service."
        % (job["job_id"], job_name, job.get("restarts"), job.get("reason")),
        "Out of service in partition %s:%s." % (job.get("partition"), down or " none now (the job should start soon)"),
    ]
    lines += ["From the log: %s" % line for line in log_errors or [] if NODE_LOST.search(line)]
    lines.append("The job stays queued: once enough nodes are back it starts again and resumes from the newest "
                 "checkpoint (%s). Run the playbook again to watch it, or `scancel %s` to give it up."
                 % (newest_checkpoint or "none yet", job["job_id"]))
    return printable("\n".join(lines), lines=True)


def never_starts_message(job, job_name, run_name):
    """job: as slurm_job_info returns it, pending for good (DependencyNeverSatisfied) because a job it
    waited for (the run's data job, say) failed."""
    failed = [item["job_id"] for item in parse_dependency(job.get("dependency")) if item["status"] == "failed"]
    lines = [
        "Training job %s (%s) never starts: job %s, which it waits for (%s), failed, and Slurm holds it queued for good "
        "(reason DependencyNeverSatisfied)." % (job["job_id"], job_name, ", ".join(failed) or "of its dependency",
                                                job.get("dependency") or "its dependency"),
        "That job's log: ansible-playbook playbooks/status.yml -e run_name=%s -e status_log_lines=40. Fix what it says and "
        "run the playbook again: it submits that job again and puts this training job behind it (it keeps its place "
        "in the queue), or `scancel %s` to give it up." % (run_name, job["job_id"]),
    ]
    return printable("\n".join(lines), lines=True)


def _rank_node(job, rank, procs_per_node):
    """The node that ran rank: ranks fill the job's nodes in order, procs_per_node each."""
    nodes = job.get("nodes") or []
    index = int(rank) // int(procs_per_node)
    return nodes[index] if index < len(nodes) else ""


def _traceback_heading(job, log, procs_per_node):
    rank = log.get("failed_rank")
    # where the log says (the launcher's summary of the failed ranks), else by the ranks' order
    node = log.get("node") or (_rank_node(job, rank, procs_per_node) if rank is not None else "")
    at = " (node %s)" % node if node else ""
    lines = []
    if log.get("lost_peer"):
        lines.append("No rank left a traceback of its own: a process ended without one (killed, out of memory, its "
                     "node lost) and the others lost it.")
        if rank is not None:
            return lines + ["The first to notice was rank %s%s:" % (rank, at)]
    elif rank is not None:
        return ["Rank %s failed first%s; its traceback:" % (rank, at)]
    return lines + ["The first traceback:"]


NODE_CHECK_FAILED_RC = exit_codes.NODE_CHECK_FAILED.code
NETWORK_CHECK_FAILED_RC = exit_codes.NETWORK_CHECK_FAILED.code
STOPPED_RC = exit_codes.STOPPED.code


def _of_job(record, job):
    return record if isinstance(record, dict) and str(record.get("job_id")) == str(job["job_id"]) else {}


def _named(found, count, record):
    """The lines of the nodes a check names ({node: reason}), and one for those it only counts
    (a summary names the first few of thousands)."""
    lines = ["  %s: %s" % (node, reason) for node, reason in sorted(found.items())]
    if (count or 0) > len(found):
        lines.append("  ... and %d more (every node's record: %s)" % (count - len(found), record.get("file")))
    return lines


def job_failure_message(job, log, job_name, local_dir, run_dir, procs_per_node, node_check=None, network_check=None):
    """job: as slurm_job_info returns it, ended without success; log: its `log` (tail, errors,
    traceback, failed_rank, lost_peer), or none when the log was not read; node_check,
    network_check: its `node_check` and `network_check` (the checks' last records, summarised), if any."""
    log = log or {}
    check = _of_job(node_check, job)
    network = _of_job(network_check, job)
    ended = "ended %s, exit code %s" % (job["state"], job.get("exit_code"))
    if job.get("signal"):
        ended += ", signal %s" % job["signal"]
    if job.get("reason"):
        ended += ", reason: %s" % job["reason"]
    lines = [
        "Training job %s (%s) %s." % (job["job_id"], job_name, ended),
        "What the run left is in %s; checkpoints stay in %s/checkpoints and a rerun resumes from the newest."
        % (local_dir, run_dir),
    ]
    if job.get("exit_code") == STOPPED_RC:
        lines.append("It was stopped on request (playbooks/stop.yml) with a checkpoint and not requeued: "
                     "playbooks/pretrain.yml resumes the run from its newest checkpoint.")
    if job["state"] == "TIMEOUT":
        limit = " (%s)" % job["time_limit"] if job.get("time_limit") else ""
        lines.append("Slurm stopped it at its time limit%s: it sent SIGUSR2 pretrain_signal_lead seconds before, and the "
                     "script did not stop on it. A script that saves a checkpoint, writes LLMTRAIN_PREEMPT_MARKER and "
                     "exits on SIGUSR2 is requeued and continues instead (docs/own-script.md); the "
                     "steps after its newest checkpoint are lost. Raise slurm_time_limit, or make the script stop on "
                     "SIGUSR2." % limit)
    if job.get("exit_code") == NODE_CHECK_FAILED_RC and check.get("bad"):
        lines.append("Its node check found bad node(s) and started nothing (run_bad_node_policy=fail, or "
                     "run_requeue_max requeues used up); they are recorded in %s/bad_nodes.json and later jobs "
                     "of the run keep off them:" % run_dir)
        lines += _named(check["bad"], check.get("bad_count"), check)
        lines += ["Node check:"] + ["  " + line for line in check.get("table") or []]
    if job.get("exit_code") == NETWORK_CHECK_FAILED_RC and (network.get("slow") or network.get("slow_fabric")):
        measured = "all-reduce bus bandwidth %s GB/s" % ("?" if network.get("busbw") is None else "%.3g" % network["busbw"])
        if network.get("limit"):
            measured += ", %.0f%% of the slowest link's %.3g GB/s" % (100 * (network.get("fraction") or 0), network["limit"])
        lines.append("Its network check found the fabric below pretrain_network_min_fraction=%s and started nothing "
                     "(pretrain_network_policy=fail); %s:" % (network.get("min_fraction"), measured))
        lines += _named(network.get("slow") or {}, network.get("slow_count"), network)
        if network.get("slow_fabric"):
            lines.append("  " + network["slow_fabric"])
        lines += ["Network check:"] + ["  " + line for line in network.get("table") or []]
        lines.append("Fix: repair or leave out the slow node (slurm_exclude_nodes), check the interface settings "
                     "(nccl_env_socket_ifname, nccl_env_ib_hca), or set pretrain_network_policy=exclude or warn.")
    if log.get("traceback"):
        lines += _traceback_heading(job, log, procs_per_node) + list(log["traceback"])
    lines += ["First error lines of %s:" % job.get("stdout_path")] + (list(log.get("errors") or []) or ["(none)"])
    lines += ["Last lines:"] + (list(log.get("tail") or []) or ["(not readable)"])
    return printable("\n".join(str(line) for line in lines), lines=True)
