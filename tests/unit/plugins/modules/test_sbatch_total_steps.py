"""sbatch state=watched of your own script (PyTorch Lightning 2.6.6's own event file, fixtures/trainers):
the total its arguments set gives the watch's step N/M and ETA; without one the watch says, once, which
variable sets it. The progress lines are the job_progress callback's, from the module's results."""

import json
import os
import shutil

from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import event_lines, progress_line
from ansible_collections.llmtrain.slurm.plugins.modules import sbatch
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, job_text, run, scontrol_job
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.test_slurm_job_info import Clock, watched

EVENTS = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers", "lightning_2.6.6.tfevents")
HINT = "pretrain_progress_total_steps sets the total steps for the watch's step N/M and ETA"


def look(monkeypatch, capsys, tmp_path, **args):
    """One poll of the role's watch of a Lightning script (max_steps=30: its last logged step is 29)."""
    events = tmp_path / "src" / "lightning_logs" / "version_21"
    if not events.exists():
        events.mkdir(parents=True)
        shutil.copy(EVENTS, str(events / "events.out.tfevents.1796465968.vm.23609.0"))
    Clock(monkeypatch)
    s = Slurm(monkeypatch, [(scontrol_job(21), (0, job_text("running", 21), ""))])
    result = run(sbatch.main, watched(event_dirs=[str(tmp_path / "src")], wait_timeout=0, **args), capsys)
    s.done()
    return result


def test_the_total_your_scripts_arguments_set_gives_the_watchs_step_n_of_m_and_eta(monkeypatch, capsys, tmp_path):
    for args in (["--max_steps", "30"], ["--accelerator=cpu", "--max_steps=30"], ["fit", "--trainer.max_steps", "30"]):
        result = look(monkeypatch, capsys, tmp_path, script_args=args)
        progress = result["progress"]
        assert (progress["step"], progress["total_steps"], progress["percent"], progress["source"]) == (29, 30, 96.7, "events")
        # one step left, at the pace of its last logged steps (each held to 0.15 s)
        assert 0.1 < progress["eta_s"] < 0.5 and "total_steps" not in result.get("progress_warnings", {})
        assert progress_line("login", result) == "[login] job 21 RUNNING on slurm-worker-2: step 29/30, loss 1.13, ETA 0s"


def test_a_total_you_set_comes_before_the_arguments(monkeypatch, capsys, tmp_path):
    result = look(monkeypatch, capsys, tmp_path, total_steps=40, script_args=["--max_steps", "30"])
    assert (result["progress"]["total_steps"], result["progress"]["percent"]) == (40, 72.5)
    assert ": step 29/40, loss " in progress_line("login", result)


def test_without_a_total_the_watch_says_once_which_variable_sets_it(monkeypatch, capsys, tmp_path):
    seen, printed = set(), []
    for args in (dict(), dict(script_args=["--max_steps", "-1", "--num_train_epochs", "3"])):
        result = look(monkeypatch, capsys, tmp_path, **args)
        assert result["progress"]["total_steps"] is None and result["progress"]["eta_s"] is None
        assert ": step 29/?, loss " in progress_line("login", result)
        printed += event_lines("login", result, seen)
    assert len(printed) == 1 and printed[0].startswith("[login] [WARNING]: the watch shows step N/?")
    assert printed[0].endswith(HINT) and "--max_steps, --max-steps, --trainer.max_steps" in printed[0]


def test_the_reference_trainers_watch_is_as_before(monkeypatch, capsys, tmp_path):
    """Its records carry their total; the role gives it no script_args and reads neither log nor event files."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps(dict(step=10, total_steps=40, loss=2.5, eta_s=30)) + "\n"
                       + json.dumps(dict(step=12, loss=2.4)) + "\n")
    Clock(monkeypatch)
    Slurm(monkeypatch, [(scontrol_job(21), (0, job_text("running", 21), ""))])
    result = run(sbatch.main, watched(metrics_file=str(metrics), wait_timeout=0), capsys)
    assert (result["progress"]["step"], result["progress"]["total_steps"]) == (12, None)
    assert "progress_warnings" not in result
