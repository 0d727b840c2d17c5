# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the run_* variables (the run role's): the run's name, your training code's paths
(that the files exist is checked where they are read, on the controller), requeues, W&B, webhooks."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, one_line, strings
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.argument_specs import choices
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.notify import FORMATS as NOTIFY_FORMATS
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.notify import host_of, odd_character

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# characters W&B refuses in a project name
WANDB_PROJECT_FORBIDDEN = "/\\#?%:"


def errors(values):
    """values: the variables that are set -> [message] about the run_* among them."""
    found = []
    if "run_name" in values and not RUN_NAME.fullmatch(str(values["run_name"] or "")):
        found.append("run_name=%r must be 1-64 letters, digits, . _ - starting with a letter or digit "
                     "(it names a directory and the job)." % values["run_name"])
    script, source = values.get("run_script"), values.get("run_source_dir")
    for name in ("run_script", "run_source_dir", "run_script_chdir"):
        if name in values and not one_line(values[name]):
            found.append("%s=%r must be a path on one line, or null." % (name, values[name]))
    if source and one_line(source):
        if not script:
            found.append("run_source_dir=%s is set but run_script is not: name your training script inside "
                         "it, such as run_script: train.py." % source)
        elif one_line(script) and (script.startswith("/") or ".." in script.split("/")):
            found.append("run_script=%s must be a path inside run_source_dir=%s, relative to it (such as "
                         "train.py or scripts/train.py), when run_source_dir is set." % (script, source))
    if "run_source_exclude" in values:
        message = strings(values, "run_source_exclude", "[\"data/*\", \"*.ckpt\"]")
        if message and values["run_source_exclude"] != []:
            found.append(message)
    count(found, values, "run_requeue_max", 0, "how often a preempted job may requeue itself")
    project = values.get("run_wandb_project")
    if project is not None and (not isinstance(project, str) or not project or len(project) > 128
                                or set(project) & set(WANDB_PROJECT_FORBIDDEN)):
        found.append("run_wandb_project=%r must be a W&B project name: 1-128 characters, none of %s (the "
                     "entity goes in run_wandb_entity)." % (project, " ".join(WANDB_PROJECT_FORBIDDEN)))
    if values.get("run_wandb_mode", "online") not in choices("run_wandb_mode"):
        found.append("run_wandb_mode=%r must be online (the nodes reach W&B) or offline (wandb sync later)."
                     % (values["run_wandb_mode"],))
    found += notify_errors(values.get("run_notify", []))
    return found


def notify_errors(hooks):
    """run_notify's entries: {url: http(s)://... of printable ASCII, format: slack|json}. A URL is never shown (it holds
    a token)."""
    fix = "such as run_notify: [{url: \"{{ vault_slack_webhook }}\", format: slack}]"
    if hooks is None:
        return []
    if not isinstance(hooks, list):
        return ["run_notify must be a list of webhooks, %s." % fix]
    found = []
    for index, hook in enumerate(hooks):
        if not isinstance(hook, dict) or not isinstance(hook.get("url"), str):
            found.append("run_notify[%d] must be a webhook with a url, %s." % (index, fix))
            continue
        try:
            parts = urlsplit(hook["url"])
            good = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            good = False
        odd = odd_character(hook["url"])
        if odd:
            # the entry is named by its host besides its index, where the host is printable and as written
            # (urlsplit drops a tab or a line break)
            host = host_of(hook["url"])
            named = " (to %s)" % host if good and not odd_character(host) and host in hook["url"].lower() else ""
            found.append("run_notify[%d].url%s has %s, which a URL cannot hold: remove it (often a blank or line "
                         "break copied with the URL, at its end) or percent-encode it (%%20 for a space). The URL "
                         "is not shown here: it holds a token." % (index, named, odd))
        elif not good:
            found.append("run_notify[%d].url must be an http:// or https:// URL on one line (not shown here: it may "
                         "hold a token)." % index)
        if hook.get("format", "slack") not in NOTIFY_FORMATS:
            found.append("run_notify[%d].format=%r must be one of %s." % (index, hook.get("format"),
                                                                          ", ".join(NOTIFY_FORMATS)))
        unknown = sorted(str(k) for k in hook if k not in ("url", "format"))
        if unknown:
            found.append("run_notify[%d] has %s: a webhook has url and format alone." % (index, ", ".join(unknown)))
    return found
