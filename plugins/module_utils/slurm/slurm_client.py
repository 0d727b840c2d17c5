# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Slurm client commands, run through module.run_command as argv lists."""

from __future__ import annotations

import os
import pwd

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import ledger
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import (
    ASSOC_FORMAT, FIELD_SEP, NO_ACCOUNTING_MARKER, QUEUE_FIELDS, QUEUE_FORMAT, SACCT_FIELDS, SINFO_STATE_FORMAT, SQUEUE_FORMAT, job_from_scontrol,
    parse_associations, parse_nodes, parse_partitions, parse_records, parse_reservations, parse_sacct, parse_squeue,
    parse_state_counts, parse_version, unknown_job)


def show_argv(argv):
    """An argument vector for messages, control characters visible."""
    return " ".join(a if a.isprintable() and a else repr(a) for a in argv)


class SlurmError(Exception):
    """A Slurm command failed; the message says which and what it printed."""


# What Slurm's clients print when the controller does not answer (stopped, restarting,
# overloaded): worth retrying, unlike other failures.
UNREACHABLE_MARKERS = ("Unable to contact slurm controller", "Socket timed out", "Zero Bytes were transmitted",
                       "Connection refused", "Connection reset", "Communication connection failure",
                       "Slurm backup controller in standby mode")


class ControllerUnreachable(SlurmError):
    """The Slurm controller did not answer; the jobs themselves are unaffected."""


def slurm_error(argv, rc, out, err):
    text = (err or out).strip()
    cls = ControllerUnreachable if any(m in text for m in UNREACHABLE_MARKERS) else SlurmError
    return cls("%s failed (rc %d): %s" % (show_argv(argv), rc, text))


class Slurm:
    """Slurm client commands through module.run_command, argv lists only."""

    def __init__(self, module):
        self.module = module
        self._bins = {}
        self._sacct = None

    def bin(self, name, required=True):
        if name not in self._bins:
            self._bins[name] = self.module.get_bin_path(name, required=False)
        if required and not self._bins[name]:
            raise SlurmError("%s not found on PATH (%s): is the Slurm client installed on this host?"
                             % (name, os.environ.get("PATH", "")))
        return self._bins[name]

    def run(self, argv, ok_rcs=(0,), **kwargs):
        rc, out, err = self.module.run_command(argv, **kwargs)
        if rc not in ok_rcs:
            raise slurm_error(argv, rc, out, err)
        return rc, out, err

    def user(self):
        return pwd.getpwuid(os.getuid()).pw_name

    def jobs_of_user(self):
        """Every job of this user the controller still knows, any state."""
        _rc, out, _err = self.run([self.bin("squeue"), "--noheader", "--states=all", "--user=" + self.user(),
                                  "--format=" + SQUEUE_FORMAT])
        return parse_squeue(out)

    def queue(self):
        """Every job of this user the controller still knows, any state, with why it waits, its
        nodes and when it may start (QUEUE_FIELDS): one query for the status of every run."""
        _rc, out, _err = self.run([self.bin("squeue"), "--noheader", "--states=all", "--user=" + self.user(),
                                  "--format=" + QUEUE_FORMAT])
        return parse_squeue(out, QUEUE_FIELDS)

    def show_job(self, job_id):
        """scontrol's view of one job, sacct's when the controller forgot it, else unknown."""
        rc, out, err = self.run([self.bin("scontrol"), "show", "job", "-o", str(job_id)], ok_rcs=(0, 1))
        if rc == 0 and out.strip():
            records = parse_records(out, "JobId")
            if records:
                return job_from_scontrol(records[0])
        elif "Invalid job id" not in (err + out):
            raise slurm_error(["scontrol", "show", "job", "-o", str(job_id)], rc, out, err)
        return self.sacct_job(job_id) or unknown_job(job_id)

    def node_listing(self):
        """`scontrol show node -o` as it printed it."""
        return self.run([self.bin("scontrol"), "show", "node", "-o"])[1]

    def nodes(self):
        """`scontrol show node -o` as parse_nodes gives it."""
        return parse_nodes(self.node_listing())

    def state_counts(self, partition):
        """The partition's nodes counted per state (parse_state_counts): one short answer where
        `scontrol show node` would list every node of the cluster."""
        return parse_state_counts(self.run([self.bin("sinfo"), "--partition=" + partition, "--noheader",
                                            "--format=" + SINFO_STATE_FORMAT])[1])

    def partitions(self):
        """`scontrol show partition -o` as parse_partitions gives it."""
        return parse_partitions(self.run([self.bin("scontrol"), "show", "partition", "-o"])[1])

    def reservations(self):
        """`scontrol show reservation -o` as parse_reservations gives it."""
        return parse_reservations(self.run([self.bin("scontrol"), "show", "reservation", "-o"])[1])

    def associations(self, user):
        """(the user's associations as parse_associations gives them, None) where the cluster keeps
        accounting, else (None, why they could not be read)."""
        sacctmgr = self.bin("sacctmgr", required=False)
        if not sacctmgr:
            return None, "sacctmgr is not installed here"
        argv = [sacctmgr, "--noheader", "--parsable2", "show", "assoc", "user=" + user, "format=" + ASSOC_FORMAT]
        rc, out, err = self.module.run_command(argv)
        if rc == 0:
            return parse_associations(out), None
        text = (err or out).strip()
        if NO_ACCOUNTING_MARKER in text:
            return None, "this cluster keeps no accounting database (%s)" % " ".join(text.split())
        return None, "%s failed (rc %d): %s" % (show_argv(argv), rc, text)

    def version(self):
        """The client's Slurm version, such as '22.05.8'."""
        return parse_version(self.run([self.bin("scontrol"), "--version"])[1])

    def sacct_available(self):
        if self._sacct is None:
            self._sacct = bool(self.bin("sacct", required=False))
        return self._sacct

    def sacct(self, *selection):
        """sacct rows, or None when this cluster keeps no accounting."""
        if not self.sacct_available():
            return None
        rc, out, err = self.module.run_command(
            [self.bin("sacct"), "-X", "--noheader", "--parsable2", "--delimiter=" + FIELD_SEP,
             "--format=" + ",".join(SACCT_FIELDS)] + list(selection))
        if rc != 0:
            self._sacct = False  # accounting disabled or slurmdbd down: scontrol/squeue only
            return None
        return parse_sacct(out)

    def sacct_usage(self, job_ids):
        """sacct's allocation of each start of job_ids (ledger.parse_usage: a requeued job's starts
        apart), in one call; None when this cluster keeps no accounting, [] for no job ids."""
        if not job_ids:
            return []
        if not self.sacct_available():
            return None
        rc, out, _err = self.module.run_command(ledger.argv(self.bin("sacct"), list(job_ids)))
        if rc != 0:
            self._sacct = False
            return None
        return ledger.parse_usage(out)

    def sacct_job(self, job_id):
        rows = self.sacct("--jobs=%s" % job_id)
        return rows[0] if rows else None

    def cancel(self, job_ids):
        self.run([self.bin("scancel")] + [str(j) for j in job_ids])
