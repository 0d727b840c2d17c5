"""A small byte-level language model trainer, written the way popular public trainers are.

Settings are module globals with defaults, overridden by a config file and by --key=value
flags (configurator.py, read from the working directory). Under torchrun it trains with DDP
(gloo on CPU). It logs plain `iter N: loss X` lines (and to W&B with --wandb_log=True), keeps one checkpoint where out_dir says,
resumes from it, and on SIGUSR2 checkpoints, writes LLMTRAIN_PREEMPT_MARKER and exits; with
--stop_on_sigusr2=False it is a script that knows nothing of SIGUSR2 (the job step's launcher
leaves the signal ignored, so it trains on).
"""
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from model import TinyLM

# defaults, overridden by config/<name>.py and --key=value
out_dir = os.environ.get("LLMTRAIN_CHECKPOINT_DIR", "out")
corpus = "model.py"
max_iters = 50
log_interval = 1
ckpt_interval = 0
batch_size = 8
block_size = 32
n_embd = 32
learning_rate = 3e-3
seed = 1337
iter_pause = 0.0
stop_on_sigusr2 = True
wandb_log = False  # W&B: project, run id, mode and directory from the WANDB_* environment
config_name = "defaults"
config_keys = [k for k, v in globals().items() if not k.startswith("_") and isinstance(v, (int, float, str))]
exec(open("configurator.py").read())  # the working directory must be this one
config = {k: globals()[k] for k in config_keys}

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
else:
    rank, world_size = 0, 1
master = rank == 0
torch.manual_seed(seed + rank)

stop = {"signal": None}
if stop_on_sigusr2:
    signal.signal(signal.SIGUSR2, lambda signum, frame: stop.update(signal="SIGUSR2"))

data = torch.tensor(list(open(corpus, "rb").read()), dtype=torch.long)


def get_batch():
    ix = torch.randint(len(data) - block_size - 1, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


model = TinyLM(vocab_size=256, block_size=block_size, n_embd=n_embd)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
ckpt_path = os.path.join(out_dir, "ckpt.pt")
iter_num = 0
if os.path.exists(ckpt_path):
    checkpoint = torch.load(ckpt_path, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    if master:
        print(f"resuming from {ckpt_path} at iter {iter_num}")
raw_model = model
if ddp:
    model = DistributedDataParallel(model)


def save():
    if master:
        os.makedirs(out_dir, exist_ok=True)
        torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num,
                    "config": config}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)


if master:
    print(f"config {config_name}: world size {world_size}, cwd {os.getcwd()}")
if master and wandb_log:
    import wandb

    wandb_run = wandb.init(config=config)
t0 = time.time()
while iter_num < max_iters:
    x, y = get_batch()
    _logits, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if master and iter_num % log_interval == 0:
        t1 = time.time()
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {(t1 - t0) * 1000:.2f}ms")
        if wandb_log:
            wandb_run.log({"loss": loss.item()}, step=iter_num)
        t0 = t1
    iter_num += 1
    if ckpt_interval and iter_num % ckpt_interval == 0:
        save()
    time.sleep(iter_pause)
    flag = torch.tensor([1 if stop["signal"] else 0])
    if ddp:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item():
        save()
        if master:
            marker = os.environ.get("LLMTRAIN_PREEMPT_MARKER")
            if marker:
                with open(marker, "w") as handle:
                    handle.write(f"SIGUSR2 at iter {iter_num}\n")
            print(f"stopped by SIGUSR2 at iter {iter_num}, checkpoint saved")
        break
else:
    save()
if master and wandb_log:
    wandb_run.finish()
if ddp:
    # No rank leaves while another is still working or tearing down: across nodes, gloo can
    # abort a rank at exit ("terminate called without an active exception") when a peer has
    # already closed its sockets, even after a final barrier. Each rank counts itself out on
    # the launcher's store, which outlives the workers, and waits for the others.
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    closed, deadline = store.add("train-closed", 1), time.time() + 30
    while closed < world_size and time.time() < deadline:
        time.sleep(0.05)
        closed = store.add("train-closed", 0)
