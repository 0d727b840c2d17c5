"""The seed's training_script.py stand-in: every rank joins the process group and
all-reduces its rank + 1, so the sum proves all ranks of all nodes took part."""

import os
import socket

import torch
import torch.distributed as dist

backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
value = torch.tensor([rank + 1.0], device="cuda" if backend == "nccl" else "cpu")
dist.all_reduce(value)
print("rank=%d world=%d node=%s sum=%d" % (rank, world, socket.gethostname(), int(value.item())), flush=True)
dist.destroy_process_group()
