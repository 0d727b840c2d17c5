"""A training script of your own whose records and log lines hold terminal escape sequences: OSC 52
(writes the clipboard), CSI 2J (clears the screen), OSC 8 (a link that lies about where it leads), a
bidirectional override and an 8-bit CSI, in every field of its metrics records, in the names of the
nodes of its step times, in its log lines and in the exception it ends with. What the play prints of
it must be text."""

import json
import os
import time

RANK = int(os.environ.get("RANK", "0"))
EVIL = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\\u202eexe.\x9b2J"
STEPS = 12


def record(step):
    """A loss record whose step times name a node with escapes, slower than the others (a straggler)."""
    nodes = {"node" + EVIL: {"work_ms": 500.0, "wait_ms": 1.0}, "n2": {"work_ms": 100.0, "wait_ms": 400.0},
             "n3": {"work_ms": 100.0, "wait_ms": 400.0}}
    return {"step": step, "total_steps": STEPS, "loss": 4.0 - step / 10, "tokens_per_s": 1000.0, "eta_s": STEPS - step,
            "nodes": nodes}


if RANK == 0:
    with open(os.environ["LLMTRAIN_METRICS_FILE"], "a") as out:
        for step in range(1, STEPS + 1):
            out.write(json.dumps(record(step)) + "\n")
            # a record with escapes in every field the watch reads
            fields = ("step", "total_steps", "loss", "val_loss", "lr", "tokens_per_s", "elapsed_s", "eta_s", "event")
            out.write(json.dumps({key: "7" + EVIL for key in fields}) + "\n")
            out.flush()
            print("\x1b[32mstep %d\x1b[0m %s" % (step, EVIL), flush=True)
            time.sleep(1)
    raise RuntimeError("the data ran out " + EVIL)
time.sleep(30)  # the other ranks wait until torch.distributed.run ends them
