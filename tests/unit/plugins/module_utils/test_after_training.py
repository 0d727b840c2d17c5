"""What the play says of a run's model after training (runs/<run>/model.json, written from what the
export job left in the run directory): where, how large, from which step, the held-out loss; a
job's file cannot put escapes on the terminal or pass a string for a number."""

import math

from ansible_collections.llmtrain.slurm.plugins.module_utils.inference.after_training import model_lines

EXPORTED = {"model_dir": "/ws/r/export/step_000800", "name": "step_000800", "checkpoint": "step_000800.pt",
            "export": {"step": 800, "bytes": 497764352, "exported": True, "seconds": 3.21},
            "evaluation": {"loss": 3.28125, "perplexity": 26.61, "tokens": 1000000, "ranks": 16,
                           "text": "the validation split of /ws/r/data"}}


def test_an_export_and_its_evaluation():
    assert model_lines(EXPORTED, "r") == [
        "Model (Hugging Face, 497.8 MB, step 800, exported in 3.2 s): /ws/r/export/step_000800",
        "Held-out loss 3.2812 (perplexity 26.61) over 1,000,000 tokens of the validation split of /ws/r/data, 16 ranks"]


def test_an_earlier_export_your_scripts_checkpoint_and_no_evaluation():
    earlier = dict(EXPORTED, export=dict(EXPORTED["export"], exported=False), evaluation={})
    assert model_lines(earlier, "r") == [
        "Model (Hugging Face, 497.8 MB, step 800, exported before): /ws/r/export/step_000800",
        "Held-out loss: not evaluated (inference_evaluate is false, or the job left no result)."]
    own = {"model_dir": "/ws/r/checkpoints/checkpoint-30", "checkpoint": "checkpoint-30", "export": {}, "evaluation": {}}
    assert model_lines(own, "r")[0] == "Model (your script's checkpoint checkpoint-30, used as it is): /ws/r/checkpoints/checkpoint-30"
    assert model_lines({}, "r") == ["Run r has no exported model."]


def test_what_a_job_wrote_is_made_printable_and_numbers_checked():
    hostile = dict(EXPORTED, model_dir="/ws/\x1b]52;c;aGk=\x07x\ny",
                   export={"step": "\x1b[2J800", "bytes": "huge", "exported": True, "seconds": math.inf},
                   evaluation={"loss": "1.0", "tokens": 5})
    lines = model_lines(hostile, "r")
    assert lines[0] == "Model (Hugging Face, size unknown, step 800, exported): /ws/x y"
    assert lines[1] == "Held-out loss: the evaluation's record has no loss or token count."
    assert not any("\x1b" in line or "\n" in line for line in lines)
