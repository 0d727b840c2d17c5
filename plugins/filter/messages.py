# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that compose the messages a failed training job ends the play with.

  job | llmtrain.slurm.lost_nodes_message(job_name, down_nodes, log_errors, newest_checkpoint)
  job | llmtrain.slurm.job_failure_message(log, job_name, local_dir, run_dir, procs_per_node)
  name | llmtrain.slurm.exit_code -> its number, from plugins/module_utils/node/exit_codes.py (the job templates')

The messages are made in module_utils/watch/messages.py, which the collect step (collect_run) calls
too: a message holds what the job wrote (its log's lines, a check's table, Slurm's reasons) and is
made printable (node/untrusted.py), whatever stdout callback shows it.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import exit_codes
# the messages themselves, which the collect step (collect_run) makes too
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.messages import (
    job_failure_message, lost_nodes_message, never_starts_message)


def exit_code(name):
    """The number of an exit code of the table (plugins/module_utils/node/exit_codes.py), by its name."""
    try:
        return exit_codes.code(name)
    except KeyError:
        raise AnsibleFilterError("exit_code: no exit code %r; the table has %s"
                                 % (name, ", ".join(exit_codes.BY_NAME))) from None


class FilterModule(object):
    def filters(self):
        return {"lost_nodes_message": lost_nodes_message, "job_failure_message": job_failure_message,
                "never_starts_message": never_starts_message, "exit_code": exit_code}
