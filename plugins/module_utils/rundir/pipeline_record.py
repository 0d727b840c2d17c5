# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record of a finished pipeline (<run>/pipeline.json), and whether a rerun may stop at it.

A full `playbooks/pretrain.yml` that ends well writes the record: a fingerprint of everything
the stages were made from (the run's variables, the compute nodes' own ones, your training
code's digest and the collection's own files) and a digest of each stage's record on the
cluster (the jobs' done files, the deploy manifest). A rerun computes the same fingerprint,
reads the record and the stage records in one module call, and when nothing differs and the
controller has runs/<run>/, no stage runs: the rerun of a finished run is one step. Anything
else (a changed variable or file, a stage run since, run_force, a record that cannot be
read) goes the normal way, stage by stage.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

RECORD = "pipeline.json"
# The variables of a run (as the run role checks them) and of a compute node that make it.
PREFIXES = ("slurm_", "nccl_env_", "preflight_", "deploy_", "pretrain_", "inference_")
SECRET = "slurm_secret_env"  # never hashed: a digest of a weak secret can be guessed back
# Which Slurm commands reach the cluster (PATH, SLURM_CONF), not what the run is made from: a
# login shell's PATH that differs from one day to the next must not train a finished run again.
TRANSPORT = ("slurm_client_env",)
# The collection's own files that the pipeline runs or renders.
COLLECTION_DIRS = ("roles", "plugins", "playbooks")
SKIPPED_DIRS = ("__pycache__",)

_collection_digests = {}


def collection_root():
    """The collection's directory (this file is plugins/module_utils/rundir/pipeline_record.py)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def collection_digest(root=None):
    """sha256 over the paths and contents of the collection's roles, plugins and playbooks, once
    per process: a new release or an edited template is a change."""
    root = root or collection_root()
    if root not in _collection_digests:
        digest = hashlib.sha256()
        for top in COLLECTION_DIRS:
            for base, dirs, files in os.walk(os.path.join(root, top)):
                dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if name.endswith((".pyc", ".pyo")):
                        continue
                    path = os.path.join(base, name)
                    digest.update(os.path.relpath(path, root).encode("utf-8") + b"\0")
                    try:
                        with open(path, "rb") as handle:
                            digest.update(hashlib.sha256(handle.read()).digest())
                    except (IOError, OSError) as err:  # a file that cannot be read is still part of it
                        digest.update(("unreadable %s" % err.errno).encode("ascii"))
        _collection_digests[root] = digest.hexdigest()
    return _collection_digests[root]


def run_values(values, facts=()):
    """The run's variables that make it: every name with one of PREFIXES, the secrets, the way to
    the cluster (TRANSPORT) and the facts left out (a stage's module may return one with such a
    name, such as slurm_cluster: it is what the stage found, not what the run is made from)."""
    return dict((name, value) for name, value in values.items()
                if name.startswith(PREFIXES) and name != SECRET and name not in TRANSPORT and name not in facts)


def node_values(host, values):
    """A compute node's own nccl_env_* values (its host vars: what its env file is made of),
    those that differ from the run's. Only those names are read: a host's other variables are
    not templated."""
    names = [name for name in host if name.startswith("nccl_env_")]
    return dict((name, host[name]) for name in names if host[name] != values.get(name))


def fingerprint(values, workers=None, source_digest=None, root=None, facts=()):
    """sha256 of the run's variables, each compute node's own nccl_env_* values, your code's
    digest and the collection's files. Values are hashed as JSON with sorted keys; one that
    JSON cannot hold is hashed as its repr."""
    nodes = dict((name, node_values(host or {}, values)) for name, host in (workers or {}).items())
    document = {"values": run_values(values, set(facts)), "nodes": nodes, "source": source_digest,
                "collection": collection_digest(root)}
    text = json.dumps(document, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest(text):
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def stage_digests(read):
    """{stage record: sha256 of its text or None when missing}, from a read_files result of what
    each stage leaves in the run directory when it is done (the jobs' done files, the deploy
    manifest: the run role's _run_stage_records); a stage that ran since changed its record.
    None when one could not be read (then nothing can be told)."""
    files, errors = read.get("files") or {}, read.get("errors") or {}
    if set(errors) - set([RECORD]):
        return None
    names = (set(files) | set(read.get("missing") or [])) - set([RECORD])
    return dict((name, digest(files.get(name))) for name in sorted(names))


def record_text(fingerprint_value, read):
    """The text of pipeline.json for a finished pipeline: the same inputs give the same text."""
    stages = stage_digests(read)
    if stages is None:
        return None
    return json.dumps({"fingerprint": fingerprint_value, "stages": stages}, indent=1, sort_keys=True) + "\n"


def verdict(read, fingerprint_value, local_missing=()):
    """(finished, why) for a rerun: finished when pipeline.json holds this fingerprint, every
    stage record is as it was then, and the controller lacks none of local_missing's files."""
    errors = read.get("errors") or {}
    if RECORD in errors:
        return False, "%s cannot be read (%s)" % (RECORD, errors[RECORD])
    text = (read.get("files") or {}).get(RECORD)
    if text is None:
        return False, "no %s: the pipeline has not finished with these inputs" % RECORD
    try:
        record = untrusted.loads(text, len(text))
    except untrusted.Unreadable as err:
        return False, "%s cannot be read (%s)" % (RECORD, err)
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint_value:
        return False, "the inputs differ from those of the finished pipeline"
    stages = stage_digests(read)
    if stages is None or record.get("stages") != stages:
        return False, "a stage ran again since the pipeline finished"
    if local_missing:
        return False, "this controller lacks %s" % ", ".join(local_missing)
    return True, "finished with these inputs"
