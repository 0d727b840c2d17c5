"""bench/scale_bench.py: its arithmetic, its verdict, and one quick run of every stage on the real code."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import scale_bench  # noqa: E402  pylint: disable=wrong-import-position


def test_the_growth_exponent_is_the_slope_of_log_time_over_log_nodes():
    last, fit = scale_bench.exponent([(8, 1.0), (64, 8.0), (512, 64.0), (2048, 1024.0)])
    assert last == pytest.approx(2.0) and 1.0 < fit < 2.0
    assert scale_bench.exponent([(8, 1.0)]) == (None, None)


def stage(rows, time="wall_s"):
    return dict(title="t", rows=rows, time=time, columns=[])


def test_the_fastest_growing_stage_is_named_with_its_exponent():
    def grows(title, power):
        return dict(title=title, time="cpu_ms", columns=[], series=None,
                    rows=[{"nodes": n, "cpu_ms": float(n) ** power} for n in (8, 64, 512)])
    stages = {"parse": grows("parsing", 1.2), "poll": grows("a poll", 0.9),
              "nccl_env": dict(title="env", rows=[], time=None, columns=[], error="not measured: failed")}
    title, last = scale_bench.fastest_growing(stages)
    assert title == "parsing" and last == pytest.approx(1.2)
    assert scale_bench.fastest_growing({"nccl_env": stages["nccl_env"]}) is None


def test_the_verdict_says_met_missed_and_not_measured_at_2048_nodes():
    at = scale_bench.TARGET
    stages = {
        "record": stage([{"nodes": at, "record_bytes": 1023}]),
        "poll": stage([{"nodes": at, "history": 604800, "cpu_ms": 80.0, "result_bytes": 9000}]),
        "nccl_env": stage([{"nodes": at, "error": "not measured: ansible-playbook failed"}]),
        "report": stage([{"nodes": at, "history": 604800, "wall_s": 12.0}]),
        "resume": stage([{"nodes": at, "history": 604800, "wall_s": 0.4}]),
        "coverage": stage([{"nodes": at, "history": 604800, "seen": "yes"}]),
        "diagnosis": stage([{"nodes": at, "named": "no (7, not 9)"}]),
    }
    verdicts = scale_bench.verdicts(stages)

    def verdict(start):
        return [(value, ok) for target, value, ok in verdicts if target.startswith(start)][0]
    assert verdict("every loss record seen by the watch, metrics.jsonl of 7 days") == ("yes", True)
    assert verdict("a loss record <= 1 KB") == ("1023 bytes", True)
    assert verdict("one poll <= 50 ms of module CPU") == ("80.0 ms", False)
    assert verdict("one poll's result <= 16 KB") == ("9000 bytes", True)
    assert verdict("the nccl_env stage <= 10 s") == ("not measured: ansible-playbook failed", None)
    assert verdict("failure diagnosis names the first failing rank among 16,384") == ("no (7, not 9)", False)


def test_a_quick_run_measures_every_stage_on_the_real_code(capsys):
    assert scale_bench.main(["--sizes", "8", "--days", "0.05", "--skip-nccl-env", "--format", "markdown"]) == 0
    report = capsys.readouterr().out
    stages = report.split("### ", 1)[1]
    assert "not measured" not in stages.replace("not measured: --skip-nccl-env", ""), stages
    assert "| 8 | 64 | 0.1 |" in report and "| yes |" in report  # the failing rank of 64 named
