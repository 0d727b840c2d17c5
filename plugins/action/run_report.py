# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action of llmtrain.slurm.run_report: the run's report written on the controller, in this
process (plugins/module_utils/rundir/run_report.py). See plugins/modules/run_report.py for the options."""

from __future__ import annotations

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.run_report import ARGUMENT_SPEC, write_report


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp  # tmp no longer has any effect
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if self._task.check_mode:
            result.update(changed=False, msg="check mode: the report of %s is not written" % args["run_dir"])
            return result
        try:
            report, plot, warnings = write_report(args["run_dir"], args["facts"])
        except OSError as err:
            result.update(failed=True, changed=False, msg="cannot write the report in %s: %s" % (args["run_dir"], to_text(err)))
            return result
        result.update(changed=True, report=report, plot=plot, report_warnings=warnings)
        return result
