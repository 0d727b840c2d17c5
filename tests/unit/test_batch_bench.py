"""bench/batch_bench.py's report (the measurement itself runs in make bench)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import batch_bench  # noqa: E402  pylint: disable=wrong-import-position


RESULT = {"model": batch_bench.MODEL, "parameters": 124_475_904, "export_bytes": 497_000_000, "prompt_bytes": 56,
          "tokens_per_prompt": 16, "cores": 2,
          "runs": [{"ranks": 1, "threads_per_rank": 2, "prompts": 4, "tokens": 64, "tokens_per_second": 10.5,
                    "per_rank": [10.5], "start_seconds": [3.2]},
                   {"ranks": 2, "threads_per_rank": 1, "prompts": 4, "tokens": 64, "tokens_per_second": 12.3,
                    "per_rank": [6.1, 6.24], "start_seconds": [4.0, 4.1]}]}


def test_the_markdown_section_names_the_shape_and_a_row_per_run_with_each_rank():
    text = batch_bench.render(RESULT, "markdown")
    assert text.startswith("GPT-2 124M shape (124.5M parameters, a 497 MB export), CPU, float32;")
    assert "| 1 | 2 | 4 | 64 | 10.5 | 10.5 | 3.2 |" in text
    assert "| 2 | 1 | 4 | 64 | 6.1 / 6.2 | 12.3 | 4.0 / 4.1 |" in text
    assert "every token over the busiest rank's seconds" in text


def test_the_text_form_has_a_header_and_the_rows():
    lines = batch_bench.render(RESULT, "text").splitlines()
    assert lines[1].startswith("ranks  threads a rank  prompts") and len(lines) == 4
