"""The seed's job as written (sbatch -> srun sh -c 'python -m torch.distributed.run ...')
on 3 nodes x 2 processes with gloo, through playbooks/seed_job.yml."""

import glob
import os
import re

from cluster import NODES, WORKSPACE, node, run_playbook

SEED_DIR = os.path.join(WORKSPACE, "seed")


def test_seed_job_runs_six_ranks_across_three_nodes(local_cluster):
    before = set(glob.glob(os.path.join(SEED_DIR, "TorchDist-*.out")))
    run_playbook("seed_job.yml")
    outputs = set(glob.glob(os.path.join(SEED_DIR, "TorchDist-*.out"))) - before
    assert len(outputs) == 1
    with open(outputs.pop()) as handle:
        text = handle.read()
    ranks = re.findall(r"rank=(\d+) world=(\d+) node=(\S+) sum=(\d+)", text)
    assert sorted(int(r[0]) for r in ranks) == list(range(6)), text
    assert {r[1] for r in ranks} == {"6"}
    assert {r[3] for r in ranks} == {str(sum(range(1, 7)))}
    assert sorted({r[2] for r in ranks}) == NODES
    assert sorted(r[2] for r in ranks).count(node(1)) == 2

    with open(os.path.join(SEED_DIR, "job.sh")) as handle:
        script = handle.read()
    # The shape of the seed's script is kept.
    assert "srun sh -c '" in script
    for piece in ("--nnodes ${SLURM_NNODES}", "--nproc_per_node ${GPUS_PER_NODE}",
                  "--node_rank ${SLURM_PROCID}", "--master_addr $(scontrol show hostnames | head -n 1)",
                  "--master_port ${MASTER_PORT}"):
        assert piece in script
