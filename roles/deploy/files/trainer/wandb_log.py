"""Weights & Biases logging of the metrics records, from rank 0, when --wandb-project is set.

One W&B run per run directory: its id is kept in RUN/wandb/run_id (made at the first start,
or beforehand by the pipeline), and every start of the run, after a preemption or a rerun,
resumes it (``resume="allow"``). Offline (--wandb-mode offline, for nodes that cannot reach
W&B) the records go to RUN/wandb/offline-run-*/, one directory per start; ``wandb sync`` of
all of them uploads one run. W&B keeps the first value logged at a step: the steps a resumed
run repeats after its checkpoint keep the values of the earlier start (on CPU they are the
same; on CUDA they differ in the last digits).
"""

import re
import secrets
import sys
from pathlib import Path

from .config import ConfigError

WANDB_DIR = "wandb"
RUN_ID_FILE = "run_id"


def run_id(out_dir):
    """The W&B id of the run in out_dir: the one in RUN/wandb/run_id, else a new one saved there
    (the run's directory name, for people to recognise, and 8 random hex digits)."""
    path = Path(out_dir) / WANDB_DIR / RUN_ID_FILE
    try:
        saved = path.read_text().strip()
    except FileNotFoundError:
        saved = ""
    if saved:
        return saved
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(out_dir).resolve().name)[:48] or "run"
    new = f"{name}-{secrets.token_hex(4)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "x") as f:  # another start that got here first wins
            f.write(new + "\n")
    except FileExistsError:
        return path.read_text().strip()
    return new


class WandbLog:
    """The scalars of the metrics records to a W&B run (same interface as EventWriter)."""

    def __init__(self, cfg, out_dir, config):
        try:
            import wandb  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise ConfigError("--wandb-project needs the Python package 'wandb' in the interpreter that runs the "
                              "trainer (pip install wandb; the venv of deploy_venv_create gets it when "
                              "run_wandb_project is set)") from None
        out_dir = Path(out_dir)
        try:
            self.run = wandb.init(project=cfg.wandb_project, entity=cfg.wandb_entity or None, mode=cfg.wandb_mode,
                                  dir=str(out_dir), id=run_id(out_dir), name=out_dir.resolve().name, resume="allow",
                                  config=config, settings=wandb.Settings(console="off"))
        except Exception as e:  # wandb's errors vary by version; any of them means no logging
            raise ConfigError(f"W&B did not start ({type(e).__name__}: {e}). Online, the nodes must reach the W&B "
                              "server with an API key (WANDB_API_KEY; in the pipeline through slurm_secret_env); "
                              "--wandb-mode offline writes the run to RUN/wandb for a later 'wandb sync'") from None

    def scalars(self, step, values):
        """values: {tag: number}; None values are left out."""
        values = {tag: float(value) for tag, value in values.items() if value is not None}
        if values and self.run is not None:
            try:
                self.run.log(values, step=step)
            except Exception as e:  # pylint: disable=broad-exception-caught
                self._lost(e, step)

    def close(self, status=0, preempted=False):
        """Finish the W&B run: preempted (W&B shows it as such and the next start resumes it),
        done, or failed with the exit status."""
        if self.run is None:
            return
        try:
            if preempted:
                self.run.mark_preempting()
            self.run.finish(exit_code=0 if preempted else status)
        except Exception as e:  # pylint: disable=broad-exception-caught
            self._lost(e, "the end")

    def _lost(self, error, step):
        """W&B's own process is gone (a SIGTERM to the job's processes ends it too, as at a
        preemption): training goes on, and so does the rest of what a stop does, without it."""
        self.run = None
        print(f"train: warning: W&B stopped taking records at step {step} ({type(error).__name__}: {error}); the run "
              "goes on without it (metrics.jsonl and TensorBoard have every record; the next start resumes the W&B run)",
              file=sys.stderr, flush=True)
