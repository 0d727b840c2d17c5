#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_cluster_info
short_description: Report a Slurm cluster's version, partitions and nodes
description:
  - Reads C(scontrol --version), C(scontrol show partition -o) and C(scontrol show node -o).
  - Host lists are expanded and GRES strings parsed into counts per type.
  - Returns the result, and the same as the fact C(ansible_facts.slurm_cluster).
  - With O(bad_nodes), also returns the run's record of the nodes its node checks found bad, read in
    the same call, as RV(bad_nodes).
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
options:
  bad_nodes:
    description:
      - "Path of a run's bad-nodes file on the target (JSON C({node: {reason, job_id, time}}), written
        by the node and network checks of the run's jobs), returned as RV(bad_nodes)."
      - A file that does not exist means no bad nodes.
      - "A file that cannot be used keeps no node off and does not fail the task: it gives a warning
        that names the file and says to fix or delete it. So does a link (never followed), a file
        that is not a regular file or is larger than 16 MiB, and one that is not a JSON object."
    type: path
    version_added: 0.1.0
  reservations:
    description:
      - Also read C(scontrol show reservation -o), in the same call, as RV(reservations), and return RV(user).
    type: bool
    default: false
    version_added: 0.1.0
  associations:
    description:
      - Also read this user's associations (C(sacctmgr show assoc user=USER)), in the same call, as
        RV(associations), and return RV(user). Where the cluster keeps no accounting, or C(sacctmgr) fails,
        RV(associations) is null and RV(associations_note) says why; the task does not fail.
    type: bool
    default: false
    version_added: 0.1.0
  container:
    description:
      - "The run's container, C({runtime, image, mounts, args, workspace}) (the slurm role's
        C(slurm_container_*) variables and C(slurm_workspace)): what this node can tell of it is
        returned as RV(container)."
      - "C(pyxis): C(srun --help) must list C(--container-image) (the plugin is loaded), and an image
        given as a path must be a file here."
      - "C(charliecloud): an image given as a path must exist here (the nodes read it from the shared
        filesystem); a directory image must have C(/bin/sh) and a directory for every mount target,
        unless C(-w) is among its args. C(ch-run) missing here is a note, not an error."
    type: dict
    version_added: 0.1.0
  judge:
    description:
      - "The run's variables (C(slurm_partition), C(slurm_nodes), C(slurm_gpus_per_node), C(slurm_exclude_nodes),
        what the site requires of a job, C(run_gpu_policy)) to judge what was found by, in the same call, as the
        action of M(llmtrain.slurm.preflight_cluster) does: RV(judged)."
      - "With C(record_dir) among them, and nothing keeping the run off the cluster, C(<record_dir>/preflight.json)
        is written for the report (not in check mode)."
    type: dict
    version_added: 0.3.0
notes:
  - Supports check mode (it changes nothing).
"""

EXAMPLES = r"""
- name: Learn the cluster's shape
  llmtrain.slurm.slurm_cluster_info:

- name: Learn the cluster's shape and the nodes a run's node checks found bad, in one call
  llmtrain.slurm.slurm_cluster_info:
    bad_nodes: /shared/runs/tiny/bad_nodes.json
  register: cluster

- name: Every node of partition gpu has 4 GPUs
  ansible.builtin.assert:
    that: item.gres.gpu.total | default(0) == 4
  loop: "{{ ansible_facts.slurm_cluster.nodes | selectattr('partitions', 'contains', 'gpu') }}"
  loop_control:
    label: "{{ item.name }}"
"""

RETURN = r"""
version:
  description: Slurm version of the client (C(scontrol --version)).
  returned: always
  type: str
  sample: 22.05.8
partitions:
  description: The partitions.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Partition name., type: str, sample: debug}
    default: {description: Whether it is the default partition., type: bool}
    state: {description: Partition state (lower case)., type: str, sample: up}
    nodes: {description: "Its nodes, host list expanded.", type: list, elements: str}
    nodelist: {description: Its nodes as a Slurm host list., type: str, sample: "slurm-worker-[0-2]"}
    total_nodes: {description: Node count., type: int}
    total_cpus: {description: CPU count., type: int}
    time_limit: {description: MaxTime as Slurm prints it (V(UNLIMITED) when unlimited)., type: str, sample: "1-00:00:00"}
    time_limit_s: {description: MaxTime in seconds (null when unlimited)., type: int}
    default_time: {description: DefaultTime as Slurm prints it., type: str}
nodes:
  description: The nodes.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Node name., type: str, sample: slurm-worker-0}
    state: {description: "Base state (lower case), without flags.", type: str, sample: idle}
    state_flags: {description: State flags such as C(drain)., type: list, elements: str}
    cpus: {description: CPUs., type: int}
    cpus_allocated: {description: CPUs allocated to jobs., type: int}
    memory_mb: {description: RealMemory in MiB., type: int}
    memory_allocated_mb: {description: Memory allocated to jobs in MiB., type: int}
    gres:
      description:
        - 'GRES per name. The node GRES string "gpu:a100:4(S:0-1),gpu:2" gives
          C({"gpu": {"total": 6, "types": {"a100": 4}, "untyped": 2}}).'
      type: dict
    features: {description: Available features., type: list, elements: str}
    active_features: {description: Active features., type: list, elements: str}
    partitions: {description: Partitions the node belongs to., type: list, elements: str}
    address: {description: NodeAddr., type: str}
    reason: {description: Why the node is down or drained., type: str}
    version: {description: Slurm version of its slurmd., type: str}
bad_nodes:
  description:
    - "The content of the file O(bad_nodes) names, C({node: {reason, job_id, time}}); empty when the file does not
      exist or cannot be used (then with a warning). Not part of the facts."
  returned: with bad_nodes
  type: dict
  sample: {"slurm-worker-1": {"reason": "no network interface ib0 on slurm-worker-1 (it has eth0, lo)",
                              "job_id": "42", "time": "2026-11-29T21:44:31Z"}}
  version_added: 0.1.0
reservations:
  description: The reservations (C(scontrol show reservation -o)); not part of the facts.
  returned: with reservations
  type: list
  elements: dict
  contains:
    name: {description: Reservation name., type: str, sample: llm-week}
    state: {description: C(active) or C(inactive)., type: str}
    start_time: {description: StartTime as Slurm prints it (local time)., type: str, sample: "2026-12-04T10:00:00"}
    end_time: {description: EndTime as Slurm prints it (local time)., type: str}
    nodes: {description: "Its nodes, host list expanded.", type: list, elements: str}
    node_count: {description: NodeCnt., type: int}
    partition: {description: PartitionName (null for any)., type: str}
    features: {description: Features its nodes were picked by., type: str}
    flags: {description: Flags such as C(MAINT)., type: list, elements: str}
    users: {description: Users allowed., type: list, elements: str}
    accounts: {description: Accounts allowed., type: list, elements: str}
  version_added: 0.1.0
associations:
  description: The user's associations; null where they could not be read (see RV(associations_note)).
  returned: with associations
  type: list
  elements: dict
  contains:
    account: {description: Account., type: str, sample: ml-team}
    partition: {description: The partition the association is for; null for every partition., type: str}
    qos: {description: The QoS names it allows., type: list, elements: str, sample: [normal, high]}
  version_added: 0.1.0
associations_note:
  description: Why RV(associations) is null, such as C(this cluster keeps no accounting database ...).
  returned: with associations
  type: str
  version_added: 0.1.0
user:
  description: The user the module ran as (whose associations and reservations were read).
  returned: with reservations or associations
  type: str
  sample: ada
  version_added: 0.1.0
container:
  description: What was found of O(container) on this node, C({errors, notes}), each a list of messages.
  returned: with container
  type: dict
  sample: {"errors": ["slurm_container_runtime=pyxis, but srun on this node has no --container-image option ..."],
           "notes": []}
  version_added: 0.1.0
judged:
  description:
    - With O(judge), C(errors) (what keeps the run off the cluster, each naming the variable and the fix), C(notes)
      (what its jobs will wait for, what could not be checked), C(record) (what C(preflight.json) holds but its time)
      and C(written) (whether C(preflight.json) was written anew).
  returned: with O(judge)
  type: dict
ansible_facts:
  description: The same data as C(slurm_cluster), with keys C(version), C(partitions), C(nodes).
  returned: always
  type: dict
"""

import datetime
import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.put import write_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import site_check
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.exclusion import load_bad_nodes
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule


def look(slurm):
    """The cluster as Slurm has it, and what the options ask besides."""
    p, client = slurm.params, slurm.client
    info = dict(version=client.version(), partitions=client.partitions(), nodes=client.nodes())
    result = slurm.result
    result.update(ansible_facts=dict(slurm_cluster=info), **info)
    if p["reservations"] or p["associations"]:
        result["user"] = client.user()
    if p["reservations"]:
        result["reservations"] = client.reservations()
    if p["associations"]:
        result["associations"], result["associations_note"] = client.associations(result["user"])
    if p["container"]:
        def run(argv):
            if not slurm.module.get_bin_path(argv[0]):
                return 127, "", "%s: not found" % argv[0]
            return slurm.module.run_command(argv, environ_update=dict(USER=client.user()))  # ch-run needs USER

        errors, notes = container.preflight(p["container"], run)
        result["container"] = dict(errors=errors, notes=notes)
    if p["bad_nodes"]:
        result["bad_nodes"], unusable = load_bad_nodes(p["bad_nodes"])
        if unusable:
            slurm.module.warn(unusable)
    if p["judge"] is not None:
        result["judged"], problem = judged(result, p["judge"], p["bad_nodes"], slurm.module.check_mode)
        if problem:
            slurm.module.fail_json(msg="preflight.json could not be written: %s" % problem)
        result["changed"] = result["judged"]["written"]
    return result


def judged(found, judge, bad_nodes, check_mode):
    """What was found judged by the run's variables, and preflight.json written where the run fits
    (with record_dir, not in check mode) -> (judged, why it could not be written)."""
    errors, notes, record = site_check.judge(found, judge, bad_nodes)
    out = dict(errors=errors, notes=notes, record=record, written=False)
    if not judge.get("record_dir") or errors or check_mode:
        return out, None
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = json.dumps(dict(record, time=when), indent=4, sort_keys=True) + "\n"
    written, _same, problem = write_files(judge["record_dir"], {"preflight.json": text}, 0o644)
    out["written"] = bool(written)
    return out, problem


def main():
    SlurmModule(dict(bad_nodes=dict(type="path"), reservations=dict(type="bool", default=False),
                     associations=dict(type="bool", default=False), container=dict(type="dict"),
                     judge=dict(type="dict")),
                errors=(ValueError,), supports_check_mode=True).run(look)


if __name__ == "__main__":
    main()
