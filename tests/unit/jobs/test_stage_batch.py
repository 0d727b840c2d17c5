"""The batch inference job (jobs/batch.py): its script for every inventory against the golden files,
what a user checks of it (its ranks, GPUs and memory, where its script and record are kept), and a
model directory that holds a line break, which stays in its comment and one quoted word when it runs."""


import pytest

import golden
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.batch import Batch

STAGE = "batch"
SHA256 = "0123456789abcdef" * 4


def facts(case, model_dir=None):
    """What the play finds before the job: the prompts file's count and digest, the model, the batch's directory."""
    run_dir = "/shared/llm work/golden-" + case
    return {"prompts": 3, "prompts_sha256": SHA256, "model_dir": model_dir or run_dir + "/export/step_000050",
            "batch_dir": run_dir + "/batch/" + SHA256[:16]}


@pytest.mark.parametrize("case", sorted(golden.CASES))
def test_the_batch_job_script_is_the_kept_one(case):
    golden.check(STAGE, case, golden.kept(golden.job(Batch, case, facts(case))))


def test_no_golden_file_is_left_without_its_case():
    assert not golden.stale(STAGE, golden.CASES)


def test_every_node_runs_its_ranks_with_their_gpus_and_memory_and_appends_to_one_log():
    options = golden.job(Batch, "gpus", facts("gpus")).options()
    assert options["gpus-per-node"] == "h100:8" and options["ntasks-per-node"] == 8 and options["cpus-per-task"] == 8
    assert options["mem-per-cpu"] == "4G" and options["open-mode"] == "append" and options["nodes"] == 1
    values = dict(golden.variables("ours"), inference_nodes=3)
    assert "srun --kill-on-bad-exit=1 --ntasks=6 --ntasks-per-node=2 \\" in Batch(values, facts("ours")).script()


def test_the_script_and_the_record_are_kept_in_the_batchs_directory_and_the_play_waits_as_long_as_set():
    args = golden.job(Batch, "site-options", dict(facts("site-options"))).module_args()
    batch_dir = "/shared/llm work/golden-site-options/batch/" + SHA256[:16]
    assert args["keep_script"] == batch_dir + "/batch.sbatch" and args["done_file"] == batch_dir + "/batch.done.json"
    assert args["wait_timeout"] == 86400 and args["exclude"] == ["n7"]
    assert args["options"]["account"] == "proj-42" and args["options"]["licenses"] == "scratch:1"
    assert "never in a script" not in args["content"]


def test_a_fact_it_does_not_take_is_refused_naming_what_it_takes():
    with pytest.raises(ValueError, match="takes no fact checkpoint .*takes: prompts, prompts_sha256, model_dir, batch_dir"):
        Batch(golden.variables("ours"), dict(facts("ours"), checkpoint="step_000050.pt"))


INJECTED = "checkpoint-5\ntouch INJECTED\n#"


def test_a_model_directory_with_a_line_break_stays_in_its_comment_and_runs_as_one_word(tmp_path):
    values = dict(golden.variables("own-script"), slurm_workspace=str(tmp_path / "llm work"))
    run_dir = tmp_path / "llm work" / "golden-own-script"
    model_dir = str(run_dir / "checkpoints" / INJECTED)
    script = Batch(values, dict(facts("own-script", model_dir), batch_dir=str(run_dir / "batch" / "b"))).script()
    assert script.splitlines()[3] == '# from "%s\\ntouch INJECTED\\n#", over 1 node(s) x 2 rank(s).' % (run_dir / "checkpoints" / "checkpoint-5")
    output, srun_args = golden.run_under_bash(tmp_path, script, run_dir, "batch/b")
    assert not list(tmp_path.rglob("INJECTED")), output
    assert "--model\n" + model_dir + "\n--prompts" in srun_args
