# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The small base every module that talks to Slurm stands on (sbatch, slurm_job_info, slurm_cluster_info,
slurm_gpu_check, slurm_node_check, run_status).

    SlurmModule(argument_spec, wait=0, **AnsibleModule kwargs).run(body)
    SlurmModule(...).dispatch({"present": present, "absent": absent})   # one body per O(state)

- one wait spec (WAIT_SPEC: wait_timeout, poll_interval, unreachable_timeout, as the doc fragments
  llmtrain.slurm.slurm.wait and .unreachable document them), checked once (poll_interval at least 1
  second, wait_timeout not negative);
- one client (slurm_client.Slurm) on the module;
- one way to fail with Slurm's error: a body raises SlurmError (or ControllerUnreachable, or one of
  `errors`) and the module fails with its message and what the body put in self.result so far;
- a body returns its result (a dict), which the module exits with: no flow relies on exit_json not
  returning. A body may still fail_json (it does not return).
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_client import ControllerUnreachable, Slurm, SlurmError


def wait_spec(timeout):
    """The options of a module that waits on jobs, wait_timeout defaulting to timeout seconds."""
    return dict(wait_timeout=dict(type="float", default=float(timeout)),
                poll_interval=dict(type="float", default=1.0),
                unreachable_timeout=dict(type="float", default=0))


class SlurmModule:
    """An AnsibleModule with a Slurm client, the wait options (wait: the default wait_timeout, None
    for a module that does not wait) and one way to end."""

    def __init__(self, argument_spec, wait=None, errors=(), **kwargs):
        spec = dict(argument_spec)
        if wait is not None:
            spec.update(wait_spec(wait))
        self.module = AnsibleModule(argument_spec=spec, **kwargs)
        self.params = self.module.params
        self.errors = (SlurmError,) + tuple(errors)
        self.result = dict(changed=False)
        if wait is not None:
            if self.params["poll_interval"] < 1:
                self.fail("poll_interval must be at least 1 (one Slurm query per second at most)")
            if self.params["wait_timeout"] < 0:
                self.fail("wait_timeout=%s must be 0 (check once) or more" % self.params["wait_timeout"])
        self.client = Slurm(self.module)

    def fail(self, msg, **extra):
        """Ends the module as failed, with what the result holds so far."""
        self.module.fail_json(msg=msg, **dict(self.result, **extra))

    def run(self, body):
        """body(self) -> the result dict; Slurm's error (and those of `errors`) ends the module failed,
        with its message."""
        try:
            result = body(self)
        except ControllerUnreachable as err:
            self.fail(str(err), controller_unreachable=True)
        except self.errors as err:
            self.fail(str(err))
        self.module.exit_json(**(self.result if result is None else result))

    def dispatch(self, states):
        """run() with the body of the module's O(state)."""
        self.run(states[self.params["state"]])
