"""The job_progress callback's line, from results as the modules return them."""

from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import progress_line

PROGRESS = dict(step=120, total_steps=1000, loss=3.2104, val_loss=None, lr=3e-4, tokens_per_s=5230.4,
                elapsed_s=61.2, eta_s=449.0)


def test_job_info_result_with_progress():
    result = dict(jobs=[dict(job_id="41", state="COMPLETED"), dict(job_id="42", state="RUNNING",
                                                                   nodelist="slurm-worker-[0-2]")],
                  progress=PROGRESS, retries=31, attempts=3)
    assert progress_line("login", result) == (
        "[login] job 42 RUNNING on slurm-worker-[0-2]: step 120/1000, loss 3.21, 5230 tokens/s, ETA 7m29s (retry 3/30)")


def test_pending_sbatch_result_without_metrics():
    result = dict(job_id="7", state="PENDING", nodelist=None, reason="Resources", retries=11, attempts=1)
    assert progress_line("h", result) == "[h] job 7 PENDING (Resources) (retry 1/10)"


def test_results_of_other_tasks_give_no_line():
    assert progress_line("h", dict(rc=1, stdout="")) is None
    assert progress_line("h", dict(jobs=[], finished=False)) is None
