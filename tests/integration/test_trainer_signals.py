"""How a stop request reaches the trainer under the seed's launch shape, on the real
local cluster: srun sh -c '... exec python -m torch.distributed.run ... -m trainer.train'.

The step's shell ignores SIGUSR2 (`trap "" USR2`, inherited through exec) so the
launcher survives it, while Slurm delivers it to every process of the step, workers
included; SIGTERM (requeue, cancel, time limit) the launcher forwards itself. Either way
every rank checkpoints at the same step and the run leaves a PREEMPTED marker.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from cluster import ROOT, slurm

FILES = os.path.join(ROOT, "roles", "deploy", "files")
FAULTS = os.path.join(ROOT, "tests", "faults")  # its sitecustomize.py applies TRAINER_FAULT_STEP_PAUSE_S
STEPS = 40

JOB = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --output={dir}/%x-%j.out
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-cpu=500M
{extra}
export PYTHONPATH={faults}:{files}
export LLMTRAIN_PYTHON={python}
export GLOO_SOCKET_IFNAME=eth0
export TRAINER_FAULT_STEP_PAUSE_S={pause}
export MASTER_PORT=$((16000 + SLURM_JOB_ID % 8000))
cd {dir}
srun --kill-on-bad-exit=1 sh -c 'trap "" USR2; exec "${{LLMTRAIN_PYTHON}}" -u -m torch.distributed.run \\
    --nnodes ${{SLURM_NNODES}} --nproc_per_node 1 --node_rank ${{SLURM_PROCID}} \\
    --master_addr $(scontrol show hostnames | head -n 1) --master_port ${{MASTER_PORT}} \\
    -m trainer.train --data data --out run --steps {steps} --n-layer 1 --n-head 2 --n-embd 32 \\
    --block-size 32 --batch-size 4 --checkpoint-interval 1000 --log-interval 1 --eval-interval 0'
"""


@pytest.fixture
def workdir(local_cluster, tmp_path_factory):
    path = tmp_path_factory.mktemp("signals", numbered=True)
    os.chmod(str(path), 0o755)
    subprocess.run([sys.executable, "-m", "trainer.prepare", "--out", str(path / "data"), "--max-bytes", "200000"],
                   env=dict(os.environ, PYTHONPATH=FILES), check=True, stdout=subprocess.PIPE, timeout=120)
    return path


def submit(workdir, name, extra="", pause=0.3, steps=STEPS):
    script = workdir / "job.sh"
    script.write_text(JOB.format(name=name, dir=workdir, extra=extra, faults=FAULTS, files=FILES,
                                 python=sys.executable, pause=pause, steps=steps))
    return slurm("sbatch", "--parsable", str(script)).strip().split(";")[0]


def records(workdir):
    path = workdir / "run" / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def job_state(job_id):
    out = slurm("squeue", "--noheader", "--jobs", job_id, "--states=all", "--format=%T")
    return out.strip()


def training_step(workdir):
    steps = [r["step"] for r in records(workdir) if "loss" in r]
    return steps[-1] if steps else 0


def assert_checkpointed_on_signal(workdir, signal_name):
    marker = json.loads((workdir / "run" / "PREEMPTED").read_text())
    step = marker["step"]
    assert marker["signal"] == signal_name
    assert (workdir / "run" / "checkpoints" / ("step_%06d.pt" % step)).exists()
    assert training_step(workdir) == step  # nothing trained past the checkpoint
    assert {"event": "preempted", "step": step, "signal": signal_name} in records(workdir)
    return step


def test_scancel_usr2_checkpoints_at_the_current_step(workdir):
    job = submit(workdir, "sig-usr2")
    wait_for(lambda: training_step(workdir) >= 5, 120, "training to reach step 5")
    slurm("scancel", "--signal=USR2", job)
    wait_for(lambda: job_state(job) in ("", "COMPLETED", "FAILED", "CANCELLED"), 120, "the job to end")
    step = assert_checkpointed_on_signal(workdir, "SIGUSR2")
    assert 5 <= step < STEPS


# A requeue (SIGTERM, checkpoint, resume at the same step, every step once) and the time
# limit's warning signal (SIGUSR2, checkpoint before the kill) are tested through the
# playbook, on this same launch shape, in test_reliability.py (preemption and time-limit
# tests), which also compare the trajectory and count the requeues.
