import json

import pytest
from trainer import generate
from trainer_testing import run_module


def test_same_seed_same_text_and_json_output(reference_run, capsys):
    out, _result = reference_run
    argv = ["--checkpoint", out, "--prompt", "def f", "--prompt", "", "--max-new-tokens", "30",
            "--temperature", "1.0", "--top-k", "20", "--json"]
    first = run_module("generate", *argv, "--seed", "3", timeout=60)
    assert first.returncode == 0, first.stderr
    assert "step_000024.pt (step 24" in first.stderr  # the newest checkpoint
    results = json.loads(first.stdout)
    assert [r["prompt"] for r in results] == ["def f", ""]
    assert all(isinstance(r["completion"], str) and r["completion"] for r in results)
    assert run_module("generate", *argv, "--seed", "3", timeout=60).stdout == first.stdout
    others = []
    for seed in (4, 5):
        generate.main([str(a) for a in argv] + ["--seed", str(seed)])
        others.append(json.loads(capsys.readouterr().out))
    assert any(o != results for o in others)


def test_a_prompt_does_not_depend_on_the_other_prompts(reference_run, capsys):
    out, _result = reference_run
    base = ["--checkpoint", str(out), "--max-new-tokens", "20", "--seed", "9", "--json"]
    generate.main(base + ["--prompt", "def f1"])
    alone = json.loads(capsys.readouterr().out)
    generate.main(base + ["--prompt", "return", "--prompt", "def f1"])
    together = json.loads(capsys.readouterr().out)
    assert together[1] == alone[0]


def test_the_trained_model_writes_like_its_corpus(reference_run, capsys):
    out, _result = reference_run
    generate.main(["--checkpoint", str(out / "checkpoints"), "--prompt", "def f1(x):\n", "--max-new-tokens", "60",
                   "--temperature", "0", "--json"])
    completion = json.loads(capsys.readouterr().out)[0]["completion"]
    corpus_alphabet = set("def f0123456(x):\n return*+")
    assert sum(c in corpus_alphabet for c in completion) >= 0.9 * len(completion)


def test_prompt_files_and_text_output(reference_run, tmp_path, capsys):
    out, _result = reference_run
    (tmp_path / "prompts.txt").write_text("def f2\n\nreturn x\n")
    (tmp_path / "prompts.json").write_text(json.dumps(["line one\nline two"]))
    generate.main(["--checkpoint", str(out), "--prompt-file", str(tmp_path / "prompts.txt"), "--max-new-tokens", "5"])
    text = capsys.readouterr().out
    assert text.startswith("def f2") and "\nreturn x" in text and text.count("-" * 40) == 2
    generate.main(["--checkpoint", str(out), "--prompt-file", str(tmp_path / "prompts.json"), "--max-new-tokens", "5", "--json"])
    assert json.loads(capsys.readouterr().out)[0]["prompt"] == "line one\nline two"


@pytest.mark.parametrize("argv, message", [
    (["--max-new-tokens", "-1"], "--max-new-tokens must not be negative"),
    (["--temperature", "-0.5"], "--temperature must not be negative"),
    (["--prompt-file", "/nonexistent/prompts.txt"], "--prompt-file /nonexistent/prompts.txt"),
    # a temperature sampling cannot divide by: the probabilities would be NaN mid-generation
    (["--temperature", "1e-320"], "--temperature must be 0 (the most likely token) or from 0.0001 to 10000 (got 1e-320)"),
    (["--temperature", "0.00009"], "--temperature must be 0 (the most likely token) or from 0.0001 to 10000 (got 9e-05)"),
    (["--temperature", "1e39"], "--temperature must be 0 (the most likely token) or from 0.0001 to 10000 (got 1e+39)"),
    (["--temperature", "nan"], "--temperature must be 0 (the most likely token) or from 0.0001 to 10000 (got nan)"),
])
def test_bad_arguments_name_their_flag(reference_run, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        generate.main(["--checkpoint", str(reference_run[0]), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    pytest.param("[" * 200000, "it nests deeper than 32 levels", id="200000 ["),
    ('["def f", 1e309]', "a .json prompt file must hold a list of strings"),
    ('["def f", NaN]', "NaN is no number JSON allows"),
    ('["def f", 1%s]' % ("0" * 5000), "100000000000000000000000... is an integer beyond 64 bits"),
    ('["def f",', "Expecting value"),
    (b'["\xff"]', "'utf-8' codec can't decode byte 0xff"),
])
def test_a_bad_json_prompt_file_is_refused_naming_it(reference_run, tmp_path, text, message):
    prompts = tmp_path / "prompts.json"
    if isinstance(text, bytes):
        prompts.write_bytes(text)
    else:
        prompts.write_text(text)
    result = run_module("generate", "--checkpoint", reference_run[0], "--prompt-file", prompts, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"--prompt-file {prompts}: {message}" in result.stderr


def test_the_extreme_temperatures_sample(reference_run, capsys):
    """The least one takes the most likely token as 0 does; at the greatest, every token is about as likely
    as any other. Neither gives a probability of NaN, whose sampling would fail."""
    base = ["--checkpoint", str(reference_run[0]), "--prompt", "def f1(x):\n", "--max-new-tokens", "20", "--json"]
    completions = {}
    for temperature in ("0", "0.0001", "10000"):
        assert generate.main(base + ["--temperature", temperature]) == 0
        completions[temperature] = json.loads(capsys.readouterr().out)[0]["completion"]
    assert completions["0.0001"] == completions["0"] != completions["10000"]


def test_a_directory_without_checkpoints_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        generate.main(["--checkpoint", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"--checkpoint {tmp_path}: no checkpoints" in capsys.readouterr().err


def test_a_prompt_file_over_the_bound_is_refused(tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    with prompts.open("wb") as handle:
        handle.truncate(generate.MAX_PROMPTS_BYTES)  # a sparse file: read, it is that many bytes
    assert generate.read_prompt_file(prompts) == ["\0" * generate.MAX_PROMPTS_BYTES]  # the most it takes
    with prompts.open("ab") as handle:
        handle.write(b"\n")
    with pytest.raises(SystemExit) as exit_info:
        generate.parse_args(["--checkpoint", str(tmp_path), "--prompt-file", str(prompts)])
    assert exit_info.value.code == 2
    assert (f"--prompt-file {prompts}: it holds more than the 67108864 bytes a prompts file may: split its prompts "
            "into several files") in capsys.readouterr().err
