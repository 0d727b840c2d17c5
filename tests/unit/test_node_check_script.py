"""roles/run/files/node_check.sh, the first step of every job, run by bash with Slurm's commands
faked (scontrol answers from recorded 22.05 output; srun runs the step once per node, here)."""

import json
import os
import shutil
import subprocess

import pytest
import sys
from pathlib import Path
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs import base
from ansible_collections.llmtrain.slurm.tests.unit.test_node_package import ship_node_package

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "slurm"
NODES = ["gpu-worker-0", "slurm-worker-1"]
TOOLS = ["sh", "bash", "cat", "cut", "dirname", "grep", "hostname", "kill", "mkdir", "printf", "rm", "sleep", "tail", "timeout",
         "wc"]

FAKE_SCONTROL = """#!/bin/sh
echo "$*" >> "$FAKE_CALLS"
case "$1 $2" in
    "show hostnames") printf '%s\\n' $FAKE_NODES ;;
    "show node") [ -n "$FAKE_NODE_ANSWER" ] && exec cat "$FAKE_NODE_ANSWER"
                 echo "Unable to contact slurm controller" >&2; exit 1 ;;
    *) exit 1 ;;
esac
"""
FAKE_SRUN = """#!/bin/sh
echo "srun $*" >> "$FAKE_CALLS"
while [ "${1#--}" != "$1" ]; do shift; done
for node in $FAKE_NODES; do SLURMD_NODENAME=$node "$@" || exit $?; done
"""

# srun as above, and Slurm's stop notice (#SBATCH --signal=USR2@lead, or scancel --signal=USR2)
# sent to the step's process while it checks: as soon as it ignores SIGUSR2 (its SigIgn mask),
# or once it maps libtorch (a check with --require-torch imports torch, which takes seconds), then every 50 ms
FAKE_SRUN_NOTICE = """#!/bin/bash
echo "srun $*" >> "$FAKE_CALLS"
while [ "${1#--}" != "$1" ]; do shift; done
for node in $FAKE_NODES; do
    SLURMD_NODENAME=$node "$@" & pid=$!
    while kill -0 $pid 2>/dev/null; do
        mask=$(grep '^SigIgn:' /proc/$pid/status 2>/dev/null | cut -f2)
        [ -n "$mask" ] && [ $(( 0x$mask & 0x800 )) -ne 0 ] && break
        grep -q libtorch /proc/$pid/maps 2>/dev/null && break
        sleep 0.01
    done
    while kill -USR2 $pid 2>/dev/null; do echo "USR2 $node" >> "$FAKE_CALLS"; sleep 0.05; done
    wait $pid || exit $?
done
"""


def job_start(tmp_path, node_answer, srun=FAKE_SRUN, args=(), extra_env=None):
    """Runs node_check.sh as a job of NODES would, with args (node_check.py check options);
    -> (exit status, output, Slurm calls, summary)."""
    run = tmp_path / "run"
    scripts = run / "scripts"
    scripts.mkdir(parents=True)
    (run / "env").mkdir()
    for name in ("node_check.sh", "bad_nodes.sh", "exit_codes.sh"):
        shutil.copy(str(ROOT / "roles" / "run" / "files" / name), str(scripts / name))
    ship_node_package(scripts)
    (scripts / "node_check.conf").write_text(base.Run(dict(
        run_name="run", slurm_workspace=str(tmp_path), slurm_python=sys.executable, slurm_node_check_timeout=60,
        run_bad_node_policy="fail", run_requeue_max=0, run_gpu_policy="strict", run_gpu_diag=0)).check_settings())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", srun)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for tool in TOOLS:  # and nothing else: no nvidia-smi of the machine the tests run on
        os.symlink(shutil.which(tool), str(bin_dir / tool))
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH=str(bin_dir), CUDA_VISIBLE_DEVICES="", FAKE_CALLS=str(calls),
               FAKE_NODES=" ".join(NODES), FAKE_NODE_ANSWER=node_answer, SLURM_JOB_ID="42", SLURM_JOB_NAME="llmtrain-t",
               SLURM_JOB_NODELIST="gpu-worker-0,slurm-worker-1", SLURM_JOB_NUM_NODES="2", LLMTRAIN_RUN_DIR=str(run), **(extra_env or {}))
    proc = subprocess.run(["bash", str(scripts / "node_check.sh")] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False, timeout=300)
    summary = json.loads((run / "node_check" / "llmtrain-t.json").read_text())
    return proc.returncode, proc.stdout, calls.read_text().splitlines(), summary


def test_the_batch_node_asks_slurm_once_for_every_node_of_the_job(tmp_path):
    answer = tmp_path / "answer.txt"
    answer.write_text((FIXTURES / "scontrol_show_node.txt").read_text() +
                      (FIXTURES / "scontrol_show_node_gres.txt").read_text())
    rc, output, calls, summary = job_start(tmp_path, str(answer))
    # one query, by the batch node; no node's check asked the controller itself
    assert [c for c in calls if c.startswith("show node")] == ["show node -o gpu-worker-0,slurm-worker-1"]
    assert [n["registered"] for n in summary["nodes"]] == [2, 0]
    # Slurm registers gpu:2 on gpu-worker-0, which has none: bad under gpu_policy=strict, policy fail
    assert rc == 78, output
    assert "llmtrain: node check: gpu-worker-0 is bad: Slurm registers gpu:2, the node detects 0" in output
    assert not os.path.exists(str(tmp_path / "run" / "node_check" / "42.0"))  # the check's directory is gone


def test_a_failed_query_leaves_what_slurm_registers_untold(tmp_path):
    rc, output, calls, summary = job_start(tmp_path, "")
    assert [c for c in calls if c.startswith("show node")] == ["show node -o gpu-worker-0,slurm-worker-1"]
    assert [n["registered"] for n in summary["nodes"]] == [None, None]
    assert rc == 0, output
    assert ("llmtrain: node check: 'scontrol show node -o gpu-worker-0,slurm-worker-1' failed on %s (Unable to "
            "contact slurm controller): the GPUs Slurm registers are not compared this start; check that the "
            "controller answers there" % os.uname()[1]) in output


@pytest.mark.parametrize("recorded", [False, True], ids=["other-jobs", "training-job"])
def test_a_stop_notice_during_the_check_does_not_make_the_nodes_look_dead(tmp_path, recorded):
    """A preemption or time-limit notice that comes while the nodes check themselves: the check
    has nothing to save and goes on, rather than dying and having every node named as one that
    did not answer (and excluded). The check of a job that imports torch (the training job's) takes
    seconds, the time a notice has to come. The training job's script names a file
    (LLMTRAIN_STOP_NOTICE) where each node's check records it, to requeue before training."""
    notice = tmp_path / "STOP_NOTICE"
    rc, output, calls, summary = job_start(tmp_path, "", srun=FAKE_SRUN_NOTICE, args=["--require-torch"],
                                           extra_env={"LLMTRAIN_STOP_NOTICE": str(notice)} if recorded else None)
    if recorded:
        assert sorted(set(notice.read_text().splitlines())) == ["SIGUSR2 on " + n for n in NODES], (calls, output)
    else:
        assert not notice.exists()
    assert sorted(set(c for c in calls if c.startswith("USR2 "))) == ["USR2 " + n for n in NODES]  # signalled
    assert rc == 0, output
    assert "did not answer" not in output and "User defined signal" not in output, output
    assert [n["node"] for n in summary["nodes"]] == NODES


@pytest.mark.parametrize("array, held", [
    ({}, "requeuehold 42"),
    ({"SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "7"}, "requeuehold 42_7"),
])
def test_a_check_that_found_bad_nodes_requeues_this_job_alone_held(tmp_path, array, held):
    """As a task of a job array, by <array>_<index>: the array's last task has the array's job id, and
    requeuing that would requeue every task (fixtures/slurm/arrays/requeue-*.txt)."""
    (tmp_path / "scontrol").write_text('#!/bin/sh\necho "$*" >> "$FAKE_CALLS"\n')
    (tmp_path / "scontrol").chmod(0o755)
    files = ROOT / "roles" / "run" / "files"
    env = dict(os.environ, PATH="%s:%s" % (tmp_path, os.environ["PATH"]), FAKE_CALLS=str(tmp_path / "calls"),
               SLURM_JOB_ID="42", **array)
    proc = subprocess.run(["bash", "-c", '. "$1"; . "$2"; requeue_without_bad_nodes "node check" exclude 0 2; echo "rc $?"',
                           "sh", str(files / "exit_codes.sh"), str(files / "bad_nodes.sh")], env=env, stdout=subprocess.PIPE,
                          universal_newlines=True, check=True)
    assert (tmp_path / "calls").read_text().splitlines() == [held]
    assert "requeue 1 of 2 without the bad node(s)" in proc.stdout and proc.stdout.split()[-2] == "rc"
