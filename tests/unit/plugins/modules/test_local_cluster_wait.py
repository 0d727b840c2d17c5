"""local_cluster_wait: the bring-up ends when sinfo shows every node in a state that runs jobs; a
node that registered drained, down or invalid is resumed once; one that never comes up fails the
task naming it, with sinfo's answer and its slurmd log's last lines. sinfo's answers are recorded;
the waits between looks are skipped."""

import pytest

from ansible_collections.llmtrain.slurm.plugins.modules import local_cluster_wait
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, run

SINFO = ["sinfo", "--noheader", "--Node", "--partition", "debug", "--format", "%N %T"]
RESUME = ["scontrol", "update", "NodeName=n1", "State=RESUME"]


@pytest.fixture
def args(tmp_path, monkeypatch):
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds

    monkeypatch.setattr(local_cluster_wait.time, "sleep", sleep)
    monkeypatch.setattr(local_cluster_wait.time, "monotonic", lambda: clock[0])
    return dict(nodes=["n0", "n1"], partition="debug", timeout=4, log_dir=str(tmp_path),
                environment={"SLURM_CONF": "/x/slurm.conf"})


def wait(monkeypatch, capsys, args, *conversation, check_mode=False):
    slurm = Slurm(monkeypatch, list(conversation))
    result = run(local_cluster_wait.main, args, capsys, check_mode=check_mode)
    slurm.done()
    assert all(kwargs["environ_update"] == {"SLURM_CONF": "/x/slurm.conf"} for kwargs in slurm.kwargs)
    return result


def test_nodes_that_come_up_end_the_wait_and_change_nothing(args, monkeypatch, capsys):
    result = wait(monkeypatch, capsys, args, (SINFO, (1, "", "slurm_load_partitions: Unable to contact slurm controller")),
                  (SINFO, (0, "n0 idle\n", "")), (SINFO, (0, "n0 idle\nn1 mixed\n", "")), (SINFO, (0, "n0 idle\nn1 mixed\n", "")))
    assert result["changed"] is False and result["resumed"] == [] and "failed" not in result


def test_a_node_registered_drained_is_resumed_once_then_waited_for(args, monkeypatch, capsys):
    result = wait(monkeypatch, capsys, args, (SINFO, (0, "n0 idle\nn1 drained\n", "")), (RESUME, (0, "", "")),
                  (SINFO, (0, "n0 idle\nn1 drained\n", "")), (SINFO, (0, "n0 idle\nn1 idle\n", "")))
    assert result["changed"] is True and result["resumed"] == ["n1"]
    # check mode resumes nothing
    result = wait(monkeypatch, capsys, args, (SINFO, (0, "n0 idle\nn1 down\n", "")), (SINFO, (0, "n0 idle\nn1 idle\n", "")),
                  check_mode=True)
    assert result["changed"] is False and result["resumed"] == ["n1"]


def test_a_node_that_never_comes_up_is_named_with_sinfo_and_its_log(args, monkeypatch, capsys, tmp_path):
    (tmp_path / "slurmd-n1.log").write_text("".join("line %d\n" % i for i in range(40)) + "error: gres/gpu: no such file\n")
    not_responding = (SINFO, (0, "n0 idle\nn1 idle*\n", ""))
    # registered at once (in any state), then looked at each second until the timeout: at 0, 1, 2, 3 and 4 s
    result = wait(monkeypatch, capsys, args, *[not_responding] * 6)
    assert result["failed"] is True
    lines = result["msg"].split("\n")
    assert lines[0] == "local_cluster: n1 did not reach idle within 4s (local_cluster_node_timeout)."
    assert lines[1:3] == ["sinfo said: n0 idle", "n1 idle*"]
    assert lines[3] == "--- last lines of %s/slurmd-n1.log:" % tmp_path
    assert lines[4:] == ["line %d" % i for i in range(26, 40)] + ["error: gres/gpu: no such file"]
