"""Distribution: this process's place among the ranks and what the ranks agree on.

Owns the process group (joining it within --rendezvous-timeout, with a hint naming the
settings that decide the route when it fails; tearing it down so that no rank closes its
sockets under another), the few collectives the loop needs (mean, all-gathers, broadcast,
barrier, an all-reduce that does not wait), FSDP2 sharding of the model, and stopping: the
signal handlers that record a stop request and the ranks' vote on when to act on it.
"""

import inspect
import os
import signal
import socket
import sys
import threading
import time

import torch
import torch.distributed as torch_dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

# all_gather_into_tensor, renamed (and the old name deprecated) in newer torch
ALL_GATHER_SINGLE = getattr(torch_dist, "all_gather_single", None) or torch_dist.all_gather_into_tensor
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped on request with a checkpoint; run it again to continue
EXIT_RENDEZVOUS = 3  # the ranks did not all connect within --rendezvous-timeout
CLOSED_KEY = "llmtrain/process-group-closed"  # on the launcher's store: how many ranks have torn down
CLOSE_WAIT_S = 60.0


def takes_device_id():
    """torch 2.3 and later take the rank's device in init_process_group."""
    return "device_id" in inspect.signature(torch_dist.init_process_group).parameters


class Distributed:
    """This process's place in the job, and the few collectives the loop needs.

    Without RANK in the environment the run is a single process and every collective is
    the identity.
    """

    def __init__(self, rendezvous_timeout=300):
        self.active = "RANK" in os.environ
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self._copy_stream = None  # CUDA stream that brings max_int_async's results to the host
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        if self.active:
            self._connect("nccl" if self.device.type == "cuda" else "gloo", rendezvous_timeout)

    def _connect(self, backend, timeout_s):
        """Join the process group and run one barrier (NCCL connects at the first collective),
        within timeout_s: a rank that cannot reach the others (an interface that does not route
        between nodes, a firewall) would otherwise wait for torch's 30-minute default."""
        connected = threading.Event()

        def give_up():
            if not connected.wait(timeout_s):
                print(rendezvous_hint(self.rank, backend, f"the ranks did not all connect within {timeout_s} s "
                                      "(--rendezvous-timeout)"), file=sys.stderr, flush=True)
                os._exit(EXIT_RENDEZVOUS)

        threading.Thread(target=give_up, name="rendezvous-timeout", daemon=True).start()
        try:
            # NCCL: the rank's GPU named, not guessed from the global rank (torch warns on every start that a
            # guess can hang where ranks and GPUs do not map one to one)
            bound = {"device_id": self.device} if backend == "nccl" and takes_device_id() else {}
            torch_dist.init_process_group(backend=backend, init_method="env://", **bound)
            torch_dist.barrier()
        except Exception as e:  # any failure to connect gets the same hint
            print(rendezvous_hint(self.rank, backend, f"{type(e).__name__}: {e}"), file=sys.stderr, flush=True)
            raise
        finally:
            connected.set()

    @property
    def is_main(self):
        return self.rank == 0

    def max_int_async(self, value):
        """Start the all-reduce (MAX) of an int over the ranks; returns a PendingInt whose wait()
        gives the result. Nothing here waits, and on CUDA neither does wait() for the training
        work queued meanwhile: the result comes to pinned host memory on a stream of its own,
        where a .item() would wait for the GPU to finish everything queued before it."""
        if not self.active:
            return PendingInt(value)
        # a fill on the device: torch.tensor([value], device=...) is a host copy, which syncs
        t = torch.full((1,), value, dtype=torch.int64, device=self.device)
        work = torch_dist.all_reduce(t, op=torch_dist.ReduceOp.MAX, async_op=True)
        if self.device.type != "cuda":
            return PendingInt(t, work.wait)
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.device)
        host = torch.empty(1, dtype=torch.int64, pin_memory=True)
        with torch.cuda.stream(self._copy_stream):
            work.wait()  # this stream waits for the all-reduce; the host and the training stream do not
            t.record_stream(self._copy_stream)
            host.copy_(t, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record()
        return PendingInt(host, copied.synchronize)

    def mean(self, tensor):
        """Mean over ranks of a scalar tensor, as a float."""
        t = tensor.detach().float().reshape(1)
        if self.active:
            torch_dist.all_reduce(t, op=torch_dist.ReduceOp.SUM)
            t /= self.world_size
        return t.item()

    def gather_floats(self, values):
        """Every rank's values (floats, as many on every rank) in rank order, as lists: one
        all-gather of a tensor of fixed size, on the backend's device, with nothing pickled."""
        if not self.active:
            return [list(values)]
        mine = torch.tensor(values, dtype=torch.float64, device=self.device)
        every = torch.empty(self.world_size * len(values), dtype=torch.float64, device=self.device)
        ALL_GATHER_SINGLE(every, mine)  # (gloo takes only the flat output)
        return every.view(self.world_size, len(values)).tolist()

    def gather(self, obj):
        """Every rank's obj, pickled: for what is gathered once or rarely (names, random states)."""
        if not self.active:
            return [obj]
        objects = [None] * self.world_size
        torch_dist.all_gather_object(objects, obj)
        return objects

    def broadcast(self, obj):
        if not self.active:
            return obj
        holder = [obj]
        torch_dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def barrier(self):
        if self.active:
            torch_dist.barrier()

    def close(self, wait_for_all=False):
        """Tear the process group down. With wait_for_all (every rank got here), a rank then
        waits on the launcher's store until every rank has torn its group down: a rank that
        exits early closes its sockets under peers still inside their teardown."""
        if not (self.active and torch_dist.is_initialized()):
            return
        store = torch_dist.distributed_c10d._get_default_store() if wait_for_all else None
        torch_dist.destroy_process_group()
        if store is None:
            return
        try:
            closed = store.add(CLOSED_KEY, 1)
            deadline = time.monotonic() + CLOSE_WAIT_S
            while closed < self.world_size and time.monotonic() < deadline:
                time.sleep(0.05)
                closed = store.add(CLOSED_KEY, 0)
        except (RuntimeError, OSError):  # the store is gone: nobody is left to wait for
            pass


class PendingInt:
    """An int on its way: a value, or a one-element tensor that holds it once ready() returns."""

    def __init__(self, value, ready=None):
        self._value, self._ready = value, ready

    def wait(self):
        if self._ready is not None:
            self._ready()
            self._ready = None
        return self._value if isinstance(self._value, int) else int(self._value[0])


def rendezvous_hint(rank, backend, what):
    """Why a rank could not reach the others, with the settings that decide the route."""
    names = ["MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME"] + (["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]
                                                                    if backend == "nccl" else [])
    settings = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in names)
    return (f"train: error: rendezvous failed on rank {rank} ({socket.gethostname()}, backend {backend}): {what}. "
            f"{settings}. Check that the interface in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (nccl_env_socket_ifname, "
            "nccl_env_gloo_socket_ifname) exists on every node and reaches the other nodes (not lo), and that no "
            "firewall blocks the ports between them.")


class StopRequest:
    """Records a stop signal; the training loop acts on it after a step (StopVote says which)."""

    def __init__(self, signals):
        self.signum = 0
        self.signals = signals
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.signum = self.signum or signum

    def ignore_from_now(self):
        """Ignore these signals while the process exits: the launcher sends SIGTERM to the ranks
        still running when the first one exits, and during interpreter shutdown Python resets
        caught signals (not ignored ones) to their default action, which would kill a rank
        that has finished its work."""
        for sig in self.signals:
            signal.signal(sig, signal.SIG_IGN)


class StopVote:
    """Whether the ranks stop after a step, agreed on without holding every step up.

    After each step every rank starts an all-reduce (MAX) of its stop flag, then waits for the
    one it started after the step before: every rank acts on the same vote after the same
    step, one step after the flag was raised, and the all-reduce runs during a step instead of
    between two. A single process needs no vote: it stops after the step the flag was raised in.
    """

    def __init__(self, dist):
        self.dist, self.pending = dist, None

    def after_step(self, signum):
        """The signal to stop on now, 0 for none; the same on every rank."""
        if not self.dist.active:
            return signum
        previous, self.pending = self.pending, self.dist.max_int_async(signum)
        return previous.wait() if previous else 0

    def settle(self):
        """Wait for the vote still in flight (the run ends here: it leaves no collective
        behind); returns its signal, 0 for none."""
        pending, self.pending = self.pending, None
        return pending.wait() if pending else 0


def shard_model(model, bf16):
    """FSDP2 in place: each block its own unit (its parameters gathered for its forward and
    backward only), then the root (embeddings, final norm, the tied head). Parameters stay
    float32; with bf16 they are gathered and computed in bfloat16, gradients reduced in float32."""
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else \
        MixedPrecisionPolicy()
    for block in model.transformer.h:
        fully_shard(block, mp_policy=mp_policy)
    fully_shard(model, mp_policy=mp_policy)
    return model


def launched_exit_status(status, environ=None):
    """The exit status of a rank started by torch.distributed.run. Under --max-restarts (the job's
    pretrain_restarts_in_job) the launcher restarts every rank after one that exits non-zero, so a
    rank that stopped with a checkpoint on the notice exits 0 there: the PREEMPTED marker, not the
    status, tells the job script that the training stopped (to requeue itself, or to end on a stop
    request)."""
    environ = os.environ if environ is None else environ
    if status == EXIT_PREEMPTED and int(environ.get("TORCHELASTIC_MAX_RESTARTS") or 0) > 0:
        return 0
    return status


def exit_now(status):
    """End a launched rank without the interpreter's teardown: the run's files are written and
    closed, the process group is gone, and what is left to tear down (torch's threads and
    native objects) can only fail a finished run (std::terminate at exit, seen with gloo)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
