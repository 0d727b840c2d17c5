"""Host memory on CPU: keep the step's freed buffers for the next step.

A CPU training step allocates and frees the same activation, gradient and optimizer buffers
every step, megabytes each. glibc's malloc gives large freed blocks back to the kernel (blocks
above its mmap threshold, and free memory above its trim threshold at the top of the heap), so
the next step faults the same memory in again, zero-filled by the kernel: measured at 200 to
4,000 page faults a step, varying from run to run, and up to 12 ms of kernel time in a step of
about 100 ms (bench/trainer_bench.py). Raising both
thresholds keeps those blocks in the heap, as the CUDA caching allocator keeps device memory:
the resident size stays at the step's peak instead of rising and falling with it.

Only the trainer's own process, only where the model trains on the CPU with ddp (fsdp frees a
block's gathered weights so that its resident size stays low), and never over what the
environment already sets (MALLOC_*_ variables or glibc.malloc tunables win). Elsewhere than
glibc (musl, macOS) nothing is changed.
"""

import ctypes
import os

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks above it are
# still mapped and unmapped on their own
MMAP_THRESHOLD = 32 * 1024 * 1024
# free memory at the top of the heap beyond this goes back to the kernel
TRIM_THRESHOLD = 1024 * 1024 * 1024
ENV_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_freed_memory(environ=None, libc=None):
    """Raise glibc's mmap and trim thresholds for this process; returns what was done:
    "kept" (both set), "environment" (the environment sets the allocator: left alone) or
    "unavailable" (no glibc mallopt, or it refused)."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in ENV_SETTINGS) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "environment"
    try:
        libc = libc or ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "unavailable"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success, 0 on an error (musl's always returns 0)
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return "unavailable"
    return "kept"
