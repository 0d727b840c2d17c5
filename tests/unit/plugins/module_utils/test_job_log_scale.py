"""job_log on the logs of many ranks (bench/scale_inputs.py writes them, as torch and Slurm print them)."""

import sys
from pathlib import Path

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import job_log

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))
import scale_inputs  # noqa: E402  pylint: disable=wrong-import-position


def test_the_rank_that_failed_first_among_2000_ranks_and_its_node(tmp_path):
    path = str(tmp_path / "llmtrain-run-4242.out")
    scale_inputs.failure_log(path, 2000, 1234)
    summary = job_log.log_summary(path, tail=2)
    assert summary["failed_rank"] == "1234"
    assert summary["node"] == "node0154.cluster"  # 1234 // 8, as torch.distributed.run's summary names it
    assert summary["lost_peer"] is False
    assert summary["traceback"][0] == "Traceback (most recent call last):"
    assert summary["traceback"][-1].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    # every other rank lost its peer, or (after the first 31) NCCL's watchdog aborted it, which leaves no
    # traceback; and one launcher a node
    assert summary["tracebacks"]["cause"] == 1
    watchdog = len([r for r in range(31, 2000) if r != 1234 and r % 5 == 4])
    assert summary["tracebacks"]["lost_peer"] == 1999 - watchdog + 250
    assert summary["tail"][-1] == "llmtrain: job 4242 ends with exit code 1 at 2026-12-03T10:21:15.000000000Z"


def test_a_log_over_16_mib_names_the_first_failure_of_its_last_start(tmp_path):
    path = str(tmp_path / "llmtrain-run-4242.out")
    size = scale_inputs.failure_log(path, 2000, 3, earlier_first_rank=1500, info_bytes=17 * 1024 * 1024)
    assert size > 17 * 1024 * 1024
    summary = job_log.log_summary(path)
    assert summary["start"] == "llmtrain: job 4242 start 2 on node[0000-0249], master node0000:24242"
    assert summary["failed_rank"] == "3" and summary["node"] == "node0000.cluster"
    assert summary["traceback"][-1].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert summary["tracebacks"]["cause"] == 1  # the earlier start's rank 1500 is not counted
