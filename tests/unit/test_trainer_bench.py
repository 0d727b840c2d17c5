"""bench/trainer_bench.py's report and its refusals (the measurement itself runs in make bench)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import trainer_bench  # noqa: E402  pylint: disable=wrong-import-position


def spread(*values):
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1], "n": len(values)}


def result(ratios):
    parts = dict.fromkeys(trainer_bench.PARTS + ("rest",), 1.0)
    loop = {"step_ms": spread(100.0, 110.0, 120.0), "parts_ms": parts, "page_faults": spread(0.0, 5.0, 9.0),
            "kernel_ms": spread(1.0, 1.5, 2.0)}
    return {"model": trainer_bench.MODEL, "batch_size": 16, "steps": 80, "timed_steps": 70, "threads": 2,
            "pairs": len(ratios), "profiles": 3, "min_ratio": 1.0, "removed": ["the one thing found"],
            "tokens_per_s": {key: spread(1.0, 2.0, 3.0) for key in ("trainer", "public", "trainer_no_bias")},
            "peak_rss_mib": {"trainer": 500.0, "public": 510.0, "trainer_no_bias": 490.0},
            "ratio": spread(*ratios), "profile": {key: loop for key in trainer_bench.PROFILED}}


def test_the_report_says_whether_the_target_is_met_with_the_median_and_its_range():
    met = trainer_bench.render(result([0.95, 1.05, 1.10, 1.20, 1.30]), "markdown")
    assert "per pair: 1.100 (min 0.950, max 1.300, n=5) (target >= 1.0: met)" in met
    missed = trainer_bench.render(result([0.90, 0.95, 0.97, 1.02, 1.10]), "markdown")
    assert "(target >= 1.0: missed by 3.0%)" in missed


def test_the_report_has_a_row_per_part_of_the_step_for_each_loop_and_says_what_was_found():
    report = trainer_bench.render(result([1.0] * 6), "markdown")
    header = "| per step | trainer.train | trainer.train, glibc's thresholds | public-style loop |"
    assert header in report
    for part in trainer_bench.PARTS + ("rest",):
        assert f"| {part} (ms) | 1.00 | 1.00 | 1.00 |" in report
    assert "| page faults | 5 (min 0, max 9, n=3) |" in report
    assert report.endswith("Found and changed:\n\n- the one thing found")
    assert "per step" in trainer_bench.render(result([1.0] * 6), "text")


@pytest.mark.parametrize("argv, message", [(["--pairs", "4"], "--pairs must be at least 5"),
                                           (["--steps", "85"], "--steps must be a multiple of --warmup-steps")])
def test_too_few_pairs_or_steps_the_trainer_does_not_log_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        trainer_bench.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
