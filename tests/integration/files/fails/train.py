"""A training script of your own that fails: rank 1 raises at its third step, as a script with a
missing data shard would. What the status playbook shows of a failed run: its state, its log's
last lines and this rank's traceback."""

import os
import time

RANK = int(os.environ.get("RANK", "0"))


def load_shard(step):
    if RANK == 1 and step == 3:
        raise FileNotFoundError("data shard %d of rank %d is missing" % (step, RANK))


for step in range(1, 4):
    load_shard(step)
    print("iter %d: loss %.2f, time 1ms" % (step, 4.0 - step), flush=True)
    time.sleep(0.5)
time.sleep(30)  # the other ranks wait until torch.distributed.run ends them
