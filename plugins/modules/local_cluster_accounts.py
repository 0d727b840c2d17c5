#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_cluster_accounts
short_description: Give the local cluster's accounting database its cluster, QoS, accounts and the user's associations
description:
  - The local_cluster role's last accounting step (C(local_cluster_accounting)). It waits until C(slurmdbd) answers
    (C(sacctmgr show qos), once a second for at most O(timeout) seconds), reads the associations it holds, then adds
    what is missing, in this order - the cluster O(cluster), each QoS that O(accounts) names, each account (in
    O(cluster)), and O(user)'s association with each account, allowed that account's QoS - one C(sacctmgr -i add)
    each. What is there is left as it is; a second run adds nothing.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  cluster:
    description: The cluster's name (C(local_cluster_cluster_name)).
    type: str
    required: true
  accounts:
    description: The accounts and the QoS each may use (C(local_cluster_accounts)).
    type: dict
    required: true
  user:
    description: The user whose associations are made (the one who runs the jobs).
    type: str
    default: root
  timeout:
    description: Seconds to wait for C(slurmdbd) to answer.
    type: int
    default: 60
  environment:
    description: The environment of C(sacctmgr) (C(SLURM_CONF), a release's commands first on C(PATH)).
    type: dict
    default: {}
notes:
  - In check mode it waits and reads, and adds nothing (RV(added) says what it would add).
"""

EXAMPLES = r"""
- name: Add the cluster, the QoS, the accounts and root's associations that are missing
  llmtrain.slurm.local_cluster_accounts:
    cluster: llmtrain
    accounts: {ml-team: [normal, high]}
    environment: {SLURM_CONF: /var/lib/llmtrain-local-cluster/etc/slurm.conf}
"""

RETURN = r"""
added:
  description: The arguments of each C(sacctmgr -i add) run (in check mode, that would run), in order.
  returned: always
  type: list
  elements: list
  sample: [[cluster, llmtrain], [qos, high], [account, ml-team, cluster=llmtrain], [user, root, cluster=llmtrain, account=ml-team, qos=normal,high]]
"""

import time

from ansible.module_utils.basic import AnsibleModule


def missing(cluster, accounts, user, qos_names, rows):
    """The sacctmgr add commands (without 'sacctmgr -i add') for what the database lacks; rows: its
    associations as [cluster, account, user]."""
    adds = [] if cluster in [row[0] for row in rows] else [["cluster", cluster]]
    wanted = []
    for names in accounts.values():
        wanted += [str(name) for name in names or [] if str(name) not in wanted]
    adds += [["qos", name] for name in wanted if name not in qos_names]
    known = [row[1] for row in rows if len(row) > 1]
    adds += [["account", str(account), "cluster=" + cluster] for account in accounts if str(account) not in known]
    users = [row[1] for row in rows if len(row) > 2 and row[2] == user]
    adds += [["user", user, "cluster=" + cluster, "account=%s" % account, "qos=" + ",".join(str(q) for q in names or [])]
             for account, names in accounts.items() if str(account) not in users]
    return adds


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cluster=dict(type="str", required=True),
            accounts=dict(type="dict", required=True),
            user=dict(type="str", default="root"),
            timeout=dict(type="int", default=60),
            environment=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    env = {k: str(v) for k, v in p["environment"].items()}
    deadline = time.monotonic() + p["timeout"]
    while True:
        rc, out, err = module.run_command(["timeout", "5", "sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=name"],
                                          environ_update=env)
        if rc == 0:
            break
        if time.monotonic() >= deadline:
            module.fail_json(msg="local_cluster: slurmdbd did not answer within %ds (sacctmgr: %s); its log is "
                                 "log/slurmdbd.log in local_cluster_dir" % (p["timeout"], (out + err).strip()[-2000:]))
        time.sleep(1)
    qos_names = [line.strip() for line in out.splitlines() if line.strip()]
    rc, out, err = module.run_command(["sacctmgr", "--noheader", "--parsable2", "show", "assoc", "format=cluster,account,user"],
                                      environ_update=env)
    if rc != 0:
        module.fail_json(msg="local_cluster: sacctmgr show assoc failed: %s" % (out + err).strip()[-2000:])
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    adds = missing(p["cluster"], p["accounts"], p["user"], qos_names, rows)
    if not module.check_mode:
        for add in adds:
            rc, out, err = module.run_command(["sacctmgr", "-i", "add"] + add, environ_update=env)
            if rc != 0:
                module.fail_json(msg="local_cluster: sacctmgr -i add %s failed: %s" % (" ".join(add), (out + err).strip()[-2000:]),
                                 added=adds)
    module.exit_json(changed=bool(adds) and not module.check_mode, added=adds)


if __name__ == "__main__":
    main()
