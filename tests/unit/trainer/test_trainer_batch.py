"""trainer.batch on an export of the reference run: sharding, order, resume after a torn record,
caps and truncation, bad prompts, merge."""

import json
import os

import pytest
from trainer import batch, export, generate
from trainer_testing import TINY_MODEL, run_module

PROMPTS = [{"prompt": "def f%d(x):\n" % i, "id": "p%d" % i} for i in range(7)]
PROMPTS[2] = {"prompt": "", "temperature": 0, "max_new_tokens": 8}
PROMPTS[3] = {"prompt": "return", "seed": 5, "top_k": 3, "id": 3}
PROMPTS[4] = {"prompt": "def f(x):\n    return x\n" * 6, "max_new_tokens": 500}  # over the context, over the cap
CAP = 24
# what depends on who made a record and how fast, not on the prompt
WHO = ("rank", "world", "node", "seconds")


@pytest.fixture(scope="module")
def model_dir(reference_run, tmp_path_factory):
    out, _result = reference_run
    target = tmp_path_factory.mktemp("export")
    assert export.main(["--checkpoint", str(out), "--out", str(target)]) == 0
    return target / "step_000024"


def write_prompts(path, prompts):
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return path


def run_ranks(model_dir, prompts_file, out, world, *extra):
    for rank in range(world):
        assert batch.main(["--model", str(model_dir), "--prompts", str(prompts_file), "--out", str(out), "--max-new-tokens",
                           str(CAP), "--rank", str(rank), "--world", str(world), "--device", "cpu", *extra]) == 0


def merged(prompts_file, out):
    assert batch.main(["--merge", "--prompts", str(prompts_file), "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / batch.GENERATIONS).read_text(encoding="utf-8").splitlines()]
    return records, json.loads((out / batch.SUMMARY).read_text())


def content(records):
    return [{k: v for k, v in r.items() if k not in WHO} for r in records]


def part_lines(out):
    return {path.relative_to(out).as_posix(): path.read_bytes().split(b"\n")
            for path in sorted((out / batch.PARTS).glob("w*/rank-*.jsonl"))}


def test_three_ranks_make_the_records_one_rank_makes_in_the_prompts_order(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    run_ranks(model_dir, prompts_file, tmp_path / "one", 1)
    run_ranks(model_dir, prompts_file, tmp_path / "three", 3)
    one, one_summary = merged(prompts_file, tmp_path / "one")
    three, summary = merged(prompts_file, tmp_path / "three")
    assert content(three) == content(one)
    assert [r["index"] for r in three] == list(range(len(PROMPTS)))
    assert [r["prompt"] for r in three] == [p["prompt"] for p in PROMPTS]
    assert [r.get("id") for r in three] == [p.get("id") for p in PROMPTS]
    assert [(r["rank"], r["world"]) for r in three] == [(i % 3, 3) for i in range(len(PROMPTS))]
    # each rank wrote its own prompts, and only those
    assert sorted(part_lines(tmp_path / "three")) == ["parts/w3/rank-00000.jsonl", "parts/w3/rank-00001.jsonl",
                                                      "parts/w3/rank-00002.jsonl"]
    tokens = sum(r["tokens"] for r in three)
    assert summary["prompts"] == len(PROMPTS) and summary["tokens"] == tokens and summary["ranks"] == 3
    assert [(s["rank"], s["prompts"]) for s in summary["per_rank"]] == [(0, 3), (1, 2), (2, 2)]
    assert summary["tokens_per_second"] == pytest.approx(tokens / summary["busiest_rank_seconds"], rel=1e-3)
    assert one_summary["ranks"] == 1 and summary["duplicates"] == 0


def test_a_record_is_what_trainer_generate_writes_with_the_same_seed(model_dir, reference_run, tmp_path, capsys):
    out, _result = reference_run
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", [{"prompt": "def f1(x):\n", "seed": 11, "temperature": 0.9, "top_k": 7}])
    run_ranks(model_dir, prompts_file, tmp_path / "out", 1)
    (record,), _summary = merged(prompts_file, tmp_path / "out")
    capsys.readouterr()  # the merge's line
    generate.main(["--checkpoint", str(out), "--prompt", "def f1(x):\n", "--max-new-tokens", str(CAP), "--seed", "11",
                   "--temperature", "0.9", "--top-k", "7", "--json"])
    assert record["completion"] == json.loads(capsys.readouterr().out)[0]["completion"]
    assert record["tokens"] == CAP and record["finish"] == "length"


def test_caps_truncation_and_settings_are_in_the_records(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    run_ranks(model_dir, prompts_file, tmp_path / "out", 1, "--seed", "99")
    records, _summary = merged(prompts_file, tmp_path / "out")
    long = records[4]
    assert long["capped"] is True and long["max_new_tokens"] == CAP and long["tokens"] == CAP
    assert long["prompt_tokens"] == TINY_MODEL["block_size"]
    assert long["truncated"] == len(PROMPTS[4]["prompt"].encode()) - TINY_MODEL["block_size"]
    assert long["prompt"] == PROMPTS[4]["prompt"]  # the record keeps the whole prompt
    assert records[2]["tokens"] == 8 and records[2]["temperature"] == 0 and records[2]["prompt_tokens"] == 1
    assert records[3]["seed"] == 5 and records[3]["top_k"] == 3 and records[0]["seed"] == 99
    assert not any(r["capped"] or r["truncated"] for i, r in enumerate(records) if i != 4)
    assert all(len(r["completion"].encode("utf-8", "surrogatepass")) >= 1 for r in records)


def test_a_rank_killed_mid_record_resumes_with_only_the_missing_prompts(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    run_ranks(model_dir, prompts_file, tmp_path / "whole", 2)
    whole, _summary = merged(prompts_file, tmp_path / "whole")
    # rank 0 (prompts 0, 2, 4, 6) killed while it wrote its third record: two records and a torn line
    out = tmp_path / "killed"
    part = batch.part_path(out, 0, 2)
    part.parent.mkdir(parents=True)
    lines = batch.part_path(tmp_path / "whole", 0, 2).read_bytes().split(b"\n")
    part.write_bytes(lines[0] + b"\n" + lines[1] + b"\n" + lines[2][:40])
    rerun = run_module("batch", "--model", model_dir, "--prompts", prompts_file, "--out", out, "--max-new-tokens", CAP,
                       "--rank", 0, "--world", 2, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert "rank 0 of 2: 2 of 4 prompts to generate" in rerun.stderr
    again = part.read_bytes().split(b"\n")
    assert again[:2] == lines[:2] and again[-1] == b""  # the torn line was cut off, every record on its own line
    assert [json.loads(line)["index"] for line in again[:-1]] == [0, 2, 4, 6]
    run_ranks(model_dir, prompts_file, out, 2)  # rank 0 has nothing left; rank 1 makes its own
    records, summary = merged(prompts_file, out)
    assert content(records) == content(whole) and summary["duplicates"] == 0


def test_a_rerun_of_a_complete_batch_generates_nothing(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    out = tmp_path / "out"
    run_ranks(model_dir, prompts_file, out, 2)
    before = part_lines(out)
    rerun = run_module("batch", "--model", model_dir, "--prompts", prompts_file, "--out", out, "--rank", 1, "--world", 2,
                       timeout=60)
    assert rerun.returncode == 0 and "rank 1 of 2: 0 of 3 prompts to generate" in rerun.stderr
    assert part_lines(out) == before


def test_ranks_of_another_world_size_read_the_records_of_the_earlier_start(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    out = tmp_path / "out"
    run_ranks(model_dir, prompts_file, out, 2)
    os.remove(batch.part_path(out, 1, 2))  # rank 1 of that start made nothing that lasted
    run_ranks(model_dir, prompts_file, out, 3)
    records, summary = merged(prompts_file, out)
    assert summary["duplicates"] == 0
    # rank 0 of 2 made the even prompts; the three ranks of the next start made the odd ones
    assert [(r["world"], r["rank"]) for r in records] == [(2, 0) if i % 2 == 0 else (3, i % 3) for i in range(len(PROMPTS))]


def test_a_part_file_s_foreign_lines_are_no_records(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS[:2])
    out = tmp_path / "out"
    part = batch.part_path(out, 0, 1)
    part.parent.mkdir(parents=True)
    # not JSON, an index past the prompts, a second "index" that lies, no completion, nested past any
    # parser's recursion, numbers merge could not add up (an infinity, NaN, a string, beyond 64 bits)
    part.write_bytes(b'{"index": 0, garbage\n{"index": 7, "completion": "x"}\n{"index": 0, "completion": "x", "index": 1}\n'
                     b'{"index": 1, "prompt": "x"}\n{"index": 0, "completion": "x", "id": ' + b"[" * 200000 + b"]" * 200000 + b'}\n'
                     b'{"index": 0, "completion": "x", "tokens": 1e309}\n{"index": 1, "completion": "x", "seconds": NaN}\n'
                     b'{"index": 0, "completion": "x", "world": "1"}\n{"index": 1, "completion": "x", "tokens": 9223372036854775808}\n')
    assert batch.done_indices(out, 0, 1, 2) == set()
    run_ranks(model_dir, prompts_file, out, 1)
    records, _summary = merged(prompts_file, out)
    assert [r["index"] for r in records] == [0, 1] and all("completion" in r for r in records)


@pytest.mark.parametrize("line, message", [
    ("not json", "line 2 is not JSON"),
    ('{"text": "x"}', 'line 2 is not an object with a string "prompt"'),
    ('{"prompt": "x", "max_new_tokens": 0}', "line 2: max_new_tokens 0 is out of range"),
    ('{"prompt": "x", "top_k": 1.5}', "line 2: top_k 1.5 is not a whole number"),
    ('{"prompt": "x", "seed": true}', "line 2: seed True is not a whole number"),
    ('{"prompt": "x", "id": [1]}', "line 2: id [1] is not a string or a whole number"),
    pytest.param("[" * 200000, "line 2 is not JSON (it nests deeper than 32 levels)", id="200000 ["),
    ('{"prompt": "x", "max_new_tokens": 1e309}', "line 2: max_new_tokens inf is not a whole number"),
    ('{"prompt": "x", "temperature": NaN}', "line 2 is not JSON (NaN is no number JSON allows)"),
    ('{"prompt": "x", "temperature": -Infinity}', "line 2 is not JSON (-Infinity is no number JSON allows)"),
    ('{"prompt": "x", "seed": 9223372036854775808}', "line 2: seed 9223372036854775808 is out of range"),
    ('{"prompt": "x", "seed": 1e300}', "line 2: seed 1e+300 is out of range"),
    # temperatures sampling cannot divide by: the probabilities would be NaN mid-generation
    ('{"prompt": "x", "temperature": 1e-320}',
     "line 2: temperature 1e-320 is out of range: give 0 (the most likely token) or from 0.0001 to 10000"),
    ('{"prompt": "x", "temperature": 1e39}', "line 2: temperature 1e+39 is out of range: give 0"),
    ('{"prompt": "x", "temperature": -0.5}', "line 2: temperature -0.5 is out of range: give 0"),
    pytest.param('{"prompt": "x", "top_k": 1%s}' % ("0" * 5000), "line 2 is not JSON (100000000000000000000000... is an integer beyond 64 bits)",
                 id="5001 digits"),
])
def test_a_bad_prompt_line_fails_before_anything_is_generated(model_dir, tmp_path, line, message):
    prompts_file = tmp_path / "prompts.jsonl"
    prompts_file.write_text('{"prompt": "def "}\n' + line + "\n")
    result = run_module("batch", "--model", model_dir, "--prompts", prompts_file, "--out", tmp_path / "out",
                        "--rank", 1, "--world", 2, timeout=60)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_merge_of_an_incomplete_batch_fails_naming_the_first_missing_prompt(model_dir, tmp_path):
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    out = tmp_path / "out"
    run_ranks(model_dir, prompts_file, out, 1)
    part = batch.part_path(out, 0, 1)
    lines = part.read_bytes().split(b"\n")
    part.write_bytes(b"\n".join(lines[:3] + lines[4:]))  # the record of prompt 3 lost
    result = run_module("batch", "--merge", "--prompts", prompts_file, "--out", out, timeout=60)
    assert result.returncode == 1
    assert "1 prompt(s) have no record yet (first: line 4): run the batch again" in result.stderr
    assert not (out / batch.GENERATIONS).exists()


def test_a_prompts_file_over_the_bound_is_refused(model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(batch, "MAX_PROMPTS_BYTES", 50)
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
    with pytest.raises(SystemExit) as exit_info:
        batch.main(["--model", str(model_dir), "--prompts", str(prompts_file), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("temperature", ["1e-320", "1e39", "nan"])
def test_a_default_temperature_sampling_cannot_take_is_refused(tmp_path, capsys, temperature):
    with pytest.raises(SystemExit) as exit_info:
        batch.main(["--model", str(tmp_path), "--prompts", str(tmp_path / "prompts.jsonl"), "--out", str(tmp_path / "out"),
                    "--temperature", temperature])
    assert exit_info.value.code == 2
    assert (f"--temperature must be 0 (the most likely token) or from 0.0001 to 10000 (got {float(temperature)})"
            in capsys.readouterr().err)


def test_a_parts_directory_named_in_digits_of_another_script_is_no_world_size(tmp_path):
    out = tmp_path / "out"
    ours = batch.part_path(out, 0, 1)
    other = out / batch.PARTS / "w\u0661" / ours.name  # "w١": Arabic-Indic 1, which int() reads as 1
    for path in (ours, other):
        path.parent.mkdir(parents=True)
        path.write_text("")
    assert batch.part_files(out) == [ours]
    assert batch.part_files(out, 0, 1) == [ours]
