# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What sbatch is given: option and export argv, the submit argv, the job's fingerprint and
the comment that records it on the job."""

from __future__ import annotations

import hashlib
import json
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted
from ansible_collections.llmtrain.slurm.plugins.module_utils.node.nccl import env_name_errors

COMMENT_PREFIX = "llmtrain:"

# sbatch long options of Slurm 22.05 to 25.05 that a task may set through `options`. The
# options the module sets itself (job name, comment, parsable, wait, chdir) are not among
# them. Those that not every release has are in OPTION_RELEASES.
SBATCH_OPTIONS = frozenset("""
account acctg-freq array batch bb bbf begin cluster-constraint clusters constraint container
contiguous core-spec cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot
dependency distribution error exclude exclusive export export-file extra-node-info get-user-env
gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres gres-flags hint hold
ignore-pbs input kill-on-invalid-dep licenses mail-type mail-user mcs-label mem mem-bind
mem-per-cpu mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks
ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket open-mode output overcommit
oversubscribe partition power priority profile propagate qos quiet reboot requeue reservation
signal sockets-per-node spread-job switches test-only thread-spec threads-per-core time time-min
tmp tres-per-task uid use-min-nodes verbose wait-all-nodes wckey
container-id extra tres-bind resv-ports segment stepmgr oom-kill-step
""".split())
# option -> (the first release whose sbatch has it, the first that no longer has it), from each
# release's src/common/slurm_opt.c and RELEASE_NOTES (docs/slurm-releases.md)
OPTION_RELEASES = {
    "container-id": ((23, 2), None),
    "extra": ((23, 2), None),
    "tres-per-task": ((23, 2), None),
    "tres-bind": ((23, 11), None),
    "resv-ports": ((24, 5), None),
    "segment": ((24, 5), None),
    "stepmgr": ((24, 5), None),
    "oom-kill-step": ((24, 11), None),
    "power": (None, (24, 5)),
}


RESERVED_OPTIONS = {
    "job-name": "set the job name with the name option",
    "comment": "the comment records the job's identity (name and fingerprint)",
    "chdir": "use the chdir option",
    "parsable": "the module always submits with --parsable",
    "wait": "use the wait option",
    "wrap": "use the content option",
}
OPTION_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")

# The sbatch options the collection's jobs set themselves, each with the variable (or the reason)
# that owns it: slurm_sbatch_options may give any other option of SBATCH_OPTIONS, never these.
COLLECTION_OPTIONS = {
    "partition": "slurm_partition",
    "nodes": "slurm_nodes",
    "ntasks": "the collection (one launcher task per node)",
    "ntasks-per-node": "the collection (one launcher task per node; slurm_procs_per_node sets the processes)",
    "cpus-per-task": "slurm_cpus_per_task",
    "mem": "slurm_mem_per_cpu (deploy_prepare_mem and inference_mem for their jobs)",
    "mem-per-cpu": "slurm_mem_per_cpu",
    "time": "slurm_time_limit (deploy_prepare_time_limit and inference_time_limit for their jobs)",
    "gres": "slurm_gpus_per_node, slurm_gpu_type and slurm_gpu_request",
    "gpus": "slurm_gpus_per_node, slurm_gpu_type and slurm_gpu_request",
    "gpus-per-node": "slurm_gpus_per_node, slurm_gpu_type and slurm_gpu_request",
    "exclude": "slurm_exclude_nodes",
    "account": "slurm_account",
    "qos": "slurm_qos",
    "reservation": "slurm_reservation",
    "constraint": "slurm_constraint",
    "exclusive": "slurm_exclusive",
    "mail-type": "slurm_mail_type",
    "mail-user": "slurm_mail_user",
    "output": "the collection (logs/%x-%j.out in the run directory, which the watch reads)",
    "error": "the collection (one log per job, logs/%x-%j.out, which the watch reads)",
    "open-mode": "the collection (a requeued job appends to its log)",
    "requeue": "run_requeue_max (how often the jobs requeue themselves)",
    "no-requeue": "run_requeue_max=0 (how often the jobs requeue themselves)",
    "signal": "pretrain_signal_lead",
    "export": "the collection (the jobs' environment: the run's env files, slurm_secret_env)",
    "export-file": "the collection (the jobs' environment: the run's env files, slurm_secret_env)",
    "array": "the collection (one job per stage)",
    "hold": "the collection (a job is held only by its node check)",
    "test-only": "the collection (ansible-playbook --check submits nothing)",
}


def fingerprint(name, content, options, env, chdir):
    """What makes two submissions the same job, as 16 hex digits."""
    blob = json.dumps(dict(name=name, content=content, options=options, env=env, chdir=chdir),
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def identity_comment(fp):
    return COMMENT_PREFIX + fp


def fingerprint_of_comment(comment):
    if comment and comment.startswith(COMMENT_PREFIX):
        return comment[len(COMMENT_PREFIX):].split(" ")[0] or None
    return None


def option_argv(options):
    """{'cpus_per_task': 2, 'exclusive': True} -> ['--cpus-per-task=2', '--exclusive'].

    Raises ValueError naming every unknown, reserved or malformed key."""
    argv, errors = [], []
    for key in sorted(options or {}):
        value = options[key]
        if not isinstance(key, str) or not OPTION_NAME.match(key):
            errors.append("%r is not an option name" % (key,))
            continue
        name = key.replace("_", "-")
        if name in RESERVED_OPTIONS:
            errors.append("%s: %s" % (key, RESERVED_OPTIONS[name]))
        elif name not in SBATCH_OPTIONS:
            errors.append("%s is not an sbatch option" % key)
        elif value is True:
            argv.append("--" + name)
        elif value is False or value is None:
            continue
        elif isinstance(value, (str, int, float)):
            argv.append("--%s=%s" % (name, value))
        else:
            errors.append("%s: value must be a string, a number or true" % key)
    if errors:
        raise ValueError("; ".join(errors))
    return argv


def export_argv(export, env):
    """The --export option that passes env (given to sbatch through its own process
    environment, so values reach the job byte for byte: commas, quotes, newlines included).

    Only variable names go on the command line; Slurm takes their values from sbatch's
    environment. export is the user's own --export value, if any."""
    names = sorted(env or {})
    errors = env_name_errors(names, "env key")
    if errors:
        raise ValueError(" ".join(errors))
    if export is None or export == "ALL" or str(export).startswith("ALL,"):
        return ["--export=%s" % (export or "ALL")]
    if str(export) in ("NONE", "NIL"):
        return ["--export=%s" % (",".join(names) or export)]
    return ["--export=%s" % ",".join([str(export)] + names)]


NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\]]*")


def is_node_name(text):
    """A node name or a hostlist item such as gpu-[01-04] (no commas: split those first)."""
    return bool(NODE_NAME.fullmatch(text.strip()))


def submit_argv(sbatch, name, comment, chdir, options, export, script):
    argv = [sbatch, "--parsable", "--job-name=" + name, "--comment=" + comment]
    if chdir:
        argv.append("--chdir=" + chdir)
    argv += options + export
    if script:
        argv.append(script)
    return argv


# a directive value sbatch reads as it is written; any other goes in double quotes, in which
# sbatch reads \" as a quote
PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.,:@/%+=-]*$")


def directive(arg):
    """'--key=value' or '--flag' as an #SBATCH line, or None where no line can carry it (a line
    break, or a backslash, which a directive reads differently from the command line)."""
    if "\n" in arg or "\r" in arg or "\\" in arg:
        return None
    key, sep, value = arg.partition("=")
    if sep and not PLAIN_VALUE.match(value):
        value = '"%s"' % value.replace('"', '\\"')
    return "#SBATCH " + key + sep + value


def kept_script(content, name, chdir, options):
    """The script as kept for people to read and submit again by hand: the job's options, which
    the module passes on sbatch's command line, written after its first line as the #SBATCH
    lines that ask for the same; the body unchanged."""
    lines = ["# The options it was submitted with (sbatch reads them from these lines when it is",
             "# submitted by hand: sbatch FILE)."]
    for arg in ["--job-name=" + name] + (["--chdir=" + chdir] if chdir else []) + list(options):
        line = directive(arg)
        lines.append(line if line is not None else "# (%s: not writable as a directive; give it to sbatch)"
                     % arg.split("=", 1)[0].replace("\n", " ").replace("\r", " "))
    head, newline, body = content.partition("\n")
    if head.startswith("#!"):
        return head + newline + "\n".join(lines) + "\n" + body
    return "\n".join(lines) + "\n" + content


def parse_parsable(stdout):
    """`sbatch --parsable` prints 'JOBID' or 'JOBID;CLUSTER'."""
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    job_id = line.split(";")[0]
    if not untrusted.digits(job_id):
        raise ValueError("sbatch printed no job id: %r" % stdout)
    return job_id
