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
])
def test_bad_arguments_name_their_flag(reference_run, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        generate.main(["--checkpoint", str(reference_run[0]), *argv])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_directory_without_checkpoints_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        generate.main(["--checkpoint", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"--checkpoint {tmp_path}: no checkpoints" in capsys.readouterr().err
