#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: read_files
short_description: Read several small text files of one directory with one module call
description:
  - Returns the text of each file of O(names) under O(src) that exists; a missing one is listed
    in RV(missing), one that cannot be read (permissions, a link, not a regular file, larger than
    O(max_bytes), not UTF-8) in RV(errors), and neither fails the task. Links are not followed.
  - One call for the whole set. M(ansible.builtin.slurp) in a loop runs one module per file;
    the records a run's stages leave (preflight's, the node and network checks', the bad
    nodes, the facts) took the collect step about two seconds that way on a login node.
  - The counterpart of M(llmtrain.slurm.put_files).
version_added: 0.1.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
options:
  src:
    description:
      - The directory the names are relative to.
    type: path
    required: true
  names:
    description:
      - File names relative to O(src) (no C(..), not absolute).
    type: list
    elements: str
    required: true
  max_bytes:
    description:
      - A file larger than this is not read; it is named in RV(errors).
    type: int
    default: 1048576
  trainer_state_dir:
    description:
      - A directory of Hugging Face Trainer checkpoints (C(checkpoint-N/)) whose newest C(trainer_state.json)
        is read into RV(trainer_state). The file holds every logged record of a run and grows with it, to
        hundreds of MB, so only its first 4 KiB and last 4 MiB are read, here, and what they hold returned.
    type: path
  event_dirs:
    description:
      - Directories whose TensorBoard event files (C(events.out.tfevents.*)) and Lightning C(metrics.csv)
        files (in a C(version_*) directory) are listed in RV(event_files) - this user's regular files, looked
        for 4 levels down among at most 20,000 entries, checkpoint directories not entered; the newest 64.
        Only their names are returned; the collect step fetches them and turns their scalars into metrics.
    type: list
    elements: path
    default: []
    version_added: 0.2.0
  list_dir:
    description:
      - A directory relative to O(src) whose entries (files, directories and links, not followed; not
        those whose names start with C(.)) are listed in RV(entries), as M(ansible.builtin.find) with
        O(ansible.builtin.find#module:file_type=any) would. At most 100,000; beyond that RV(errors) says so.
    type: str
    version_added: 0.3.0
notes:
  - Supports check mode (it changes nothing).
"""

EXAMPLES = r"""
- name: Read the run's records in one call
  llmtrain.slurm.read_files:
    src: /shared/runs/tiny
    names: [preflight.json, facts.json, bad_nodes.json]
  register: records

- name: Use one that may be missing
  ansible.builtin.debug:
    msg: "{{ records.files['facts.json'] | default('{}') | llmtrain.slurm.from_run_json({}, 'facts.json') }}"
"""

RETURN = r"""
files:
  description: Name -> text, for every file that exists and was read.
  returned: always
  type: dict
  sample: {"facts.json": "{\"run_name\": \"tiny\"}\n"}
missing:
  description: The names that do not exist.
  returned: always
  type: list
  elements: str
  sample: [bad_nodes.json]
errors:
  description: Name -> why it could not be read, for files that exist but were not read.
  returned: always
  type: dict
  sample: {"preflight.json": "permission denied"}
trainer_state:
  description:
    - The Trainer's state of the newest checkpoint in O(trainer_state_dir) whose C(trainer_state.json) reads -
      C(global_step), C(max_steps), C(logging_steps), C(epoch), and C(entries) (C([step, epoch, loss]) of the
      training records of C(log_history) in the part read) - or null. What cannot be read is in RV(errors)
      under C(trainer_state.json).
  returned: when O(trainer_state_dir) is given
  type: dict
  sample: {"global_step": 30, "max_steps": 30, "logging_steps": 5, "epoch": 3.0, "entries": [[5, 0.5, 2.31]]}
event_files:
  description:
    - The files found under O(event_dirs) that lie in O(src), relative to it, oldest first.
  returned: always
  type: list
  elements: str
  sample: [src/lightning_logs/version_4242/events.out.tfevents.1765000000.node1.77.0]
event_files_outside:
  description: The files found under O(event_dirs) that lie outside O(src) (absolute), oldest first.
  returned: always
  type: list
  elements: str
  sample: []
entries:
  description: The entries of O(list_dir) (C(path), C(mtime)), none when it does not exist.
  returned: when O(list_dir) is given
  type: list
  elements: dict
  sample: [{"path": "/shared/runs/tiny/checkpoints/step_000100.pt", "mtime": 1765000000.5}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import read_text, relative_name_error

# the most entries of list_dir returned
LIST_MAX = 100000


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            names=dict(type="list", elements="str", required=True),
            max_bytes=dict(type="int", default=1048576),
            trainer_state_dir=dict(type="path"),
            event_dirs=dict(type="list", elements="path", default=[]),
            list_dir=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    named = p["names"] + ([p["list_dir"]] if p["list_dir"] else [])
    problems = ["%r %s" % (name, why) for name, why in ((n, relative_name_error(n)) for n in named) if why]
    if problems:
        module.fail_json(msg="names: each is a path inside src: %s" % "; ".join(problems))
    if p["max_bytes"] < 0:
        module.fail_json(msg="max_bytes=%d: give a size in bytes, 0 or more" % p["max_bytes"])
    files, missing, errors = {}, [], {}
    for name in p["names"]:
        text, why = read_text(os.path.join(p["src"], name), p["max_bytes"])
        if text is not None:
            files[name] = text
        elif why:
            errors[name] = why
        else:
            missing.append(name)
    result = dict(changed=False, files=files, missing=missing, errors=errors)
    if p["trainer_state_dir"]:
        state, unread = trainer_state.read_newest(p["trainer_state_dir"], tail_bytes=trainer_state.COLLECT_TAIL_BYTES)
        result["trainer_state"] = trainer_state.compact(state)
        if unread:
            errors[trainer_state.NAME] = "; ".join(unread)
    inside, outside = [], []
    real_src = os.path.realpath(p["src"]).rstrip("/") + "/"
    for _mtime, path in reversed(event_files.find(p["event_dirs"])[:event_files.FILES_COLLECTED]):
        real = os.path.realpath(path)
        if real.startswith(real_src):
            inside.append(real[len(real_src):])
        else:
            outside.append(path)
    result.update(event_files=inside, event_files_outside=outside)
    if p["list_dir"]:
        result["entries"] = list_entries(os.path.join(p["src"], p["list_dir"]), p["list_dir"], errors)
    module.exit_json(**result)


def list_entries(path, name, errors):
    """[{path, mtime}] of the entries of the directory at path, not those named .*, at most LIST_MAX."""
    entries = []
    try:
        with os.scandir(path) as found:
            for entry in found:
                if entry.name.startswith("."):
                    continue
                if len(entries) == LIST_MAX:
                    errors[name] = "it has more than %d entries; %d are listed" % (LIST_MAX, LIST_MAX)
                    break
                try:
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue  # gone meanwhile
                entries.append({"path": entry.path, "mtime": mtime})
    except FileNotFoundError:
        pass
    except OSError as err:
        errors[name] = err.strerror or str(err)
    return entries


if __name__ == "__main__":
    main()
