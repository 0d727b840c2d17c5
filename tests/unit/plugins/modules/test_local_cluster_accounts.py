"""local_cluster_accounts: slurmdbd waited for, then only what the accounting database lacks added, in
the order Slurm needs it (the cluster, the QoS, the accounts, the user's associations). sacctmgr's
answers are recorded; the waits between tries are skipped."""

import pytest

from ansible_collections.llmtrain.slurm.plugins.modules import local_cluster_accounts
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Slurm, run

QOS = ["timeout", "5", "sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=name"]
ASSOC = ["sacctmgr", "--noheader", "--parsable2", "show", "assoc", "format=cluster,account,user"]
ARGS = dict(cluster="llmtrain", accounts={"ml-team": ["normal", "high"], "physics": ["normal"]},
            environment={"SLURM_CONF": "/x/slurm.conf"}, timeout=3)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(local_cluster_accounts.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    monkeypatch.setattr(local_cluster_accounts.time, "monotonic", lambda: clock[0])


def accounts(monkeypatch, capsys, *conversation, check_mode=False):
    slurm = Slurm(monkeypatch, list(conversation))
    result = run(local_cluster_accounts.main, ARGS, capsys, check_mode=check_mode)
    slurm.done()
    assert all(kwargs["environ_update"] == {"SLURM_CONF": "/x/slurm.conf"} for kwargs in slurm.kwargs)
    return result


def add(*words):
    return (["sacctmgr", "-i", "add"] + list(words), (0, "", ""))


def test_an_empty_database_gets_everything_in_order_once_slurmdbd_answers(monkeypatch, capsys):
    result = accounts(monkeypatch, capsys, (QOS, (1, "", "sacctmgr: error: Problem talking to the database")),
                      (QOS, (0, "normal\n", "")), (ASSOC, (0, "", "")),
                      add("cluster", "llmtrain"), add("qos", "high"),
                      add("account", "ml-team", "cluster=llmtrain"), add("account", "physics", "cluster=llmtrain"),
                      add("user", "root", "cluster=llmtrain", "account=ml-team", "qos=normal,high"),
                      add("user", "root", "cluster=llmtrain", "account=physics", "qos=normal"))
    assert result["changed"] is True and len(result["added"]) == 6


def test_what_is_there_is_left_and_a_second_run_adds_nothing(monkeypatch, capsys):
    rows = "llmtrain|||\nllmtrain|ml-team||\nllmtrain|ml-team|root|\nllmtrain|physics||\nllmtrain|physics|root|\n"
    result = accounts(monkeypatch, capsys, (QOS, (0, "normal\nhigh\n", "")), (ASSOC, (0, rows, "")))
    assert result["changed"] is False and result["added"] == []
    # root lacks physics: only that association is added; in check mode nothing is
    rows = "llmtrain|||\nllmtrain|ml-team||\nllmtrain|ml-team|root|\nllmtrain|physics||\n"
    result = accounts(monkeypatch, capsys, (QOS, (0, "normal\nhigh\n", "")), (ASSOC, (0, rows, "")), check_mode=True)
    assert result["changed"] is False
    assert result["added"] == [["user", "root", "cluster=llmtrain", "account=physics", "qos=normal"]]


def test_a_slurmdbd_that_never_answers_fails_saying_so(monkeypatch, capsys):
    down = (QOS, (1, "", "sacctmgr: error: Problem talking to the database"))
    result = accounts(monkeypatch, capsys, *[down] * 4)
    assert result["failed"] and result["msg"].startswith("local_cluster: slurmdbd did not answer within 3s")
    assert "Problem talking to the database" in result["msg"]
