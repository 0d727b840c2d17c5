# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.local_cluster: the local test cluster brought up or taken down in one task.

It reads the local_cluster role's variables from the play, as the role's argument specs define them,
and does in order what the role's task files did, each step one call of a module on the target:
local_cluster_up first (a cluster up as these variables make it ends the task at once), the input
check (module_utils/inputs/local_cluster.py), then the machine (packages, directories, munge, the
configuration, /etc/hosts, the /etc/slurm link, the namespaces), a release's root, the accounting
database, the daemons and the wait for every node. Slurm's configuration files are made here, as
text (config_files); nothing of a value reaches a shell. See plugins/modules/local_cluster.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmtrain.slurm.plugins.filter.local_cluster import local_cluster_nodes
from ansible_collections.llmtrain.slurm.plugins.filter.variables import unknown_variables
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import local_cluster as inputs

PREFIX = "local_cluster_"
# the variables that do not make the cluster: a change of them keeps a cluster that is up
NOT_STAMPED = ("local_cluster_state", "local_cluster_enabled", "local_cluster_node_timeout")
HEADER = "# Made by llmtrain.slurm's local_cluster; a change here is undone by its next run.\n"
CLIENT_COMMANDS = ("sbatch", "srun", "salloc", "squeue", "scontrol", "scancel", "sinfo", "sacct", "sacctmgr", "sattach",
                   "sstat", "sprio", "sshare", "sdiag", "sreport", "strigger")
SYSTEM_CONF = "/etc/slurm/slurm.conf"
# the block of /etc/hosts that names the nodes of the cluster in a directory
HOSTS_MARKER = "# {mark} llmtrain.slurm local_cluster %s"
# a release's root is made for a venv made from a Python of its own directory
SYSTEM_PREFIXES = ("/", "/usr", "/usr/local")


def config_files(v, nodes, controller, cpus):
    """{name: text} of slurm.conf, gres.conf and cgroup.conf for the variables v, the nodes, the
    controller's hostname and the CPUs each node registers."""
    d, gpus = v["local_cluster_dir"], int(v["local_cluster_gres_gpus"])
    accounting = ["AccountingStorageType=accounting_storage/none"]
    if v["local_cluster_accounting"]:
        accounting = ["# Accounting (local_cluster_accounting): a job must use an account and QoS its user may use.",
                      "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
                      "AccountingStoragePort=%d" % int(v["local_cluster_slurmdbd_port"]),
                      "AccountingStorageEnforce=associations,limits,qos",
                      "# the munge socket, for the connection to slurmdbd (AuthInfo's is not used for it)",
                      "AccountingStoragePass=%s/munge/munge.socket" % d]
    gpu_type = v["local_cluster_gres_gpu_type"]
    gres = " Gres=gpu:%s%d" % (gpu_type + ":" if gpu_type else "", gpus) if gpus else ""
    interval = int(v["local_cluster_sched_interval"])
    slurm = [
        "# Local test cluster of llmtrain.slurm: controller on %s, %d nodes in network namespaces on the same machine."
        % (controller, len(nodes)),
        "ClusterName=%s" % v["local_cluster_cluster_name"],
        "SlurmctldHost=%s(%s.1)" % (controller, v["local_cluster_subnet_prefix"]),
        "SlurmctldPort=%s" % v["local_cluster_slurmctld_port"], "SlurmdPort=%s" % v["local_cluster_slurmd_port"],
        "AuthType=auth/munge", "AuthInfo=socket=%s/munge/munge.socket,cred_expire=%d" % (d, int(v["local_cluster_cred_expire"])),
        "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root", "StateSaveLocation=%s/ctld" % d,
        "SlurmdSpoolDir=%s/spool/%%n" % d, "SlurmctldPidFile=%s/run/slurmctld.pid" % d,
        "SlurmdPidFile=%s/run/slurmd-%%n.pid" % d, "SlurmctldLogFile=%s/log/slurmctld.log" % d,
        "SlurmdLogFile=%s/log/slurmd-%%n.log" % d,
        "# No cgroups: what these machines allow. task/affinity binds each task to the CPUs it was",
        "# allocated (sched_setaffinity), as sites bind tasks; it needs no cgroups.",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=%s" % v["local_cluster_task_plugin"],
        "JobAcctGatherType=jobacct_gather/none"] + accounting + [
        "MailProg=/bin/true", "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=%d,bf_interval=%d" % (interval, interval),
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "# Nodes register the CPUs and memory configured here, not the machine's.",
        "SlurmdParameters=config_overrides", "ReturnToService=2",
        "SlurmdTimeout=%d" % int(v["local_cluster_slurmd_timeout"])] + (["GresTypes=gpu"] if gpus else []) + [
        "NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%s RealMemory=%s%s State=UNKNOWN"
        % (node["name"], node["ip"], node["name"], cpus, v["local_cluster_memory_mb_per_node"], gres) for node in nodes] + [
        "PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP" % v["local_cluster_partition"]]
    files = ("gpu[0-%d]" % (gpus - 1)) if gpus > 1 else "gpu0"
    gres_conf = ["# Placeholder GPUs: regular files stand in for /dev/nvidia*. Slurm registers and",
                 "# schedules them (and logs that they are not devices); no job sees a real GPU."] + [
        "NodeName=%s Name=gpu%s File=%s/gres/%s/%s" % (node["name"], " Type=" + gpu_type if gpu_type else "", d,
                                                       node["name"], files) for node in nodes] if gpus else []
    cgroup = ["# Nothing: this machine's Slurm reads no cgroup.conf with proctrack/linuxproc."]
    if v["local_cluster_release"] != "system":
        cgroup = ["# Slurm %s's slurmd loads a cgroup plugin even with proctrack/linuxproc and task/none or" % v["local_cluster_release"],
                  "# task/affinity, and stops where it finds no cgroup filesystem (a node's own mount namespace here).",
                  "CgroupPlugin=disabled"]
    return dict((name, HEADER + "".join(line + "\n" for line in lines))
                for name, lines in (("slurm.conf", slurm), ("gres.conf", gres_conf), ("cgroup.conf", cgroup)))


def slurmdbd_conf(v):
    """slurmdbd.conf: MariaDB on a unix socket under local_cluster_dir (slurmdbd takes its path from
    MYSQL_UNIX_PORT), slurmdbd on localhost only, one database per release (a slurmdbd converts an
    older release's tables, and only from the two releases before it; an older one cannot read them)."""
    d, release = v["local_cluster_dir"], v["local_cluster_release"]
    database = "slurm_acct_db" + ("" if release == "system" else "_" + release.replace(".", "_"))
    return HEADER + "".join(line + "\n" for line in (
        "AuthType=auth/munge", "AuthInfo=socket=%s/munge/munge.socket" % d, "DbdHost=localhost", "DbdAddr=127.0.0.1",
        "DbdPort=%d" % int(v["local_cluster_slurmdbd_port"]), "SlurmUser=root", "PidFile=%s/acct/run/slurmdbd.pid" % d,
        "LogFile=%s/log/slurmdbd.log" % d, "StorageType=accounting_storage/mysql", "StorageHost=localhost",
        "StorageUser=root", "StorageLoc=" + database))


def client_command(name, v, root, marker):
    """bin/<name>: the release's command run from its root with the cluster's configuration; inside that
    root (a job's step) the root's own. The paths are checked by the input check (letters, digits, ._/-)."""
    return ("#!/bin/sh\n%s# Slurm %s's %s for the local cluster in %s, run from the release's root.\n"
            "if [ -e /%s ]; then\n  exec /usr/bin/%s \"$@\"\nfi\nSLURM_CONF='%s/etc/slurm.conf'\nexport SLURM_CONF\n"
            "exec chroot '%s' /bin/sh -c 'cd \"$1\" 2>/dev/null || cd /; shift; exec \"$@\"' sh \"$(pwd)\" /usr/bin/%s \"$@\"\n"
            % (HEADER, v["local_cluster_release"], name, v["local_cluster_dir"], marker, name, v["local_cluster_dir"], root, name))


def env_sh(v):
    """env.sh: a shell that sources it talks to the cluster with the cluster's release's commands."""
    d = v["local_cluster_dir"]
    text = ("# The local cluster's Slurm (%s): `. %s/env.sh` makes sinfo, squeue, sbatch, srun, scontrol,\n"
            "# scancel and sacct of this shell talk to it.\nSLURM_CONF='%s/etc/slurm.conf'\nexport SLURM_CONF\n"
            % (v["local_cluster_release"], d, d))
    if v["local_cluster_release"] != "system":
        text += "case \":$PATH:\" in *:'%s/bin':*) ;; *) PATH='%s/bin':$PATH ;; esac\nexport PATH\n" % (d, d)
    return text


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self.task_vars = task_vars = task_vars or {}
        if self._task.args:
            raise AnsibleActionFail("local_cluster takes no options (got %s): it reads the local_cluster_* variables"
                                    % ", ".join(sorted(self._task.args)))
        names = sorted(name for name in task_vars if name.startswith(PREFIX))
        self.v = v = dict((name, self._templar.template(task_vars[name])) for name in names)
        d = v["local_cluster_dir"]
        self.changed, self.warnings = False, []
        node_args = (v["local_cluster_nodes"], v["local_cluster_node_prefix"], v["local_cluster_subnet_prefix"],
                     v["local_cluster_netns_prefix"], d)
        self.nodes = local_cluster_nodes(*node_args)
        self.netns = {"bridge": v["local_cluster_bridge"], "address": "%s.1/24" % v["local_cluster_subnet_prefix"],
                      "prune_prefix": v["local_cluster_netns_prefix"], "nodes": local_cluster_nodes(*node_args, netns=True)}
        self.conf = d + "/etc/slurm.conf"
        self.root = d + "/root"
        path = [d + "/bin"] + [p for p in os.environ.get("PATH", "").split(":") if p != d + "/bin"]
        self.any_env = {"SLURM_CONF": self.conf, "PATH": ":".join(path)}
        self.client_env = self.any_env if v["local_cluster_release"] != "system" else {"SLURM_CONF": self.conf}
        python = self._templar.template(task_vars.get("slurm_python"))
        stamped = dict((name, v[name]) for name in names if name not in NOT_STAMPED)
        with open(__file__, "rb") as handle:
            this = hashlib.sha256(handle.read()).hexdigest()
        self.stamp = hashlib.sha256(json.dumps({"variables": stamped, "python": python, "code": this},
                                               sort_keys=True, default=str).encode()).hexdigest()
        try:
            if v["local_cluster_state"] == "present":
                up = self.call("llmtrain.slurm.local_cluster_up", {
                    "stamp_file": d + "/up.json", "stamp": self.stamp, "daemons": self.daemons(), "nodes": self.nodes,
                    "link": {"path": SYSTEM_CONF, "target": self.conf} if v["local_cluster_link_system_config"] else None,
                    "partition": v["local_cluster_partition"], "environment": self.client_env})
                if up["up"]:
                    return dict(result, changed=False, msg="the cluster is up as configured")
                if self._task.check_mode:
                    return dict(result, changed=True, msg="would bring the cluster up: %s" % up["why"])
            facts = self.check()
            if self._task.check_mode:
                return dict(result, changed=True, msg="would take the cluster down")
            if v["local_cluster_state"] == "present":
                self.present(facts, python)
            else:
                self.absent()
        except AnsibleActionFail as err:
            result.update(failed=True, msg=str(err.message))
        if self.warnings:
            result["warnings"] = self.warnings
        return dict(result, changed=self.changed, nodes=[n["name"] for n in self.nodes])

    def call(self, module, args, ok=False):
        """One module on the target; a failure ends the task with its message unless ok."""
        args = dict((k, a) for k, a in args.items() if a is not None)
        out = self._execute_module(module_name=module, module_args=args, task_vars=self.task_vars)
        if out.get("failed") and not ok:
            raise AnsibleActionFail(out.get("msg") or "%s failed: %s" % (module, out))
        self.changed |= bool(out.get("changed")) and not out.get("failed")
        return out

    def quietly(self, module, args, ok=False):
        """A module call that changes nothing of the cluster: a read, or the role's own bookkeeping."""
        before = self.changed
        out = self.call(module, args, ok=ok)
        self.changed = before
        return out

    def command(self, argv, ok=False, env=None, **more):
        """argv run by the command module (with env: through env(1), so no shell sees a value)."""
        return self.call("ansible.legacy.command", dict(argv=self.with_env(argv, env), **more), ok=ok)

    def read(self, argv, ok=False, env=None):
        """What a command that changes nothing prints (the command module says changed for any command)."""
        return self.quietly("ansible.legacy.command", {"argv": self.with_env(argv, env)}, ok=ok)

    @staticmethod
    def with_env(argv, env):
        return (["env"] + ["%s=%s" % item for item in sorted(env.items())] if env else []) + list(argv)

    def daemons(self):
        d = self.v["local_cluster_dir"]
        fixed = [("munged", "/munge/munged.pid"), ("slurmctld", "/run/slurmctld.pid")]
        if self.v["local_cluster_accounting"]:
            fixed += [("mariadbd", "/acct/run/mariadbd.pid"), ("slurmdbd", "/acct/run/slurmdbd.pid")]
        return [{"pidfile": d + pidfile, "process_name": name} for name, pidfile in fixed]

    def daemon(self, name, pidfile, process=None, **more):
        return self.call("llmtrain.slurm.pidfile_daemon", dict(name=name, process_name=process or name, pidfile=pidfile, **more))

    def check(self):
        """Every local_cluster_* variable known and well-formed, run as root: -> (hostname, CPUs)."""
        unknown = unknown_variables(list(self.task_vars), facts=list(self.task_vars.get("ansible_facts") or {}))
        if unknown:
            raise AnsibleActionFail("\n".join(unknown))
        out = self.read(["sh", "-c", "id -u && getconf _NPROCESSORS_ONLN && hostname"])["stdout"].split()
        errors = inputs.errors(self.v, out[0], out[1])
        if errors:
            raise AnsibleActionFail("\n".join(errors))
        return out[2], out[1]

    def present(self, facts, python):
        v, d = self.v, self.v["local_cluster_dir"]
        release = self.call("ansible.legacy.slurp", {"src": d + "/release"}, ok=True)
        # a cluster directory without the record is this machine's Slurm's (the record came later)
        if (slurped_text(release) or "system") != v["local_cluster_release"]:
            self.absent()  # another release cannot read the controller state and spool
            self.call("ansible.legacy.file", {"path": d + "/ctld", "state": "absent"})
            self.call("ansible.legacy.file", {"path": d + "/spool", "state": "absent"})
        # until every node is up again: a bring-up that fails halfway leaves no record of a cluster that is up
        self.quietly("ansible.legacy.file", {"path": d + "/up.json", "state": "absent"})
        config_changed = self.machine(facts)
        remounted = v["local_cluster_release"] != "system" and self.release_root(v["local_cluster_python"] or python)
        pidfiles = [f["path"] for f in self.call("ansible.legacy.find", {
            "paths": [d + "/run", d + "/acct/run"], "patterns": ["slurmd-*.pid", "mariadbd.pid", "slurmdbd.pid"]})["files"]]
        configured = set(n["pidfile"] for n in self.nodes)
        for pidfile in pidfiles:  # the slurmds of nodes no longer configured
            if "/run/slurmd-" in pidfile and pidfile not in configured:
                self.daemon("slurmd " + os.path.basename(pidfile)[7:-4], pidfile, "slurmd", state="stopped")
        if v["local_cluster_accounting"] or any("/acct/run/" in p for p in pidfiles):
            self.accounting(config_changed, remounted)
        self.start(config_changed or remounted)
        self.call("llmtrain.slurm.local_cluster_wait", {
            "nodes": [n["name"] for n in self.nodes], "partition": v["local_cluster_partition"],
            "timeout": v["local_cluster_node_timeout"], "log_dir": d + "/log", "environment": self.client_env})
        # what the cluster is up with: the next run finds it so, and does nothing
        self.quietly("llmtrain.slurm.put_files", {"dest": d, "files": {"up.json": json.dumps({"stamp": self.stamp}) + "\n"}})

    def machine(self, facts):
        """Packages, directories, munge's key, the configuration, names, the /etc/slurm link, namespaces, munged
        -> whether the configuration changed (the daemons then start again)."""
        v, d = self.v, self.v["local_cluster_dir"]
        if v["local_cluster_install_packages"]:
            packages = list(v["local_cluster_packages"]) + (list(v["local_cluster_accounting_packages"]) if v["local_cluster_accounting"] else []) \
                + (list(v["local_cluster_container_packages"]) if v["local_cluster_containers"] else [])
            # one query for all of them: dpkg-query exits 1 when one is unknown, which is "missing" too
            known = self.read(["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n"] + packages, ok=True)["stdout"]
            installed = [line.split()[0] for line in known.splitlines() if line.endswith(" installed")]
            missing = [p for p in packages if p not in installed]
            if missing:
                out = self.call("ansible.legacy.apt", {"name": missing, "state": "present", "update_cache": True,
                                                       "cache_valid_time": 3600}, ok=True)
                if out.get("failed"):
                    raise AnsibleActionFail(
                        "local_cluster: could not install %s with apt (%s). The local cluster needs Debian or Ubuntu with "
                        "a reachable package mirror, or those packages installed beforehand (then set "
                        "local_cluster_install_packages: false)." % (", ".join(missing), out.get("msg") or "no message"))
        made = self.read(["mkdir", "-p", "-v", "-m", "0755"] + [d] + [d + "/" + sub for sub in ("etc", "log", "run", "spool", "ctld")])
        self.changed |= bool(made["stdout"])
        # munged insists on a directory of its own, not group/world writable
        self.call("ansible.legacy.file", {"path": d + "/munge", "state": "directory", "owner": "munge", "group": "munge", "mode": "0755"})
        self.command(["runuser", "-u", "munge", "--", "mungekey", "--create", "--keyfile", d + "/munge/munge.key"],
                     creates=d + "/munge/munge.key")
        gpus = int(v["local_cluster_gres_gpus"])
        if gpus:  # regular files standing in for /dev/nvidia*
            self.call("llmtrain.slurm.put_files", {"dest": d + "/gres", "files": dict(
                ("%s/gpu%d" % (n["name"], i), "") for n in self.nodes for i in range(gpus))})
        cpus = v["local_cluster_cpus_per_node"] if v["local_cluster_cpus_per_node"] is not None else facts[1]
        config = self.call("llmtrain.slurm.put_files", {"dest": d + "/etc", "files": config_files(v, self.nodes, facts[0], cpus)})
        self.call("ansible.legacy.blockinfile", {
            "path": "/etc/hosts", "marker": HOSTS_MARKER % d, "unsafe_writes": True,
            "block": "".join("%s %s\n" % (n["ip"], n["name"]) for n in self.nodes)})
        if v["local_cluster_link_system_config"]:
            self.link_system_config()
        net = self.call("llmtrain.slurm.local_netns", self.netns)
        if net["bridge_created"]:  # so that absent removes it, and no other
            self.call("llmtrain.slurm.put_files", {"dest": d, "files": {"bridge-made-by-the-role": v["local_cluster_bridge"] + "\n"}})
        m = d + "/munge/munge"
        self.daemon("munged", d + "/munge/munged.pid", user="munge", log_file=d + "/munge/munged.log", command=[
            "munged", "--socket=%s.socket" % m, "--key-file=%s.key" % m, "--pid-file=%sd.pid" % m,
            "--log-file=%sd.log" % m, "--seed-file=%sd.seed" % m])
        return bool(config.get("changed"))

    def link_system_config(self):
        """/etc/slurm/slurm.conf points at the cluster (plain sinfo, srun, sbatch then work), the link that was
        there before remembered to be put back; a file of its own is left alone."""
        d = self.v["local_cluster_dir"]
        now = self.call("ansible.legacy.stat", {"path": SYSTEM_CONF})["stat"]
        if now["exists"] and not now["islnk"]:
            self.warnings.append("%s is a file of its own; left alone. Talk to the local cluster with SLURM_CONF=%s."
                                 % (SYSTEM_CONF, self.conf))
            return
        if now["exists"] and now["lnk_source"] != self.conf:
            # the first link seen is the one to restore
            if not self.call("ansible.legacy.stat", {"path": d + "/slurm.conf-link-before"})["stat"]["exists"]:
                self.call("llmtrain.slurm.put_files", {"dest": d, "files": {"slurm.conf-link-before": now["lnk_target"]}})
        self.call("ansible.legacy.file", {"src": self.conf, "dest": SYSTEM_CONF, "state": "link", "force": True})

    def release_root(self, python):
        """The release's root mounted (built once) with the jobs' Python at its own paths, and the client
        commands that run from it -> whether the daemons must start again from a new view of it."""
        v, d = self.v, self.v["local_cluster_dir"]
        prefixes = []
        if python:
            prefixes = self.read([python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"])["stdout"].split("\n")[:2]
            if prefixes[1] in SYSTEM_PREFIXES:
                raise AnsibleActionFail(
                    "local_cluster: the jobs' Python (%s, local_cluster_python or slurm_python) was made from the Python in %s, "
                    "which Slurm %s's root does not have and cannot be given without hiding its own: make the jobs' venv from "
                    "a Python installed under a directory of its own (pyenv, uv python, conda), or set local_cluster_release "
                    "to system" % (python, prefixes[1], v["local_cluster_release"]))
        workspace = self._templar.template(self.task_vars.get("slurm_workspace"))
        view = self.call("llmtrain.slurm.local_release_root", {
            "release": v["local_cluster_release"], "suite": v["local_cluster_release_suites"][v["local_cluster_release"]],
            "mirror": v["local_cluster_release_mirror"], "packages": v["local_cluster_release_packages"],
            "cache": v["local_cluster_roots_dir"], "max_age_days": v["local_cluster_release_max_age_days"], "path": self.root,
            "state_dir": d + "/overlay", "cluster_dir": d,
            # the venv (writable: pip installs into it), and the Python it was made from read-only
            "shared_paths": ([workspace] if workspace else []) + list(v["local_cluster_shared_paths"])
            + (prefixes[:1] if len(set(prefixes)) == 2 else []), "readonly_paths": prefixes[1:]})
        self.call("llmtrain.slurm.put_files", {"dest": d + "/bin", "mode": "0755", "files": dict(
            (name, client_command(name, v, self.root, view["marker"])) for name in CLIENT_COMMANDS)})
        return bool(view["remounted"])

    def accounting(self, config_changed, remounted):
        """MariaDB and slurmdbd under local_cluster_dir/acct, the cluster, accounts and QoS in the database;
        without local_cluster_accounting, the daemons an earlier run started stop. slurmdbd starts again when
        its configuration changed or its root was mounted again."""
        v, d = self.v, self.v["local_cluster_dir"]
        if not v["local_cluster_accounting"]:
            for name in ("slurmdbd", "mariadbd"):
                self.daemon(name, "%s/acct/run/%s.pid" % (d, name), state="stopped")
            return
        made = self.read(["mkdir", "-p", "-v", "-m", "0700", d + "/acct/mysql", d + "/acct/run"])
        self.changed |= bool(made["stdout"])
        self.command(["mariadb-install-db", "--no-defaults", "--datadir=%s/acct/mysql" % d, "--user=root",
                      "--auth-root-authentication-method=socket", "--skip-test-db"], creates=d + "/acct/mysql/mysql")
        socket, pidfile = d + "/acct/run/mysqld.sock", d + "/acct/run/mariadbd.pid"
        # mariadbd stays in the foreground: start-stop-daemon puts it in the background; --pidfile: the
        # mariadbd of another cluster on this machine is not this one's
        self.daemon("mariadbd", pidfile, log_file=d + "/log/mariadbd.log", command=[
            "start-stop-daemon", "--start", "--background", "--pidfile=" + pidfile, "--output=%s/log/mariadbd.log" % d,
            "--exec", "/usr/sbin/mariadbd", "--", "--no-defaults", "--datadir=%s/acct/mysql" % d, "--socket=" + socket,
            "--pid-file=" + pidfile, "--skip-networking", "--user=root", "--innodb-buffer-pool-size=64M"])
        dbd_conf = self.call("llmtrain.slurm.put_files", {"dest": d + "/etc", "mode": "0600", "files": {"slurmdbd.conf": slurmdbd_conf(v)}})
        for _second in range(60):
            if self.read(["mariadb-admin", "--no-defaults", "--socket=" + socket, "-uroot", "ping"], ok=True).get("rc") == 0:
                break
            time.sleep(1)
        else:
            raise AnsibleActionFail("local_cluster: MariaDB did not answer on %s within 60 s; its log is %s/log/mariadbd.log" % (socket, d))
        # a release's slurmdbd runs from its root, where the cluster's directory is mounted at its own path
        self.daemon("slurmdbd", d + "/acct/run/slurmdbd.pid", log_file=d + "/log/slurmdbd.log",
                    command=["env", "SLURM_CONF=" + self.conf, "MYSQL_UNIX_PORT=" + socket, "slurmdbd"],
                    root=self.root if v["local_cluster_release"] != "system" else None,
                    state="restarted" if dbd_conf.get("changed") or remounted else "started")
        self.call("llmtrain.slurm.local_cluster_accounts", {"cluster": v["local_cluster_cluster_name"],
                                                            "accounts": v["local_cluster_accounts"], "environment": self.client_env})
        if config_changed:
            # a controller whose state holds another cluster id (made while it ran without accounting) refuses
            # to start from 23.02 on: the id in its state goes, and it takes the database's
            self.call("ansible.legacy.file", {"path": d + "/ctld/clustername", "state": "absent"})

    def start(self, restart):
        """slurmctld and one slurmd per node in its namespace with its hostname (Slurm reads node and GRES
        definitions only at start: a changed configuration restarts them), then the client environment."""
        v, d = self.v, self.v["local_cluster_dir"]
        state = "restarted" if restart else "started"
        root = self.root if v["local_cluster_release"] != "system" else None
        self.daemon("slurmctld", d + "/run/slurmctld.pid", log_file=d + "/log/slurmctld.log", root=root, state=state,
                    command=["slurmctld", "-f", self.conf])
        for n in self.nodes:
            self.daemon("slurmd " + n["name"], n["pidfile"], "slurmd", log_file="%s/log/slurmd-%s.log" % (d, n["name"]),
                        netns=n["namespace"], hostname=n["name"], root=root, state=state,
                        command=["slurmd", "-f", self.conf, "-N", n["name"]])
        # client-env.json is the slurm_client_env of the cluster's release: inventories/local reads it
        self.call("llmtrain.slurm.put_files", {"dest": d, "files": {
            "env.sh": env_sh(v), "client-env.json": json.dumps(self.client_env, indent=4, sort_keys=True) + "\n",
            "release": v["local_cluster_release"] + "\n"}})

    def absent(self):
        """Every job cancelled, every daemon stopped (the slurmds first), the root unmounted, the client
        commands, namespaces, names and links the role made gone; a bridge or link of the machine's own stays."""
        d = self.v["local_cluster_dir"]
        self.quietly("ansible.legacy.file", {"path": d + "/up.json", "state": "absent"})
        if self.call("ansible.legacy.stat", {"path": d + "/run/slurmctld.pid"})["stat"]["exists"]:
            jobs = self.read(["squeue", "--noheader", "--format", "%i"], ok=True, env=self.any_env)
            if jobs.get("rc") == 0 and jobs["stdout"].split():
                self.command(["scancel"] + jobs["stdout"].split(), env=self.any_env)
                for _second in range(30):
                    left = self.read(["squeue", "--noheader", "--format", "%i"], ok=True, env=self.any_env)
                    if left.get("rc") != 0 or not left["stdout"].split():
                        break
                    time.sleep(1)
        for f in self.call("ansible.legacy.find", {"paths": d + "/run", "patterns": "slurmd-*.pid"})["files"]:
            self.daemon("slurmd " + os.path.basename(f["path"]), f["path"], "slurmd", state="stopped")
        for name, pidfile in (("slurmctld", "run/slurmctld.pid"), ("slurmdbd", "acct/run/slurmdbd.pid"),
                              ("mariadbd", "acct/run/mariadbd.pid"), ("munged", "munge/munged.pid")):
            self.daemon(name, d + "/" + pidfile, state="stopped")
        # the built root stays in local_cluster_roots_dir; the record of the release stays with the
        # controller state it wrote (another release started here later removes that state first)
        self.call("llmtrain.slurm.local_release_root", {"path": self.root, "state_dir": d + "/overlay", "state": "absent"})
        for path in (d + "/bin", d + "/env.sh", d + "/client-env.json"):
            self.call("ansible.legacy.file", {"path": path, "state": "absent"})
        made = self.call("ansible.legacy.stat", {"path": d + "/bridge-made-by-the-role"})["stat"]["exists"]
        self.call("llmtrain.slurm.local_netns", dict(self.netns, bridge_made=made, state="absent"))
        self.call("ansible.legacy.blockinfile", {"path": "/etc/hosts", "marker": HOSTS_MARKER % d, "state": "absent",
                                                 "unsafe_writes": True})
        now = self.call("ansible.legacy.stat", {"path": SYSTEM_CONF})["stat"]
        if now.get("islnk") and now.get("lnk_source") == self.conf:
            self.call("ansible.legacy.file", {"path": SYSTEM_CONF, "state": "absent"})
        before = slurped_text(self.call("ansible.legacy.slurp", {"src": d + "/slurm.conf-link-before"}, ok=True))
        if before and not (now.get("exists") and not now.get("islnk")):
            self.call("ansible.legacy.file", {"src": before, "dest": SYSTEM_CONF, "state": "link", "force": True})
        for path in (d + "/slurm.conf-link-before", d + "/bridge-made-by-the-role"):
            self.call("ansible.legacy.file", {"path": path, "state": "absent"})


def slurped_text(slurped):
    """The text slurp read, stripped; None when it read nothing."""
    if slurped.get("failed") or "content" not in slurped:
        return None
    return base64.b64decode(slurped["content"]).decode("utf-8", "replace").strip()
