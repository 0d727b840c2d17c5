"""The step-time clock: how long a run has trained, and each rank's work against its wait.

Owns the run's time (elapsed over all its starts, carried in checkpoints; the training time of
each interval between loss records, less evaluations and checkpoints, which are pauses; the
estimate of the time left) and the wait clock, which splits a rank's training time under ddp
into its own work and its wait for the other ranks in the gradient all-reduce.
"""

import time
from contextlib import contextmanager

import torch


class RunClock:
    """The run's time from the end of its set-up: elapsed_s() adds the earlier starts' time
    (prior_elapsed, from the checkpoint), lap() measures the interval since the last one."""

    def __init__(self, start_step, prior_elapsed=0.0):
        self.started = time.perf_counter()
        self.start_step, self.prior_elapsed = start_step, prior_elapsed
        self.last_time, self.last_step = self.started, start_step
        self.pause_s = 0.0  # time since the last lap spent evaluating and checkpointing, not training

    def elapsed_s(self, now=None):
        return self.prior_elapsed + (time.perf_counter() if now is None else now) - self.started

    @contextmanager
    def pause(self):
        """What runs inside is not training time (evaluations, checkpoints)."""
        started = time.perf_counter()
        yield
        self.pause_s += time.perf_counter() - started

    def lap(self, step):
        """(now, steps, trained_s) at `step`: the steps since the last lap and the seconds spent
        training them; the next interval starts now."""
        now = time.perf_counter()
        interval = (now, step - self.last_step, now - self.last_time - self.pause_s)
        self.last_time, self.last_step, self.pause_s = now, step, 0.0
        return interval

    def eta_s(self, now, step, total_steps):
        """Seconds to total_steps at this start's mean pace."""
        return (now - self.started) / (step - self.start_step) * (total_steps - step)


class WaitClock:
    """How long this rank waits for the others in each step's gradient all-reduce: from the moment
    its last gradient is computed (a hook on every parameter, armed for the step's last backward,
    where DDP reduces; the last call wins) to the moment that backward returns with the reduced
    gradients. The rest of a rank's time is its own work: a slow node's ranks work longer and wait
    less, and the others wait for them. On CUDA the two moments are events on the stream, read at
    the log interval (when the loss record syncs anyway)."""

    def __init__(self, params, device):
        self.cuda = device.type == "cuda"
        self.armed, self.fired, self.ready, self.spans, self.wait_s = False, False, None, [], 0.0
        for p in params:
            if p.requires_grad:
                p.register_hook(self._gradient_computed)

    def _gradient_computed(self, _grad):
        if self.armed:
            self.fired = True
            if self.cuda:
                self.ready.record()
            else:
                self.ready = time.perf_counter()

    def arm(self):
        """Called before the backward that reduces the gradients."""
        self.armed, self.fired = True, False
        if self.cuda:
            self.ready = torch.cuda.Event(enable_timing=True)

    def reduced(self):
        """Called when that backward has returned."""
        self.armed = False
        if not self.fired:  # no hook ran (parameters the backward does not reach as leaves): nothing measured
            pass
        elif self.cuda:
            done = torch.cuda.Event(enable_timing=True)
            done.record()
            self.spans.append((self.ready, done))
        else:
            self.wait_s += time.perf_counter() - self.ready
        self.ready = None

    def take(self):
        """Seconds waited since the last take()."""
        if self.spans:
            self.spans[-1][1].synchronize()
            self.wait_s += sum(ready.elapsed_time(done) for ready, done in self.spans) / 1000.0
            self.spans = []
        waited, self.wait_s = self.wait_s, 0.0
        return waited
