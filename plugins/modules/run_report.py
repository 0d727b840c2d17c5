#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: run_report
short_description: Write a run's report.md and loss.png on the controller from what was fetched
description:
  - Reads the files of the run that the collect step fetched into O(run_dir) (C(metrics.jsonl),
    C(node_times.json), C(starts.jsonl), C(hangs/*/summary.json), C(samples.txt), C(model.json),
    C(summary.json)) and the run's facts (O(facts)), and writes C(report.md), C(loss.png) (the train
    and val loss against the step, with the preemptions and resumes) and, when the run has more nodes
    than the report's step-time table shows, C(nodes.md), each written whole then renamed into place.
  - Whatever is missing is reported as missing, so that a failed run still gets a report of what exists.
    The same files give the same report. Every value read is untrusted text, escaped in the report.
  - Runs on the controller, in the action plugin of the same name (the run role's report step); the
    module itself refuses to run. C(loss.png) needs C(matplotlib) in the Python that runs
    C(ansible-playbook); without it the report says there is no plot.
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  run_dir:
    description:
      - The run's directory on the controller, C(runs/<run_name>). Created when missing.
    type: path
    required: true
  facts:
    description:
      - The run's facts, the JSON file the collect step wrote. Defaults to C(facts.json) in O(run_dir).
        A file that does not exist leaves the report's sections it feeds as not recorded.
    type: path
notes:
  - Supports check mode, in which it writes nothing.
"""

EXAMPLES = r"""
- name: Write report.md and loss.png
  llmtrain.slurm.run_report:
    run_dir: "{{ run_local_dir }}"
    facts: "{{ run_local_dir }}/facts.json"
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: The path of C(report.md).
  returned: success, not in check mode
  type: str
  sample: /home/user/llmtrain/runs/gpt2-124m/report.md
plot:
  description: The path of C(loss.png), or null when none was drawn (no loss records, or no C(matplotlib)).
  returned: success, not in check mode
  type: str
  sample: /home/user/llmtrain/runs/gpt2-124m/loss.png
report_warnings:
  description:
    - What could not be read or drawn (a file that is not JSON, no loss records, no C(matplotlib)), each
      also said in the report. Not Ansible warnings, which a run that has not logged a step yet would
      raise on every look at it.
  returned: success, not in check mode
  type: list
  elements: str
  sample: ["no loss records in runs/gpt2-124m/metrics.jsonl; report.md says so and no plot is drawn"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.run_report import ARGUMENT_SPEC


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="llmtrain.slurm.run_report writes the report on the controller, in its action plugin: "
                         "run it as a task's action llmtrain.slurm.run_report (delegate_to: localhost)")


if __name__ == "__main__":
    main()
