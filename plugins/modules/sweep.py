#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sweep
short_description: A sweep's members as full runs, their training submitted as Slurm job arrays, one per shape
description:
  - "Run through its action on the controller (the task's action C(llmtrain.slurm.sweep)), which makes the members
    from the C(sweep) variable and each member's training job (C(plugins/module_utils/jobs/sweep.py)); this module
    does the work on the login node, in one call however many members."
  - "O(state=present): each member's run directory is checked and made as C(run_dirs) makes a run's (refusing one
    that others control or could replace) and gets the sweep's scripts, code and env files as hard links to the
    sweep's (one file, its mode; a copy across file systems) and its own job script and node check settings. Then the members that are
    neither done (their C(train.done.json) says the job completed) nor active (a task of an array of the sweep's
    record that Slurm still has queued or running) are submitted: those of one shape (the same sbatch options) as
    one job array, C(--array=INDICES%PARALLEL), behind the sweep's data job while that is pending. The record
    (C(sweep.json) in the sweep's run directory) keeps every array and the member each of its tasks runs."
  - "O(state=watch): as O(state=status), and a member that failed is submitted again (in an array of its own
    shape) while it has been tried at most O(retries) times; why each try ended (Slurm's state and exit code) is
    kept in the record and returned."
  - "O(state=status): nothing is made or submitted; each member's state (C(done), C(running), C(pending),
    C(failed): submitted and no longer active without completing, C(new): never submitted, C(changed): done, but its
    job script differs from the one its last task ran - a setting of the sweep or your code changed - so that
    O(state=present) trains it again, from its newest checkpoint) and its progress from the tail of its
    C(metrics.jsonl) (read backwards, bounded)."
version_added: 0.3.0
author:
  - llmtrain.slurm maintainers (!UNKNOWN)
extends_documentation_fragment:
  - llmtrain.slurm.slurm
options:
  name:
    description: The arrays' job name (C(llmtrain-sweep-<sweep>)).
    type: str
    required: true
  sweep:
    description: The sweep's name.
    type: str
    required: true
  base_dir:
    description: The sweep's run directory, made by the run's stages (scripts, code, env files, data).
    type: path
    required: true
  members:
    description:
      - "Each member: C(name), C(run_dir), C(done_file), C(shape) (the index in O(shapes) of its training job's
        sbatch options), C(files) (relative name -> text: its job script and node check settings; only
        O(state=present) writes them) and, for your own script, C(chdir) (the directory its processes run in):
        without a metrics file, its progress comes from the TensorBoard event files under C(chdir) and C(run_dir),
        else from its log lines (O(progress_regex))."
    type: list
    elements: dict
    default: []
  shapes:
    description: The sbatch options of the members' training jobs, each once (members of one shape are one array).
    type: list
    elements: dict
    default: []
  parallel:
    description: The most tasks of an array running at once (0 for as many as Slurm starts).
    type: int
    default: 0
  exclude:
    description: Nodes no task runs on (C(slurm_exclude_nodes)).
    type: list
    elements: str
    default: []
  after_records:
    description: Done records of jobs the arrays wait for while they say the job has not completed (the sweep's data job).
    type: list
    elements: path
    default: []
  retries:
    description: With O(state=watch), how many times a failed member is submitted again (after its first try).
    type: int
    default: 0
  curves:
    description:
      - Also each member's history for the comparison (C(params), C(tokens), C(final_loss), C(best_loss),
        C(val_loss), C(curve), C(val_curve), C(source), C(hours), C(gpu_hours), C(unreadable), C(truncated)), its
        progress read from its start (at most 64 MiB).
      - "The action also takes C(end) with O(state=watch): the history is read at the watch's last poll alone (when no
        member is queued or running), and that poll fails naming each member still failed and why each try ended."
    type: bool
    default: false
  progress_regex:
    description: Your script's progress lines (C(pretrain_progress_regex)); V([]) recognises the known trainers' lines.
    type: list
    elements: str
    default: []
  progress_tag:
    description: The loss's tag in your script's TensorBoard event files (C(pretrain_progress_tag)); unset, the first
      known loss tag found.
    type: str
  split:
    description: A sweep with more members than the cluster's C(MaxArraySize) is submitted as arrays of at most that many
      tasks each (per shape), member N being task N modulo the limit; false refuses it, naming the limit, before anything
      is submitted.
    type: bool
    default: false
  wait_timeout:
    description: With O(state=stopped), how long to wait for the running members to save a checkpoint and stop before
      their tasks are cancelled (C(pretrain_signal_lead)).
    type: int
    default: 300
  state:
    description:
      - C(stopped) stops every active member (the sweep's record names them; O(members) is not needed).
      - C(present) makes the members' run directories and submits every member neither done nor active.
      - C(watch) makes nothing; it submits again each failed member that has tries left (O(retries)).
      - C(status) only looks.
    type: str
    choices: [present, watch, status, stopped]
    default: present
"""

EXAMPLES = r"""
- name: Submit the sweep's members (the action makes the members from the sweep variable)
  llmtrain.slurm.sweep:
    state: present
"""

RETURN = r"""
members:
  description: Each member's C(name), C(state) (also C(stopped) - its STOP names its last task), C(job_id) (its
    array task, C(<array>_<index>)), C(tries) (the tasks that trained it), C(ended) (why each failed try ended)
    C(progress) (the step, loss, ... of its metrics' tail that it has; null before its first record) and, for one
    queued or running, C(recovered) (how it recovered - requeued, on a later start - or null); with O(curves) its
    history. The action adds the member's C(values) and C(run_dir).
  returned: unless O(state=stopped)
  type: list
  elements: dict
sweep:
  description: The sweep's C(name) and its C(line) (the members in each state and the lowest loss so far), which the
    callback llmtrain.slurm.job_progress prints per poll; made by the action on the controller.
  returned: success, not in check mode
  type: dict
local_dir:
  description: Where the action wrote C(members.json) and C(sweep.md) on the controller (C(<run_results_dir>/<sweep>)).
  returned: success, not in check mode
  type: str
counts:
  description: How many members are in each state.
  returned: always
  type: dict
signalled:
  description: With O(state=stopped), the running tasks sent the stop notice (their members save a checkpoint and stop).
  returned: with O(state=stopped)
  type: list
  elements: str
cancelled:
  description: With O(state=stopped), the tasks cancelled (pending ones, and those still running after O(wait_timeout)).
  returned: with O(state=stopped)
  type: list
  elements: str
retried:
  description: The failed members this call submitted again.
  returned: always
  type: list
  elements: str
submitted:
  description: The job ids of the arrays this call submitted, and the members of each.
  returned: always
  type: list
  elements: dict
"""

import errno
import hashlib
import json
import math
import os
import re
import stat
import time

from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import sweep as sweep_job
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.train import NAME_PREFIX
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import event_files, run_files, untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.atomic import replace_file
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress, metrics, trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record, put, run_status, trusted_dirs
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_module import SlurmModule
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import ACTIVE_STATES
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import state as sweep_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.watch.recovery import end_how
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.run_files import METRICS

# a member's run directory, as run_dirs makes a run's (env: the secrets are sourced from it)
SUBDIRS = ("env", "scripts", "checkpoints", "logs")
STATES = ("done", "running", "pending", "stopped", "failed", "new", "changed")
# the comparison reads a member's metrics file from its start up to this, and returns its loss curve
# in at most this many points
HISTORY_MAX_BYTES = 64 * 1024 * 1024
CURVE_POINTS = 200
# the logs of your script's member that its progress is looked for in, newest first
LOGS_LOOKED = 3
# a running member's new start is told by the watch's line for this long after it began
RECOVERY_TOLD_S = 900
HISTORY_FIELDS = dict(step=untrusted.COUNT, loss=untrusted.REAL, val_loss=untrusted.REAL, params=untrusted.COUNT,
                      tokens_seen=untrusted.COUNT)
# a member's own files and their modes: its job script, kept to read and submit by hand, and its node check settings
FILE_MODES = {"scripts/pretrain.sbatch": 0o755, "scripts/node_check.conf": 0o644}


def shared_files(base_dir):
    """[(relative name, its lstat)] of what each member gets from the sweep's run directory: its
    scripts (not the sweep's own job scripts or check settings), your code and its env files, regular
    files only (links and compiled caches are left)."""
    out = []
    for top in sweep_job.SHARED:
        root = os.path.join(base_dir, top)
        for directory, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(directory, d)))
            for name in sorted(files):
                if directory == os.path.join(base_dir, "scripts") and (name.endswith(".sbatch") or name == "node_check.conf"):
                    continue
                path = os.path.join(directory, name)
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode):
                    out.append((os.path.relpath(path, base_dir), info))
    return out


def link_shared(base_dir, run_dir, shared):
    """Each shared file in the member's run directory as a hard link to the sweep's (one inode, its
    mode: the member's copy costs no room and no read), replaced atomically where it is another
    file; a copy where the two are on different file systems. -> the names written."""
    written, made = [], set()
    for name, info in shared:
        path = os.path.join(run_dir, name)
        try:
            mine = os.lstat(path)
        except FileNotFoundError:
            mine = None
        if mine is not None and (mine.st_dev, mine.st_ino) == (info.st_dev, info.st_ino):
            continue
        if os.path.dirname(path) not in made:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            made.add(os.path.dirname(path))
        source = os.path.join(base_dir, name)
        try:
            if mine is None:
                os.link(source, path)  # a new member's: made whole at once
            else:
                temp = os.path.join(os.path.dirname(path), ".%s.link" % os.path.basename(path))
                if os.path.lexists(temp):
                    os.unlink(temp)
                try:
                    os.link(source, temp)
                    os.replace(temp, path)
                finally:
                    if os.path.lexists(temp):
                        os.unlink(temp)
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            with open(source, "rb") as handle:
                replace_file(path, handle.read(), stat.S_IMODE(info.st_mode), prefix="." + os.path.basename(path) + ".")
        written.append(name)
    return written


def make_member(module, member, base_dir, shared, uid):
    """The member's run directory checked and made, its files written; -> the names written."""
    subdirs = list(SUBDIRS) + sorted(set(name.split("/")[0] for name, _info in shared) - set(SUBDIRS))
    problems, own, missing = trusted_dirs.check(member["run_dir"], uid, "slurm_workspace", subdirs)
    if not problems:
        _made, problems = trusted_dirs.make(missing, uid, "slurm_workspace", [os.path.join(own, "env")])
    if problems:
        module.fail_json(msg="sweep member %s: %s" % (member["name"], "\n".join(problems)))
    try:
        written = link_shared(base_dir, member["run_dir"], shared)
        # in a run directory made now, its own files are new: written whole before anything reads them
        for name, text in sorted(member["files"].items()) if own in missing else ():
            fd = os.open(os.path.join(own, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(put.encode(text))
            os.chmod(os.path.join(own, name), FILE_MODES.get(name, 0o644))
            written.append(name)
    except OSError as err:
        module.fail_json(msg="sweep member %s: cannot put its files in %s: %s" % (member["name"], member["run_dir"], err))
    # made again from the sweep on every run of the playbook: not synced to disk one by one (a sync per
    # file is most of the time a sweep of a thousand members takes)
    for mode in sorted(set(FILE_MODES.values())) if own not in missing else ():
        files = dict((name, text) for name, text in member["files"].items() if FILE_MODES.get(name, 0o644) == mode)
        done, _same, problem = put.write_files(member["run_dir"], files, mode, fsync=False)
        written += done
        if problem:
            module.fail_json(msg="sweep member %s: %s" % (member["name"], problem))
    return written


def digest(text):
    """A member's job script, as the record keeps it: 16 hex digits of its sha256."""
    return hashlib.sha256(put.encode(text)).hexdigest()[:16]


def states(client, members, arrays):
    """{member name: (state, job id)} of every member (sweep/state.py), and C(changed) for one done
    whose job script differs from the one its last task ran."""
    active = sweep_state.active_tasks(client.jobs_of_user(), arrays)
    last = sweep_state.last_tasks(arrays)
    # the job script each member's last task ran, by its digest (kept with the array): a member done
    # whose script now differs (a setting of the sweep changed, your code changed) trains again
    ran = dict((name, (a.get("scripts") or {}).get(str(index))) for a in arrays for index, name in a["tasks"].items())
    out = {}
    for member in members:
        state, job_id = sweep_state.member_state(member["name"], member["done_file"], active, last.get(member["name"]))
        script = member["files"].get("scripts/pretrain.sbatch")
        if state == "done" and script is not None and ran.get(member["name"]) not in (None, digest(script)):
            state, job_id = "changed", None
        out[member["name"]] = (state, job_id)
    return out


def ended(client, arrays, found, run_dirs):
    """Why each failed member's last task ended (Slurm's state and exit code), kept in the record's
    array entry (its `ended`: index -> why) the first time it is seen; -> whether the record changed."""
    changed = False
    last = sweep_state.last_tasks(arrays)
    for name, (state, _job) in found.items():
        if state != "failed" or name not in last:
            continue
        array, index = last[name].split("_")
        entry = next(a for a in arrays if a["job_id"] == array)
        if index in entry.setdefault("ended", {}):
            continue
        job = client.show_job("%s_%s" % (array, index))
        why = "%s_%s %s" % (array, index, job.get("state") or "UNKNOWN")
        if job.get("exit_code") is not None:
            why += ", exit code %s" % job["exit_code"]
        if job.get("reason"):
            why += " (%s)" % job["reason"]
        if untrusted.digits(job.get("job_id")):
            why += ", its log %s/logs/%s%s-%s.out" % (run_dirs[name], NAME_PREFIX, name, job["job_id"])
        entry["ended"][index] = why
        changed = True
    return changed


MAX_ARRAY_SIZE = re.compile(r"^MaxArraySize\s*=\s*([0-9]+)\s*$", re.M)


def max_array_size(client):
    """Slurm's MaxArraySize (an array's task indices are below it), or None where it says none."""
    _rc, out, _err = client.run([client.bin("scontrol"), "show", "config"])
    found = MAX_ARRAY_SIZE.search(out)
    return int(found.group(1)) if found else None


def write_record(module, path, p, arrays):
    try:
        put.write_files(os.path.dirname(path), {os.path.basename(path): json.dumps(
            dict(sweep=p["sweep"], arrays=arrays), sort_keys=True) + "\n"}, 0o644)
    except OSError as err:
        module.fail_json(msg="cannot write the sweep's record %s: %s" % (path, err))


def member_logs(run_dir, name, max_entries=10000):
    """The member's training job logs (logs/llmtrain-<member>-<job id>.out, regular files), oldest job
    first; at most max_entries entries of its logs directory are looked at."""
    pattern = re.compile(re.escape(NAME_PREFIX + name) + r"-([0-9]{1,20})\.out$")
    found = []
    try:
        with os.scandir(os.path.join(run_dir, "logs")) as scan:
            for count, entry in enumerate(scan):
                if count >= max_entries:
                    break
                match = pattern.match(entry.name)
                if match and entry.is_file(follow_symlinks=False):
                    found.append((int(match.group(1)), entry.path))
    except OSError:
        return []
    return [path for _job, path in sorted(found)]


def progress(member, patterns=None, tag=None):
    """The member's progress, the fields it has (None before its first record): from the tail of its
    metrics file; for your script (a member with a chdir), else from the end of the newest
    TensorBoard event files under its working directory and run directory, else from the last
    progress line of its newest log that has one, of its last LOGS_LOOKED (patterns:
    pretrain_progress_regex, compiled)."""
    run_dir = member["run_dir"]
    try:
        if not member.get("chdir"):
            records, _unreadable = metrics.tail_records(os.path.join(run_dir, METRICS))
            found = metrics.progress_of(records)
        else:
            # the newest log with a progress line, of the last LOGS_LOOKED: a try that had nothing left
            # to train (it resumed at its last step) prints none
            logs = member_logs(run_dir, member["name"])[-LOGS_LOOKED:] or [None]
            found = None
            for log in reversed(logs):
                found = run_status.progress(run_dir, log, patterns, tag, event_dirs=event_dirs(member))
                if found is not None:
                    break
    except (OSError, ValueError):
        return None
    return None if found is None else dict((key, value) for key, value in found.items() if value is not None)


def recovered(run_dir, state, now=None):
    """How an active member recovered, in a few words, or None: a pending one whose last start ended
    (its task requeued), how it ended; a running one whose start began less than RECOVERY_TOLD_S
    ago after an earlier one, how that ended and the nodes this one lacks. From the last lines of its
    starts.jsonl (the job script's start and end lines), whatever its length."""
    starts, ends = run_status.starts_and_ends(os.path.join(run_dir, run_files.STARTS))
    if not starts:
        return None
    end_of = dict(((end.get("job_id"), end.get("start")), end) for end in ends)
    last = starts[-1]
    ended = end_of.get((last["job_id"], last.get("start")))
    if state == "pending" and ended:
        return "to start again: its start ended %s" % end_how(ended)
    began = run_files.stamp(last.get("time"))
    if state != "running" or len(starts) < 2 or began is None or (now or time.time()) - began > RECOVERY_TOLD_S:
        return None
    before = end_of.get((starts[-2]["job_id"], starts[-2].get("start")))
    text = "started again" + (" after its start ended %s" % end_how(before) if before else "")
    return text + (", without %s" % last["left"] if last.get("left") else "")


def event_dirs(member):
    """Where your script's TensorBoard event files are looked for: its working directory, then its run directory."""
    return list(dict.fromkeys(d for d in (member.get("chdir"), member["run_dir"]) if d))


def submit(module, client, p, group, record_path, arrays):
    """One array for the members of group ([(index, member)]); -> its entry of the record."""
    options = sweep_job.array_options(p["shapes"][group[0][1]["shape"]], [index for index, _m in group], p["parallel"])
    after = [job for job in (done_record.pending_job(path) for path in p["after_records"]) if job]
    active = set(job["job_id"] for job in client.jobs_of_user() if job["state"] in ACTIVE_STATES) if after else set()
    if [job for job in after if job not in active]:
        module.fail_json(msg="the sweep's data job %s ended without completing: see its log in %s/data/ and %s/logs/, "
                             "then run playbooks/sweep.yml again" % (", ".join(after), p["base_dir"], p["base_dir"]))
    exclude = [node for item in p["exclude"] for node in str(item).split(",") if node.strip()]
    if exclude:
        options["exclude"] = ",".join(exclude)
    if after:
        options["dependency"] = "afterok:" + ":".join(after)
    try:
        argv = sbatch_argv.option_argv(dict((k, v) for k, v in options.items() if v is not None and v is not False))
    except ValueError as err:
        module.fail_json(msg="invalid options: %s" % err)
    content = sweep_job.array_script(p["sweep"], [(index, m["name"], m["run_dir"]) for index, m in group],
                                     os.path.join(p["base_dir"], "data"))
    fp = sbatch_argv.fingerprint(p["name"], content, options, {}, p["base_dir"])
    put.write_files(p["base_dir"], {"scripts/sweep.sbatch": sbatch_argv.kept_script(content, p["name"], p["base_dir"], argv)},
                    0o755)
    command = sbatch_argv.submit_argv(client.bin("sbatch"), p["name"], sbatch_argv.identity_comment(fp), p["base_dir"],
                                      argv, [], None)
    umask = trusted_dirs.strict_umask()
    rc, out, err = module.run_command(command, data=content, binary_data=True,
                                      environ_update=dict(SLURM_UMASK="%04o" % umask))
    if rc != 0:
        module.fail_json(msg="sbatch rejected the sweep's array: %s" % (err or out).strip(), cmd=command)
    try:
        job_id = sbatch_argv.parse_parsable(out)
    except ValueError as error:
        module.fail_json(msg=str(error), cmd=command)
    entry = dict(job_id=job_id, tasks=dict((str(index), m["name"]) for index, m in group),
                 scripts=dict((str(index), digest(m["files"]["scripts/pretrain.sbatch"])) for index, m in group
                              if "scripts/pretrain.sbatch" in m["files"]))
    arrays.append(entry)
    write_record(module, record_path, p, arrays)
    return dict(entry, cmd=command)


def _from_events(member, tag, out):
    """Your script's TensorBoard event files (else Lightning metrics.csv files) as records: the newest
    FILES_COLLECTED of them under its working and run directories, each read whole up to HISTORY_MAX_BYTES."""
    paths = [path for _mtime, path in event_files.find(event_dirs(member))[:event_files.FILES_COLLECTED]]
    found = event_files.metrics_of(paths, tag or None, None, HISTORY_MAX_BYTES) if paths else dict(records=[])
    out["unreadable"] += found.get("unreadable") or 0
    if found["records"]:
        out["source"] = found["source"]
    return found["records"]


def _from_logs(member, patterns, out):
    """Your script's progress lines in its logs, every try's in order, HISTORY_MAX_BYTES in all."""
    left, lines = HISTORY_MAX_BYTES, []
    for path in member_logs(member["run_dir"], member["name"]):
        if left <= 0:
            out["truncated"] = True
            break
        with open(path, "rb") as handle:
            text = handle.read(left + 1)
        if len(text) > left:
            out["truncated"] = True
            text = text[:left]
        left -= len(text)
        lines += text.decode("utf-8", "replace").splitlines()
    state, _errors = trainer_state.read_newest(os.path.join(member["run_dir"], "checkpoints"))
    found, _warnings = log_progress.records(lines, patterns, state)
    if found:
        out["source"] = "log"
    return found


def _at_step(typed, losses, vals):
    """A typed record's loss and validation loss kept at its step (a later record of a step replaces an earlier one)."""
    if typed.get("step") is not None:
        for key, into in (("loss", losses), ("val_loss", vals)):
            if typed.get(key) is not None:
                into[typed["step"]] = typed[key]


def history(member, patterns=None, tag=None, nodes=1):
    """What the comparison takes of a member's progress, read once from its start, at most
    HISTORY_MAX_BYTES: its parameters (its first record's), the tokens it saw, its last and best loss,
    its last validation loss, its loss and validation loss curves (a step's last record; each
    downsampled to at most CURVE_POINTS points), its hours and GPU-hours (usage.json: the starts that
    ended; nodes: its job's); where the records came from (source: metrics, events, csv, log) and how
    many could not be read (said, never dropped silently), an overlong line read past in bounded pieces
    (metrics.records_from_start). The metrics file first; for your script (a member with a chdir)
    without one, its TensorBoard event files, else its log lines (patterns: pretrain_progress_regex,
    compiled; tag: pretrain_progress_tag)."""
    out = dict(params=None, tokens=None, final_loss=None, best_loss=None, val_loss=None, curve=[], val_curve=[],
               unreadable=0, truncated=False, source=None, hours=None, gpu_hours=None)
    losses, vals = {}, {}
    try:
        path = os.path.join(member["run_dir"], METRICS)
        found = metrics.records_from_start(path, HISTORY_MAX_BYTES, out) if os.path.isfile(path) else ()
        for record in found:
            if record is None:
                out["unreadable"] += 1
                continue
            typed = untrusted.fields(record, HISTORY_FIELDS)
            if out["params"] is None and typed.get("params"):
                out["params"] = typed["params"]
            if typed.get("tokens_seen") is not None:
                out["tokens"] = typed["tokens_seen"]
            _at_step(typed, losses, vals)
        if losses:
            out["source"] = "metrics"
        elif member.get("chdir"):
            for record in _from_events(member, tag, out) or _from_logs(member, patterns, out):
                _at_step(untrusted.fields(record, HISTORY_FIELDS), losses, vals)
    except (OSError, ValueError):
        pass
    curve = sorted(losses.items())
    finite = [loss for _step, loss in curve if math.isfinite(loss)]
    if curve:
        out.update(final_loss=curve[-1][1] if math.isfinite(curve[-1][1]) else None, best_loss=min(finite) if finite else None)
    val_curve = [point for point in sorted(vals.items()) if math.isfinite(point[1])]
    if val_curve:
        out["val_loss"] = val_curve[-1][1]
    out.update(curve=downsampled(curve), val_curve=downsampled(val_curve))
    usage = run_files.read_usage(member["run_dir"])
    if usage.get("gpu_s") is not None:
        out.update(gpu_hours=usage["gpu_s"] / 3600.0, hours=usage.get("node_s", 0) / 3600.0 / max(1, int(nodes or 1)))
    return out


def downsampled(curve):
    """[[step, value]] of curve's finite points, at most CURVE_POINTS and its last."""
    stride = max(1, -(-len(curve) // CURVE_POINTS))
    out = [list(point) for point in curve[::stride] if math.isfinite(point[1])]
    if curve and (len(curve) - 1) % stride and math.isfinite(curve[-1][1]):
        out.append(list(curve[-1]))
    return out


def stop(slurm):
    """Every active member of the sweep's record stopped with a checkpoint, as playbooks/stop.yml stops
    a run: a running task's member gets STOP naming the task and the task the stop notice (SIGUSR2 to
    its steps), a pending one is cancelled; then the tasks are waited for up to wait_timeout seconds
    and those left are cancelled."""
    module, client, p = slurm.module, slurm.client, slurm.params
    arrays = sweep_state.read_record(os.path.join(p["base_dir"], sweep_job.RECORD))
    workspace = os.path.dirname(os.path.normpath(p["base_dir"]))
    active = sweep_state.active_tasks(client.jobs_of_user(), arrays)
    result = dict(changed=bool(active), signalled=[], cancelled=[], left=[])
    for name, (state, task) in sorted(active.items()):
        if module.check_mode:
            continue
        # STOP names the task: the running one stops instead of requeueing itself, and neither counts as
        # failed (the watch tries no stopped member again; playbooks/sweep.yml trains it on)
        problem = put.write_files(os.path.join(workspace, name), {run_files.STOP: task + "\n"}, 0o644)[2]
        if problem:
            module.fail_json(msg="sweep member %s: %s" % (name, problem), **result)
        if state == "running":
            client.run([client.bin("scancel"), "--signal=USR2", task], ok_rcs=(0, 1))
            result["signalled"].append(task)
        else:
            client.run([client.bin("scancel"), task], ok_rcs=(0, 1))
            result["cancelled"].append(task)
    deadline = time.monotonic() + p["wait_timeout"]
    while result["signalled"] and not module.check_mode:
        left = sweep_state.active_tasks(client.jobs_of_user(), arrays)
        result["left"] = sorted(task for _state, task in left.values())
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(2)
    for task in result["left"]:
        client.run([client.bin("scancel"), task], ok_rcs=(0, 1))
        result["cancelled"].append(task)
    return result


def run(slurm):
    module, client, p = slurm.module, slurm.client, slurm.params
    if p["state"] == "stopped":
        return stop(slurm)
    for member in p["members"]:
        missing = [key for key in ("name", "run_dir", "done_file", "shape") if key not in member]
        if missing or not 0 <= int(member.get("shape") or 0) < len(p["shapes"]):
            module.fail_json(msg="members: %s lacks %s or names no shape" % (member.get("name"), ", ".join(missing)))
        member.setdefault("files", {})
    try:
        patterns = log_progress.compile_patterns(p["progress_regex"] or log_progress.DEFAULT_PATTERNS)
    except ValueError as err:
        module.fail_json(msg="pretrain_progress_regex: %s" % err)
    record_path = os.path.join(p["base_dir"], sweep_job.RECORD)
    arrays = sweep_state.read_record(record_path)
    result = dict(changed=False, submitted=[], retried=[])
    if p["state"] == "present" and not module.check_mode:
        if not os.path.isdir(os.path.join(p["base_dir"], "scripts", "llmtrain_node")):
            module.fail_json(msg="%s holds no code of the sweep: its preflight, nccl_env and deploy stages make it - run "
                                 "playbooks/sweep.yml without --tags or --skip-tags that leave them out" % p["base_dir"])
        shared = shared_files(p["base_dir"])
        uid = os.geteuid()
        for member in p["members"]:
            if make_member(module, member, p["base_dir"], shared, uid):
                result["changed"] = True
    found = states(client, p["members"], arrays)
    if ended(client, arrays, found, dict((m["name"], m["run_dir"]) for m in p["members"])) and not module.check_mode:
        write_record(module, record_path, p, arrays)
    tries = sweep_state.tasks_of_member(arrays)
    if p["state"] != "status":
        # present: every member not done nor active; watch: a failed one while it has tries left
        # (sweep_retries: its first and as many again)
        wanted = ("new", "failed", "changed", "stopped") if p["state"] == "present" else ("failed",)
        wanted_members = []
        for index, member in enumerate(p["members"]):
            state = found[member["name"]][0]
            if state in wanted and (p["state"] == "present" or len(tries.get(member["name"], [])) <= p["retries"]):
                wanted_members.append((index, member))
                if state == "failed":
                    result["retried"].append(member["name"])
        limit = max_array_size(client) if wanted_members else None
        if limit is not None and wanted_members[-1][0] >= limit and not p["split"]:
            module.fail_json(msg="sweep %s has %d members: its array tasks are numbered up to %d, and this cluster's "
                                 "MaxArraySize is %s (scontrol show config): set sweep_split: true to submit it as arrays "
                                 "of at most %s tasks each, split it into sweeps of at most %s members, or ask for a larger "
                                 "MaxArraySize. Nothing was submitted."
                                 % (p["sweep"], len(p["members"]), wanted_members[-1][0], limit, limit, limit))
        # one array per shape; past MaxArraySize (sweep_split), one per shape and block of that many
        # members, member N its task N modulo the limit
        groups = {}
        for index, member in wanted_members:
            block = index // limit if limit else 0
            groups.setdefault((int(member["shape"]), block), []).append((index - block * limit if limit else index, member))
        for key in sorted(groups):
            if module.check_mode:
                result["submitted"].append(dict(job_id=None, tasks=dict((str(i), m["name"]) for i, m in groups[key])))
                continue
            result["submitted"].append(submit(module, client, p, groups[key], record_path, arrays))
            result["changed"] = True
        for entry in result["submitted"]:
            if entry["job_id"]:
                found.update((name, ("pending", "%s_%s" % (entry["job_id"], index))) for index, name in entry["tasks"].items())
        tries = sweep_state.tasks_of_member(arrays)
    why = dict(((a["job_id"], index), text) for a in arrays for index, text in (a.get("ended") or {}).items())
    members = []
    for member in p["members"]:
        state, job_id = found[member["name"]]
        members.append(dict(name=member["name"], state=state,
                            job_id=job_id, tries=len(tries.get(member["name"], [])),
                            ended=[why[task] for task in tries.get(member["name"], []) if task in why],
                            progress=progress(member, patterns, p["progress_tag"])))
        if state in ("running", "pending"):
            members[-1]["recovered"] = recovered(member["run_dir"], state)
        if p["curves"]:
            members[-1].update(history(member, patterns, p["progress_tag"], p["shapes"][int(member["shape"])].get("nodes")))
    result.update(members=members, counts=dict((s, sum(1 for m in members if m["state"] == s)) for s in STATES),
                  arrays=[a["job_id"] for a in arrays])
    # the arguments as -vvv shows them, without the members' list and scripts (a sweep of a thousand
    # members sends megabytes, and every poll would send them back)
    result["invocation"] = dict(module_args=dict((key, value) for key, value in p.items() if key not in ("members", "shapes")),
                                members=len(p["members"]), shapes=len(p["shapes"]))
    return result


def main():
    slurm = SlurmModule(
        dict(name=dict(type="str", required=True), sweep=dict(type="str", required=True),
             base_dir=dict(type="path", required=True), members=dict(type="list", elements="dict", default=[]),
             shapes=dict(type="list", elements="dict", default=[]),
             parallel=dict(type="int", default=0), exclude=dict(type="list", elements="str", default=[]),
             after_records=dict(type="list", elements="path", default=[]),
             retries=dict(type="int", default=0), curves=dict(type="bool", default=False),
             wait_timeout=dict(type="int", default=300), split=dict(type="bool", default=False),
             progress_regex=dict(type="list", elements="str", default=[]), progress_tag=dict(type="str"),
             state=dict(type="str", default="present", choices=["present", "watch", "status", "stopped"])),
        supports_check_mode=True)
    slurm.run(run)


if __name__ == "__main__":
    main()
