"""bench/event_files_bench.py: one quick run on small files, with the real reader."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import event_files_bench  # noqa: E402  pylint: disable=wrong-import-position


def test_a_quick_run_measures_every_column_and_a_later_poll_reads_only_what_was_appended():
    rows = event_files_bench.measure([0.25, 2], whole_max_mb=1)
    assert [r["size_mb"] for r in rows] == [0.25, 2]
    assert all(r["first_poll_ms"] > 0 and r["next_poll_ms"] > 0 for r in rows)
    # 20 steps of five records each: about 6 KB, whatever the file's size
    assert all(4 < r["appended_kb"] < 8 for r in rows), rows
    assert rows[0]["whole_mb_s"] > 0 and rows[1]["whole_s"] is None


def test_the_markdown_section_has_its_table(capsys):
    assert event_files_bench.main(["--format", "markdown", "--sizes", "0.25,0.5", "--whole-max", "0.25"]) == 0
    out = capsys.readouterr().out
    assert "| file | first poll (its last MiB) |" in out and "|---|---|---|---|---|---|" in out and "| 0.5 MB |" in out
