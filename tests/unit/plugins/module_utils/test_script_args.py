"""The total steps of your own script from its arguments: each trainer's flag as its own code and docs
define it (fixtures/trainers/*.step_flags.json), in both forms, and its documented command lines."""

import glob
import json
import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import script_args

FIXTURES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers", "*.step_flags.json")))


def trainer(path):
    with open(path) as handle:
        return json.load(handle)


def test_every_flag_is_one_a_trainers_code_or_docs_define():
    """A flag is known here only where a fixture quotes the trainer that defines it, and each fixture's is known."""
    quoted = [flag for path in FIXTURES for flag in trainer(path)["flags"]]
    assert len(FIXTURES) >= 7 and all(trainer(path)["sources"] for path in FIXTURES)
    assert sorted(set(quoted)) == sorted(script_args.STEP_FLAGS)


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_each_trainers_flag_in_the_forms_its_parser_takes(path):
    fixture = trainer(path)
    for flag in fixture["flags"]:
        for form in fixture["forms"]:
            args = ["--seed", "1"] + form.replace("--flag", flag).replace("N", "60").split() + ["--lr=3e-4"]
            assert script_args.total_steps(args) == 60, args


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_each_trainers_documented_command_line(path):
    for example in trainer(path)["examples"]:
        assert script_args.total_steps(example["argv"]) == example["total"], example["argv"]


@pytest.mark.parametrize("value", ["-1", "0", "00", "1e3", "60.0", "+60", " 60", "60 ", "60\n", "6_0", "0x3c", "$STEPS",
                                   "{{ steps }}", "", "\u0666\u0660", "\uff16\uff10", "1" * 19])
def test_a_value_that_is_not_a_plain_positive_integer_sets_no_total(value):
    assert script_args.total_steps(["--max_steps", value]) is None
    assert script_args.total_steps(["--max_steps=" + value]) is None


def test_the_last_flag_given_sets_it_as_an_argument_parser_takes_the_last():
    assert script_args.total_steps(["--max_steps", "10", "--max-steps", "60"]) == 60
    assert script_args.total_steps(["--max_iters=10", "--max_iters=2000"]) == 2000
    # the last one's -1 (train by epochs) is what the trainer does: no total, not the earlier 10
    assert script_args.total_steps(["--max_steps", "10", "--max_steps", "-1"]) is None
    assert script_args.total_steps(["--max_steps", "060"]) == 60
    assert script_args.total_steps(["--train-iters", "1" * 18]) == int("1" * 18)


@pytest.mark.parametrize("args", [
    [],
    None,
    ["60"],  # positional
    ["--max_steps"],  # no value
    ["--max_step", "60"], ["--max_stepsx=60"], ["-max_steps", "60"], ["--MAX_STEPS", "60"],  # not a trainer's flag
    ["--steps", "60"], ["--train_iters", "60"], ["--training-steps", "60"], ["--max-iters=60"],
    ["--lr_decay_iters=2000"], ["--trainer.max_epochs", "3"], ["--eval_steps", "60"], ["--num_warmup_steps=10"],
    ["--", "--max_steps", "60"],  # after a lone --, positional
    ["--max_steps", "--lr", "60"],
])
def test_no_trainers_flag_sets_no_total(args):
    assert script_args.total_steps(args) is None


def test_arguments_of_other_types_are_read_as_their_text():
    """pretrain_script_args as an inventory may write them ([--max_steps, 60]: YAML makes 60 an int)."""
    assert script_args.total_steps(["--max_steps", 60]) == 60
    assert script_args.total_steps(["--max_steps", True]) is None and script_args.total_steps(["--max_steps", 60.0]) is None


def test_the_total_is_yours_else_the_arguments_else_the_trainers_state():
    assert script_args.total_of(30, ["--max_steps", "60"], 90) == 30
    assert script_args.total_of("30", [], None) == 30  # a template's text
    assert script_args.total_of(None, ["--max_steps", "60"], 90) == 60
    assert script_args.total_of(None, ["--max_steps", "-1"], 90) == 90
    assert script_args.total_of(None, [], None) is None and script_args.total_of(None, None) is None


WATCHED = dict(progress_from_log=True, event_dirs=[])


@pytest.mark.parametrize("p, progress, said", [
    (WATCHED, dict(step=54, total_steps=None), True),
    (dict(progress_from_log=False, event_dirs=["/ws/run/src"]), dict(step=54, total_steps=None), True),
    (WATCHED, dict(step=54, total_steps=60), False),
    (WATCHED, dict(step=None, total_steps=None), False),  # no step shown yet
    (WATCHED, None, False),
    # the reference trainer's watch reads neither: its records carry their total
    (dict(progress_from_log=False, event_dirs=[]), dict(step=54, total_steps=None), False),
])
def test_a_step_without_a_total_names_the_variable_that_sets_it(p, progress, said):
    result = dict(progress=progress, progress_warnings={"/ws/run/metrics.jsonl": "1 of its last lines ..."})
    script_args.say_unknown_total(p, result)
    assert ("total_steps" in result["progress_warnings"]) is said
    assert result["progress_warnings"]["/ws/run/metrics.jsonl"] == "1 of its last lines ..."
    if said:
        message = result["progress_warnings"]["total_steps"]
        assert message.endswith("pretrain_progress_total_steps sets the total steps for the watch's step N/M and ETA")
        assert all(flag in message for flag in script_args.STEP_FLAGS) and "pretrain_script_args" in message
