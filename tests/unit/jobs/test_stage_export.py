"""The export job (jobs/export.py): its script for every inventory against the golden files, what a
user checks of it (the model's name and directory, the options), and a checkpoint name that holds
a line break, which stays in its comment and one quoted word when the script runs."""


import pytest

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.export import Export

STAGE = "export"
# the newest checkpoint of each case: the reference trainer's step_N.pt, your script's Trainer directory
FACTS = dict((case, {"checkpoint": "checkpoint-50" if case == "own-script" else "step_000050.pt"}) for case in golden.CASES)


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_export_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Export, case, FACTS[case])))


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, golden.CASES)


def test_ours_is_exported_to_its_step_and_yours_is_used_where_it_is_and_evaluated_on_your_text():
    ours = golden.job(Export, "ours", FACTS["ours"])
    assert ours.model_dir == "/shared/llm work/golden-ours/export/step_000050" and ours.model_name == "step_000050"
    assert ours.evaluate and "-m trainer.export" in ours.script() and "--data '/shared/llm work/golden-ours/data'" in ours.script()
    yours = golden.job(Export, "own-script", FACTS["own-script"])
    assert yours.model_dir == "/shared/llm work/golden-own-script/checkpoints/checkpoint-50"
    assert "trainer.export" not in yours.script()
    assert "--text '/shared/llm work/golden-own-script/eval/held out.txt'" in yours.script()
    # your script's run has no validation split of ours: without a held-out text nothing is evaluated
    values = golden.variables("own-script")
    values.pop("inference_eval_file")
    assert not Export(values, FACTS["own-script"]).evaluate


def test_the_options_ask_for_the_gpus_of_each_rank_and_carry_what_the_site_requires():
    options = golden.job(Export, "gpus", FACTS["gpus"]).options()
    assert options["gpus-per-node"] == "h100:8" and options["ntasks-per-node"] == 8 and options["cpus-per-task"] == 8
    site = golden.job(Export, "site-options", FACTS["site-options"]).module_args()
    assert dict((k, site["options"][k]) for k in ("account", "qos", "reservation", "constraint", "exclusive", "licenses")) == {
        "account": "proj-42", "qos": "high", "reservation": "maint_window", "constraint": "a100&ib", "exclusive": True,
        "licenses": "scratch:1"}
    assert site["exclude"] == ["n7"] and site["done_file"].endswith("/golden-site-options/export.done.json")
    assert "never in a script" not in site["content"]


def test_a_fact_it_does_not_take_is_refused_naming_what_it_takes():
    with pytest.raises(ValueError, match="takes no fact model_dir .*takes: checkpoint"):
        Export(golden.variables("ours"), {"checkpoint": "step_000050.pt", "model_dir": "/x"})


INJECTED = "checkpoint-5\ntouch INJECTED\n#"


def test_a_checkpoint_name_with_a_line_break_stays_in_its_comment_and_runs_as_one_word(tmp_path):
    values = dict(golden.variables("own-script"), slurm_workspace=str(tmp_path / "llm work"))
    script = Export(values, {"checkpoint": INJECTED}).script()
    assert script.splitlines()[2].startswith("# Run ") and "\\ntouch INJECTED\\n#" in script.splitlines()[2]
    run_dir = tmp_path / "llm work" / "golden-own-script"
    output, srun_args = golden.run_under_bash(tmp_path, script, run_dir, "export", "eval", "checkpoints")
    assert not list(tmp_path.rglob("INJECTED")), output
    # the evaluation step got the checkpoint's directory as one argument, line breaks and all
    assert str(run_dir / "checkpoints" / "checkpoint-5") + "\ntouch INJECTED\n#" in srun_args
