# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read run artifacts back.

  text | llmtrain.slurm.env_file_values -> {NAME: value} of an env file the nccl_env role wrote
"""

from __future__ import annotations

import shlex


def env_file_values(text):
    """The `export NAME=value` lines of an env file (values shell-quoted, as the nccl_env role
    writes them), read back as the shell would; comments and other lines are left out."""
    values = {}
    for line in (text or "").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            values[name] = value
    return values


class FilterModule(object):
    def filters(self):
        return {"env_file_values": env_file_values}
