"""Inputs in the real formats at the sizes the design is for, for benchmarks and tests.

    failure_log(path, ranks, first_rank)  a job log in which one rank fails first and all others follow

Importable from bench/ (sys.path) by benchmarks and unit tests; writes files, never reads the cluster.
"""

PROCS_PER_NODE = 8
JOB_ID = 4242
TRAIN = "/shared/work/run/scripts/trainer/train.py"
TORCH = "/shared/venv/lib/python3.11/site-packages/torch"
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU %d has a total capacity of "
       "79.10 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. "
       "Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but "
       "unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
       "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def node_name(index):
    return "node%04d" % index


def _rank_lines(rank, lines):
    """As torch.distributed's excepthook prints a rank's uncaught exception: "[rankN]: " before each line."""
    return ["[rank%d]: %s" % (rank, line) if line else "" for line in lines]


def _frames(call):
    return ["Traceback (most recent call last):",
            '  File "%s", line 503, in main' % TRAIN,
            "    status = train(cfg, args.data, args.out, meta, dist, stop)",
            "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            '  File "%s", line 321, in train' % TRAIN] + call


def oom_traceback(rank):
    """The rank that fails first: CUDA runs out of memory in its forward pass."""
    return _rank_lines(rank, _frames([
        "    logits, loss = model(x, y)",
        "                   ^^^^^^^^^^^",
        '  File "%s/nn/modules/module.py", line 1775, in _wrapped_call_impl' % TORCH,
        "    return self._call_impl(*args, **kwargs)",
        OOM % (rank % PROCS_PER_NODE)]))


def lost_peer_traceback(rank, first_rank):
    """A rank whose collective finds its peer gone: NCCL's remote error, as DistBackendError."""
    return _rank_lines(rank, _frames([
        "    loss.backward()",
        '  File "%s/_tensor.py", line 648, in backward' % TORCH,
        "    torch.autograd.backward(",
        '  File "%s/autograd/__init__.py", line 354, in backward' % TORCH,
        "    _engine_run_backward(",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "remote process exited or there was a network error, NCCL version 2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "Last error:",
        "socketProgress: Connection closed by remote peer %s<%d>"
        % (node_name(first_rank // PROCS_PER_NODE), 40000 + first_rank)]))


def watchdog_lines(rank):
    """A rank stuck in a collective: ProcessGroupNCCL's watchdog aborts it (C++, no Python traceback)."""
    what = ("[Rank %d] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2751, OpType=ALLREDUCE, "
            "NumelIn=124634112, NumelOut=124634112, Timeout(ms)=600000) ran for 600095 milliseconds before timing out."
            % rank)
    return ["[rank%d]:[E1203 10:21:12.%06d000 %d ProcessGroupNCCL.cpp:632] %s" % (rank, rank, 4000 + rank, what),
            "[rank%d]:[E1203 10:21:12.%06d000 %d ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank %d] "
            "failure detected by watchdog at work sequence id: 2751 PG status: last enqueued work: 2751, last "
            "completed work: 2750" % (rank, rank, 4000 + rank, rank),
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank %d] Process group watchdog thread terminated with "
            "exception: %s" % (rank, what)]


def launcher_failure(node, first_rank, oom_node):
    """torch.distributed.run on one node: its workers' exits, then ChildFailedError and its summary."""
    base = node * PROCS_PER_NODE
    root = first_rank if node == oom_node else base
    failed = [r for r in range(base, base + PROCS_PER_NODE) if r != root]
    host = node_name(node) + ".cluster"

    def failure(index, rank):
        return ["[%d]:" % index,
                "  time      : 2026-12-03_10:21:1%d" % (2 if rank == root else 3),
                "  host      : %s" % host,
                "  rank      : %d (local_rank: %d)" % (rank, rank - base),
                "  exitcode  : 1 (pid: %d)" % (5000 + rank),
                "  error_file: <N/A>",
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    lines = ["E1203 10:21:12.500000 %d torch/distributed/elastic/multiprocessing/api.py:1003] failed (exitcode: 1) "
             "local_rank: %d (pid: %d) of binary: /shared/venv/bin/python" % (3000 + node, root - base, 5000 + root),
             "Traceback (most recent call last):",
             '  File "<frozen runpy>", line 198, in _run_module_as_main',
             '  File "<frozen runpy>", line 88, in _run_code',
             '  File "%s/distributed/run.py", line 1033, in <module>' % TORCH,
             "    main()",
             '  File "%s/distributed/launcher/api.py", line 383, in launch_agent' % TORCH,
             "    raise ChildFailedError(",
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
             "=" * 60, "trainer.train FAILED", "-" * 60, "Failures:"]
    for index, rank in enumerate(failed, 1):
        lines += failure(index, rank)
    return lines + ["-" * 60, "Root Cause (first observed failure):"] + failure(0, root) + ["=" * 60]


def start_lines(start, nodes):
    """What the job script prints at each start before training (the line each start begins with)."""
    nodelist = "%s-%04d]" % (node_name(0)[:-4] + "[0000", nodes - 1) if nodes > 1 else node_name(0)
    return ["llmtrain: job %d start %d on %s, master %s:%d" % (JOB_ID, start, nodelist, node_name(0), 24242),
            "llmtrain: node check of job %d on %s (%d node(s), 120 s at most)" % (JOB_ID, nodelist, nodes)]


def nccl_info(rank, count):
    """NCCL_DEBUG=INFO lines of a rank (what makes real logs gigabytes)."""
    node = node_name(rank // PROCS_PER_NODE)
    return ["%s:%d:%d [%d] NCCL INFO Channel %02d/32 : %d[%d] -> %d[%d] via P2P/CUMEM/read"
            % (node, 5000 + rank, 6000 + i, rank % PROCS_PER_NODE, i % 32, rank, rank % 8, rank + 1, (rank + 1) % 8)
            for i in range(count)]


def _start(handle, start, ranks, first_rank, info_bytes):
    """One start of the job: a few steps, first_rank's traceback after the first lost peers' (1 in 64),
    info_bytes of NCCL INFO lines, every other rank's lost peer (or watchdog abort), each node's
    launcher summary, and srun's end."""
    nodes = (ranks + PROCS_PER_NODE - 1) // PROCS_PER_NODE

    def write(lines):
        handle.write("".join(line + "\n" for line in lines))
    write(start_lines(start, nodes))
    write(["step %d/100000 loss %.4f lr 3.00e-04 1,234,567 tok/s eta 6d 23h" % (s, 9.0 - s / 1000.0)
           for s in range(1, 41)])
    others = [r for r in range(ranks) if r != first_rank]
    early = others[:max(1, len(others) // 64)]  # peers whose error reached the log before the cause's
    for rank in early:
        write(lost_peer_traceback(rank, first_rank))
    write(oom_traceback(first_rank))
    written = 0
    while written < info_bytes:
        lines = nccl_info(written // 100 % ranks, 64)
        write(lines)
        written += sum(len(line) + 1 for line in lines)
    for rank in others[len(early):]:
        write(watchdog_lines(rank) if rank % 5 == 4 else lost_peer_traceback(rank, first_rank))
    oom_node = first_rank // PROCS_PER_NODE
    for node in [oom_node] + [n for n in range(nodes) if n != oom_node]:
        write(launcher_failure(node, first_rank, oom_node))
    write(["srun: error: %s: task %d: Exited with exit code 1" % (node_name(oom_node), oom_node),
           "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
           "slurmstepd: error: *** STEP %d.2 ON %s CANCELLED AT 2026-12-03T10:21:14 ***" % (JOB_ID, node_name(0))])
    write(["srun: error: %s: task %d: Killed" % (node_name(n), n) for n in range(nodes) if n != oom_node])
    write(["llmtrain: job %d ends with exit code 1 at 2026-12-03T10:21:15.000000000Z" % JOB_ID])


def failure_log(path, ranks, first_rank, earlier_first_rank=None, info_bytes=0):
    """Writes the output file of a job of `ranks` ranks (8 per node) whose last start failed:
    first_rank ran out of GPU memory, every other rank then lost its peer. With
    earlier_first_rank, an earlier start (the file is appended to at each start) failed the same
    way at that rank. info_bytes of NCCL INFO lines follow the first failure of the last start.
    Returns the file's size in bytes."""
    with open(path, "w") as handle:
        if earlier_first_rank is not None:
            _start(handle, 1, ranks, earlier_first_rank, 0)
        _start(handle, 1 if earlier_first_rank is None else 2, ranks, first_rank, info_bytes)
        return handle.tell()
