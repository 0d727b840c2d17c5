import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import slurm_client, slurm_parse
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import fixture


class FakeModule:
    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def get_bin_path(self, name, required=False):
        return "/usr/bin/" + name

    def run_command(self, argv, **kwargs):
        self.calls.append(argv)
        return self.answers.pop(0)


def test_forgotten_job_without_accounting_is_unknown():
    module = FakeModule([(1, "", fixture("scontrol_job_invalid.txt")), (1, "", fixture("sacct_disabled.txt"))])
    j = slurm_client.Slurm(module).show_job("5")
    assert j["state"] == "UNKNOWN" and not j["known"] and not j["active"]
    assert module.calls[1][:2] == ["/usr/bin/sacct", "-X"]


def test_controller_unreachable_names_the_command():
    module = FakeModule([(1, "", fixture("squeue_no_config.txt"))])
    with pytest.raises(slurm_client.SlurmError, match="(?s)squeue .* failed \\(rc 1\\): .*Could not establish a configuration source"):
        slurm_client.Slurm(module).jobs_of_user()


UNREACHABLE = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"


def test_an_unanswering_controller_is_its_own_error():
    assert issubclass(slurm_client.ControllerUnreachable, slurm_client.SlurmError)
    err = slurm_client.slurm_error(["/usr/bin/squeue", "--noheader"], 1, "", UNREACHABLE)
    assert err.__class__ is slurm_client.ControllerUnreachable
    assert str(err) == ("/usr/bin/squeue --noheader failed (rc 1): "
                        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    timed_out = slurm_client.slurm_error(["scontrol"], 1, "Socket timed out on send/recv operation", "")
    assert timed_out.__class__ is slurm_client.ControllerUnreachable  # what stdout says when stderr is empty
    other = slurm_client.slurm_error(["scontrol"], 1, "", "scontrol: error: Access/permission denied\n")
    assert other.__class__ is slurm_client.SlurmError
    assert slurm_client.slurm_error(["squeue"], 1, "", fixture("squeue_no_config.txt")).__class__ is slurm_client.SlurmError


def test_show_job_raises_controller_unreachable_and_still_knows_forgotten_jobs():
    module = FakeModule([(1, "", UNREACHABLE)])
    with pytest.raises(slurm_client.ControllerUnreachable, match=r"^scontrol show job -o 7 failed \(rc 1\): slurm_load_jobs"):
        slurm_client.Slurm(module).show_job("7")

    module = FakeModule([(1, "", "scontrol: error: Access/permission denied\n")])
    with pytest.raises(slurm_client.SlurmError) as info:
        slurm_client.Slurm(module).show_job("7")
    assert info.value.__class__ is slurm_client.SlurmError and "Access/permission denied" in str(info.value)

    row = slurm_parse.FIELD_SEP.join(["7", "train", "COMPLETED", "0:0", "00:01:05", "n1", "2026-01-01T00:00:00",
                                      "2026-01-01T00:00:01", "2026-01-01T00:01:06", "gpu", "None", "None"])
    module = FakeModule([(1, "", fixture("scontrol_job_invalid.txt")), (0, row + "\n", "")])
    j = slurm_client.Slurm(module).show_job("7")
    assert (j["job_id"], j["state"], j["source"], j["waits_for_nodes"]) == ("7", "COMPLETED", "sacct", False)
    assert len(module.calls) == 2 and module.calls[1][-1] == "--jobs=7"


def test_any_command_raises_controller_unreachable(monkeypatch):
    monkeypatch.setattr(slurm_client.Slurm, "user", lambda self: "alice")
    module = FakeModule([(1, "", "squeue: error: " + UNREACHABLE)])
    with pytest.raises(slurm_client.ControllerUnreachable, match="^/usr/bin/squeue --noheader --states=all --user=alice"):
        slurm_client.Slurm(module).jobs_of_user()


def test_nodes_are_scontrol_show_node():
    module = FakeModule([(0, fixture("scontrol_show_node.txt"), "")])
    nodes = slurm_client.Slurm(module).nodes()
    assert module.calls == [["/usr/bin/scontrol", "show", "node", "-o"]]
    assert [n["name"] for n in nodes] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]


def test_partitions_and_version_are_scontrol():
    module = FakeModule([(0, fixture("scontrol_show_partition.txt"), ""), (0, "slurm-wlm 22.05.8\n", "")])
    client = slurm_client.Slurm(module)
    assert [p["name"] for p in client.partitions()] and client.version() == "22.05.8"
    assert module.calls == [["/usr/bin/scontrol", "show", "partition", "-o"], ["/usr/bin/scontrol", "--version"]]


def test_state_counts_ask_sinfo_about_one_partition():
    module = FakeModule([(0, fixture("sinfo_states.txt"), "")])
    counts = slurm_client.Slurm(module).state_counts("debug")
    assert module.calls == [["/usr/bin/sinfo", "--partition=debug", "--noheader", "--format=%D %T"]]
    assert slurm_parse.usable_count(counts) == 1
