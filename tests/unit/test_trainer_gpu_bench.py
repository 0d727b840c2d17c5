"""bench/trainer_gpu.py on this machine's CPU with --smoke: the script itself, a sweep of variants
over one data set, and its JSON (what a GPU session's --record keeps)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "trainer_gpu.py")


def bench(*argv):
    return subprocess.run([sys.executable, SCRIPT, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600, check=False)


def test_a_sweep_runs_each_kernel_asked_for_and_returns_a_list_of_results():
    proc = bench("--smoke", "--steps", "12", "--skip-steps", "5", "--batch-size", "4", "--attention", "auto,math",
                 "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    assert [(r["batch_size_per_gpu"], r["attention"]) for r in results] == [(4, "auto"), (4, "math")]
    for r in results:
        assert r["device"] == "cpu" and r["tokens_per_s"] > 0 and r["mfu"] is None and r["mfu_note"] == "n/a (no GPU)"


def test_one_run_prints_one_object_and_a_bad_kernel_is_refused_before_any_run():
    proc = bench("--smoke", "--steps", "12", "--skip-steps", "5", "--batch-size", "8", "--format", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["attention"] == "auto" and result["batch_size_per_gpu"] == 8
    refused = bench("--smoke", "--attention", "auto,fast")
    assert refused.returncode == 2 and "'auto,fast': a comma-separated list of auto, flash, efficient, math, cudnn" \
        in refused.stderr, refused.stderr
