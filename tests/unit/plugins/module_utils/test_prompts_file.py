"""The check of inference_prompts_file (module_utils/inputs/prompts.py, the prompts_file filter) and the
batch's summary line (the batch_message filter)."""

import hashlib
import json
from pathlib import Path

import pytest

from ansible_collections.llmtrain.slurm.plugins.filter import inference
from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs
from ansible_collections.llmtrain.slurm.plugins.module_utils.inference import prompts_file as prompts


TEMPERATURES = "give 0 (the most likely token) or from 0.0001 to 10000."


def write(tmp_path, text, name="prompts.jsonl"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def test_a_good_file_gives_its_prompts_size_and_content_hash(tmp_path):
    text = ('{"prompt": "def fib(n):", "max_new_tokens": 64, "temperature": 0.7, "top_k": 0, "seed": 0, "id": "fib"}\n'
            '{"prompt": ""}\n{"prompt": "caf\\u00e9 \\ud83d\\ude00", "id": 12, "temperature": 0}\n'
            '{"prompt": "the largest seed", "seed": 9223372036854775807}\n')
    path = write(tmp_path, text)
    found = inference.prompts_file(str(path))
    assert found == {"path": str(path), "prompts": 4, "bytes": len(text.encode()), "errors": [],
                     "sha256": hashlib.sha256(text.encode()).hexdigest()}


def test_a_relative_path_is_from_the_directory_ansible_playbook_runs_in(tmp_path, monkeypatch):
    write(tmp_path, '{"prompt": "x"}')  # no line end after the last line: still one prompt
    monkeypatch.chdir(tmp_path)
    found = prompts.check_file("prompts.jsonl")
    assert found["path"] == str(tmp_path / "prompts.jsonl") and found["prompts"] == 1 and found["errors"] == []


@pytest.mark.parametrize("line, message", [
    ('{"prompt": 3}', 'line 2: "prompt" is 3, not a string: give the text to complete in quotes.'),
    ('{"text": "x"}', 'line 2: it has no "prompt": give the text to complete as "prompt"; unknown key "text" (not a key of a prompt)'),
    ('{"prompt": "x", "max_tokens": 5}', 'line 2: unknown key "max_tokens" (did you mean max_new_tokens?)'),
    ('{"prompt": "x", "max_new_tokens": 0}', 'line 2: "max_new_tokens" is 0: give a whole number >= 1 (inference_max_new_tokens caps it).'),
    ('{"prompt": "x", "max_new_tokens": 2.5}', '"max_new_tokens" is 2.5: give a whole number >= 1'),
    ('{"prompt": "x", "max_new_tokens": "5"}', '"max_new_tokens" is "5": give a whole number >= 1'),
    ('{"prompt": "x", "temperature": -0.5}', 'line 2: "temperature" is -0.5: %s' % TEMPERATURES),
    # temperatures sampling cannot divide by: the trainer's probabilities would be NaN mid-generation
    ('{"prompt": "x", "temperature": 1e-320}', 'line 2: "temperature" is 1e-320: %s' % TEMPERATURES),
    ('{"prompt": "x", "temperature": 0.00009}', 'line 2: "temperature" is 9e-05: %s' % TEMPERATURES),
    ('{"prompt": "x", "temperature": 1e39}', 'line 2: "temperature" is 1e+39: %s' % TEMPERATURES),
    ('{"prompt": "x", "temperature": Infinity}', 'line 2: "temperature" is Infinity: %s' % TEMPERATURES),
    ('{"prompt": "x", "temperature": 1e309}', 'line 2: "temperature" is Infinity: %s' % TEMPERATURES),
    ('{"prompt": "x", "temperature": NaN}', 'line 2: "temperature" is NaN: %s' % TEMPERATURES),
    ('{"prompt": "x", "temperature": "0.7"}', 'line 2: "temperature" is "0.7": %s' % TEMPERATURES),
    ('{"prompt": "x", "top_k": true}', '"top_k" is true: give a whole number >= 0'),
    ('{"prompt": "x", "seed": -1}', '"seed" is -1: give a whole number from 0 to 9223372036854775807'),
    ('{"prompt": "x", "seed": 9223372036854775808}', "line 2: it holds an integer beyond 64 bits (9223372036854775808...): write "
                                                     "one JSON object per line, such as {\"prompt\": "),
    pytest.param('{"prompt": "x", "seed": 1%s}' % ("0" * 5000), "line 2: it holds an integer beyond 64 bits", id="5001 digits"),
    ('{"prompt": "x", "id": [1]}', '"id" is [1]: give a string or a whole number'),
    ('["x"]', "line 2: it is a JSON array, not an object such as {\"prompt\": "),
    ('"x"', "line 2: it is a JSON string, not an object"),
    ('{"prompt": "x"', "line 2: it is no JSON (Expecting ',' delimiter"),
    pytest.param("[" * 200000, "line 2: it nests deeper than 32 levels: write one JSON object per line, such as {\"prompt\": ",
                 id="200000 ["),
    ('{"prompt": "x", "id": %s1%s}' % ("[" * 40, "]" * 40), "line 2: it nests deeper than 32 levels"),
    ('', "line 2: it is empty: remove it"),
    ('   ', "line 2: it is empty: remove it"),
])
def test_each_bad_line_is_named_with_its_fix(tmp_path, line, message):
    path = write(tmp_path, '{"prompt": "good"}\n' + line + '\n{"prompt": "good"}\n')
    found = prompts.check_file(str(path))
    assert found["prompts"] == 3
    assert len(found["errors"]) == 1, found["errors"]
    assert found["errors"][0].startswith("inference_prompts_file=%s line 2: " % path)
    assert message in found["errors"][0]


@pytest.mark.parametrize("temperature", ["0", "0.0", "0.0001", "1e-4", "0.7", "1", "10000", "1e4"])
def test_a_temperature_sampling_divides_by_passes(tmp_path, temperature):
    path = write(tmp_path, '{"prompt": "x", "temperature": %s}\n' % temperature)
    assert prompts.check_file(str(path))["errors"] == []


def test_the_temperatures_are_those_the_reference_trainer_samples_with(monkeypatch):
    """The trainer, deployed alone to the cluster, keeps its own copy of the bounds."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[4] / "roles" / "deploy" / "files"))
    from trainer import model  # pylint: disable=import-outside-toplevel

    assert (prompts.MIN_TEMPERATURE, prompts.MAX_TEMPERATURE) == (model.MIN_TEMPERATURE, model.MAX_TEMPERATURE)
    assert prompts.TEMPERATURES == model.TEMPERATURES
    for value in (0, -0.0, 1e-320, 9.9999e-5, 1e-4, 0.8, 1e4, 10000.001, 1e39, -0.5, float("inf"), float("nan")):
        assert prompts.temperature_ok(value) == model.temperature_ok(value), value


def test_a_line_that_is_not_utf8_is_named(tmp_path):
    path = write(tmp_path, b'{"prompt": "ok"}\n{"prompt": "\xff"}\n')
    assert prompts.check_file(str(path))["errors"] == [
        "inference_prompts_file=%s line 2: it is not UTF-8 (byte 13): save the file as UTF-8." % path]


def test_a_long_value_is_shown_cut_short(tmp_path):
    path = write(tmp_path, json.dumps({"prompt": ["x" * 1000]}) + "\n")
    (error,) = prompts.check_file(str(path))["errors"]
    assert len(error) < 300 and '"prompt" is ["xxxx' in error and '..., not a string' in error


def test_many_bad_lines_name_the_first_ten_then_how_many_more(tmp_path):
    path = write(tmp_path, "nope\n" * 25)
    errors = prompts.check_file(str(path))["errors"]
    assert len(errors) == 11 and "line 10:" in errors[9]
    assert errors[10] == "inference_prompts_file=%s: 15 more lines are wrong (25 in all)." % path


@pytest.mark.parametrize("setup, message", [
    (lambda tmp: str(tmp / "missing.jsonl"), "cannot be read (No such file or directory): give the path of a file of prompts"),
    (str, "cannot be read (not a regular file)"),
    (lambda tmp: str(write(tmp, "")), "holds no prompt: give one JSON object per line"),
    (lambda tmp: str(write(tmp, "\n")), "line 1: it is empty"),
    (lambda tmp: "a\nb", "must be the path of a file of prompts on this machine"),
    (lambda tmp: ["prompts.jsonl"], "must be the path of a file of prompts on this machine"),
])
def test_a_file_that_cannot_be_used_says_why(tmp_path, setup, message):
    errors = prompts.check_file(setup(tmp_path))["errors"]
    assert len(errors) == 1 and errors[0].startswith("inference_prompts_file=") and message in errors[0], errors


def test_a_file_over_the_bound_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(prompts, "MAX_BYTES", 100)
    path = write(tmp_path, '{"prompt": "x"}\n' * 7)
    found = prompts.check_file(str(path))
    assert found["errors"] == ["inference_prompts_file=%s is larger than 0 MiB, the most a batch holds (every rank of the "
                               "job reads it): split it into several files and run a batch for each." % path]
    assert found["sha256"] is None and found["prompts"] == 0


@pytest.mark.parametrize("name, value, message", [
    ("inference_nodes", 0, "inference_nodes=0 must be a whole number >= 1"),
    ("inference_nodes", "two", "inference_nodes='two' must be a whole number >= 1"),
    ("inference_batch_time_limit", "1 hour", "inference_batch_time_limit='1 hour' is not a Slurm time"),
    ("inference_batch_wait_timeout", 0, "inference_batch_wait_timeout=0 must be a whole number >= 1"),
    ("inference_batch_fetch_max_mb", -1, "inference_batch_fetch_max_mb=-1 must be a whole number >= 1"),
    ("inference_prompts_file", "a.jsonl\nb", "inference_prompts_file='a.jsonl\\nb' must be the path of a file"),
])
def test_the_batch_settings_are_checked_with_the_other_inputs(name, value, message):
    errors = inputs.validate({name: value})
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_good_batch_settings_pass():
    assert inputs.validate(dict(inference_prompts_file="prompts.jsonl", inference_nodes=4, inference_batch_time_limit="2-00:00:00",
                                inference_batch_wait_timeout=60, inference_batch_fetch_max_mb=10)) == []


SUMMARY = {"prompts": 30, "tokens": 1200, "seconds": 12.0, "busiest_rank_seconds": 2.5, "ranks": 6,
           "tokens_per_second": 480.0, "tokens_per_second_per_rank": 80.0, "duplicates": 0,
           "per_rank": [{"rank": r, "world": 6, "prompts": 5, "tokens": 200, "seconds": 2.0 + r / 10,
                         "tokens_per_second": 200 / (2.0 + r / 10)} for r in range(6)]}


def test_the_batch_message_says_prompts_tokens_and_tokens_per_second():
    assert inference.batch_message(json.dumps(SUMMARY), "runs/x") == (
        "Batch: 30 prompts, 1200 tokens generated on 6 ranks in 2.5 s of the busiest rank: 480.0 tokens/s, 80.0 per rank "
        "(ranks from 80.0 to 100.0). Records in the prompts' order: runs/x/generations.jsonl; per rank: runs/x/summary.json.")


def test_the_batch_message_of_an_odd_summary_shows_no_control_characters_and_no_wrong_types():
    odd = dict(SUMMARY, prompts="\x1b]52;c;bad\x07", tokens=True, per_rank="\x1b[2J")
    message = inference.batch_message(json.dumps(odd), "runs/\x1b[31mx")
    assert "\x1b" not in message and "\x07" not in message
    assert message.startswith("Batch: None prompts, None tokens generated on 6 ranks")
    assert inference.batch_message("not json").startswith("Batch: None prompts")
