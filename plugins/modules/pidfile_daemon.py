#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pidfile_daemon
short_description: Start, stop or restart a daemon tracked by its pid file
description:
  - Manages a daemon without an init system, the way the local test cluster runs
    C(munged), C(slurmctld) and C(slurmd).
  - A daemon counts as running when its pid file names a live process (not a zombie)
    whose program name matches O(process_name); a stale pid file or a reused pid is
    never taken for the daemon and never signalled.
  - Processes are found by pid file only, never by name.
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  name:
    description: What the daemon is called in messages.
    type: str
    required: true
  command:
    description:
      - Argument vector that starts the daemon. The daemon must detach and write
        O(pidfile) itself.
    type: list
    elements: str
  pidfile:
    description: Pid file the daemon writes.
    type: path
    required: true
  process_name:
    description:
      - Program name expected in C(/proc/PID/comm) (the kernel keeps 15 characters) and as the
        basename of the process's argv[0] (C(/proc/PID/cmdline)), both exactly.
    type: str
    required: true
  state:
    description:
      - V(started) starts the daemon when it is not running.
      - V(restarted) stops it when running, then starts it.
      - V(stopped) stops it (SIGTERM, then SIGKILL after O(timeout)).
    type: str
    choices: [started, stopped, restarted]
    default: started
  user:
    description: Run the daemon as this user (through C(runuser)).
    type: str
  netns:
    description: Start the daemon in this named network namespace (C(/var/run/netns/NAME)).
    type: str
  hostname:
    description: Start the daemon in a new UTS namespace with this hostname.
    type: str
  root:
    description:
      - Start the daemon from this root directory (C(chroot)), such as a Slurm release's root
        that the C(local_cluster) role made. With O(hostname), the daemon also gets a mount
        namespace of its own in which the root's C(/sys) shows the network namespace's
        interfaces.
      - Not with O(user).
    type: path
  log_file:
    description: The daemon's log, whose last lines are shown when it fails to start.
    type: path
  timeout:
    description: Seconds to wait for the daemon to come up or to go away.
    type: float
    default: 20
notes:
  - Supports check mode.
"""

EXAMPLES = r"""
- name: Run munged from a private directory
  llmtrain.slurm.pidfile_daemon:
    name: munged
    command: [munged, --socket=/var/lib/lc/munge/munge.socket, --pid-file=/var/lib/lc/munge/munged.pid]
    pidfile: /var/lib/lc/munge/munged.pid
    process_name: munged
    user: munge

- name: Run a slurmd as node slurm-worker-0 in its network namespace
  llmtrain.slurm.pidfile_daemon:
    name: slurmd slurm-worker-0
    command: [slurmd, -N, slurm-worker-0]
    pidfile: /var/lib/lc/run/slurmd-slurm-worker-0.pid
    process_name: slurmd
    netns: llmt-slurm-worker-0
    hostname: slurm-worker-0
    log_file: /var/lib/lc/log/slurmd-slurm-worker-0.log
"""

RETURN = r"""
pid:
  description: Pid of the running daemon; null when stopped.
  returned: always
  type: int
  sample: 4168
previous_pid:
  description: Pid that was running before this task, if any.
  returned: always
  type: int
  sample: 4100
cmd:
  description: The argument vector that started the daemon, when it was started.
  returned: when started
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import daemon


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            command=dict(type="list", elements="str"),
            pidfile=dict(type="path", required=True),
            process_name=dict(type="str", required=True),
            state=dict(type="str", default="started", choices=["started", "stopped", "restarted"]),
            user=dict(type="str"),
            netns=dict(type="str"),
            hostname=dict(type="str"),
            root=dict(type="path"),
            log_file=dict(type="path"),
            timeout=dict(type="float", default=20.0),
        ),
        required_if=[("state", "started", ["command"]), ("state", "restarted", ["command"])],
        mutually_exclusive=[("user", "root")],
        supports_check_mode=True,
    )
    p = module.params
    pid = daemon.running_pid(p["pidfile"], p["process_name"])
    result = dict(changed=False, pid=pid, previous_pid=pid)

    if p["state"] == "started" and pid:
        module.exit_json(**result)
    if p["state"] == "stopped" and not pid:
        module.exit_json(**result)

    result["changed"] = True
    if module.check_mode:
        module.exit_json(**result)

    if pid and not daemon.stop(pid, p["process_name"], p["timeout"]):
        module.fail_json(msg="%s (pid %s) did not stop within %ss, even after SIGKILL"
                         % (p["name"], pid, p["timeout"]), **result)
    if p["state"] == "stopped":
        result["pid"] = None
        module.exit_json(**result)

    argv = daemon.launch_argv(p["command"], p["user"], p["netns"], p["hostname"], p["root"])
    result["cmd"] = argv
    rc, out, err = module.run_command(argv)
    started = daemon.wait_until(lambda: daemon.running_pid(p["pidfile"], p["process_name"]),
                                p["timeout"]) if rc == 0 else None
    if not started:
        log = daemon.tail(p["log_file"]) if p["log_file"] else ""
        module.fail_json(
            msg="%s did not start: exit code %d, no live process in %s after %ss.%s%s%s"
                % (p["name"], rc, p["pidfile"], p["timeout"],
                   "\nstderr: " + err.strip() if err.strip() else "",
                   "\nstdout: " + out.strip() if out.strip() else "",
                   "\nlast lines of %s:\n%s" % (p["log_file"], log) if log else ""),
            rc=rc, stdout=out, stderr=err, **result)
    result["pid"] = started
    module.exit_json(**result)


if __name__ == "__main__":
    main()
