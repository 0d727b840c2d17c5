import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import slurm_parse
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import fixture


def job(name):
    records = slurm_parse.parse_records(fixture("scontrol_job_%s.txt" % name), "JobId")
    assert len(records) == 1
    return slurm_parse.job_from_scontrol(records[0])


# Recorded from the local cluster's Slurm 22.05.8 (no accounting).

def test_running_job():
    j = job("running")
    assert (j["job_id"], j["name"], j["state"], j["active"]) == ("18", "fx-running", "RUNNING", True)
    assert j["nodelist"] == "slurm-worker-2" and j["nodes"] == ["slurm-worker-2"]
    assert j["stdout_path"] == j["stderr_path"] == "/tmp/fx/slurm-18.out"
    assert j["start_time"] == "2026-11-29T21:44:31" and j["restarts"] == 0
    assert j["elapsed"] == 16 and j["reason"] is None and j["success"] is False


def test_pending_held_job():
    j = job("pending")
    assert (j["state"], j["reason"], j["active"]) == ("PENDING", "JobHeldUser", True)
    assert j["nodelist"] is None and j["nodes"] == [] and j["start_time"] is None
    assert j["stdout_path"] == "/tmp/fx/fx-pending-21.out"  # %x-%j expanded by scontrol


def test_completed_job_with_identity_comment():
    j = job("completed")
    assert (j["state"], j["active"], j["success"], j["exit_code"]) == ("COMPLETED", False, True, 0)
    assert j["comment"] == "llmtrain:aaaa" and j["fingerprint"] == "aaaa"


def test_failed_job():
    j = job("failed")
    assert (j["state"], j["exit_code"], j["signal"], j["reason"]) == ("FAILED", 3, 0, "NonZeroExitCode")
    assert slurm_parse.failure_message(j) == "job 17 (fx-failed) ended FAILED, exit code 3, reason: NonZeroExitCode"


def test_cancelled_job_ends_by_signal_15():
    j = job("cancelled")
    assert (j["state"], j["exit_code"], j["signal"], j["active"]) == ("CANCELLED", 0, 15, False)
    assert j["end_time"] == "2026-11-29T21:44:47" and j["elapsed"] == 13
    assert "signal 15" in slurm_parse.failure_message(j)


def test_timed_out_job():
    j = job("timeout")
    assert (j["state"], j["reason"], j["active"], j["time_limit"]) == ("TIMEOUT", "TimeLimit", False, "00:01:00")


def test_name_and_comment_with_newline_spaces_and_metacharacters_survive():
    j = job("metachar_name")
    assert j["name"] == 'we,ird\nna"me $(touch /tmp/fx/MARK)'
    assert j["comment"] == "llmtrain:x y"
    assert j["command"] == "/tmp/fx/ok.sh" and j["workdir"] == "/tmp/fx"


def test_squeue_records_keep_names_with_newlines():
    jobs = slurm_parse.parse_squeue(fixture("squeue_all.txt"))
    by_id = {j["job_id"]: j for j in jobs}
    assert by_id["16"] == dict(job_id="16", state="COMPLETED", name="fx-completed", comment="llmtrain:aaaa")
    assert by_id["23"]["name"] == 'we,ird\nna"me $(touch /tmp/fx/MARK)'
    assert by_id["23"]["comment"] == "llmtrain:x y"
    assert by_id["17"]["state"] == "FAILED" and by_id["18"]["state"] == "RUNNING"


def test_values_with_spaces_and_keys_with_separators():
    rec = slurm_parse.parse_kv_line(
        "NodeName=gpu1 State=DOWN+DRAIN Reason=gres/gpu count reported lower than configured (0 < 2) "
        "[slurm@2024-05-01T10:00:00] Comment=two words Command=/a b/run.sh --x=1 CPUs/Task=2 "
        "AllocNode:Sid=login:42 CfgTRES=cpu=2,mem=1G")
    assert rec["Reason"] == "gres/gpu count reported lower than configured (0 < 2) [slurm@2024-05-01T10:00:00]"
    assert rec["Comment"] == "two words"
    assert rec["Command"] == "/a b/run.sh --x=1"
    assert rec["CPUs/Task"] == "2" and rec["AllocNode:Sid"] == "login:42"
    assert rec["CfgTRES"] == "cpu=2,mem=1G"


def test_nodes_and_partitions():
    nodes = slurm_parse.parse_nodes(fixture("scontrol_show_node.txt"))
    assert [n["name"] for n in nodes] == ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"]
    assert nodes[0]["cpus"] == 4 and nodes[0]["memory_mb"] == 4096 and nodes[0]["gres"] == {}
    assert nodes[0]["partitions"] == ["debug"] and nodes[0]["features"] == [] and nodes[0]["reason"] is None
    assert nodes[0]["version"] == "22.05.8"
    parts = slurm_parse.parse_partitions(fixture("scontrol_show_partition.txt"))
    assert parts == [dict(name="debug", default=True, state="up", nodelist="slurm-worker-[0-2]",
                          nodes=["slurm-worker-0", "slurm-worker-1", "slurm-worker-2"], total_nodes=3,
                          total_cpus=12, time_limit="UNLIMITED", time_limit_s=None, default_time=None)]
    assert slurm_parse.parse_version(fixture("scontrol_version.txt")) == "22.05.8"


def test_drained_gpu_node():
    line = fixture("scontrol_show_node.txt").splitlines()[0]
    line = line.replace("Gres=(null)", "Gres=gpu:a100:4(S:0-1),gpu:2").replace("State=IDLE", "State=IDLE+DRAIN")
    line = line.replace("AvailableFeatures=(null)", "AvailableFeatures=ib,a100")
    line += " Reason=gres/gpu count reported lower than configured (0 < 2) [root@2026-11-29T21:00:00]"
    node = slurm_parse.parse_nodes(line)[0]
    assert node["state"] == "idle" and node["state_flags"] == ["drain"]
    assert node["gres"] == {"gpu": dict(total=6, types={"a100": 4}, untyped=2)}
    assert node["features"] == ["ib", "a100"]
    assert node["reason"].startswith("gres/gpu count reported lower than configured (0 < 2)")


@pytest.mark.parametrize("text, hosts", [
    ("slurm-worker-[0-2,5]", ["slurm-worker-0", "slurm-worker-1", "slurm-worker-2", "slurm-worker-5"]),
    ("n[01-03]", ["n01", "n02", "n03"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("gpu[1-2],cpu[07,09],login", ["gpu1", "gpu2", "cpu07", "cpu09", "login"]),
    ("node1", ["node1"]),
    ("(null)", []),
    ("", []),
])
def test_hostlists(text, hosts):
    assert slurm_parse.expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["n[1-", "n[3-1]", "n[a-b]", "n[\u0661-\u0663]", "n[\u00b2-3]"])
def test_bad_hostlists(bad):
    with pytest.raises(ValueError):
        slurm_parse.expand_hostlist(bad)


@pytest.mark.parametrize("text, gres", [
    ("gpu:a100:4(S:0-1),gpu:2", {"gpu": dict(total=6, types={"a100": 4}, untyped=2)}),
    ("gpu:4", {"gpu": dict(total=4, types={}, untyped=4)}),
    ("gpu:h100:8(S:0-1),mps:800", {"gpu": dict(total=8, types={"h100": 8}, untyped=0),
                                   "mps": dict(total=800, types={}, untyped=800)}),
    ("gpu:tesla", {"gpu": dict(total=1, types={"tesla": 1}, untyped=0)}),
    ("(null)", {}),
])
def test_gres(text, gres):
    assert slurm_parse.parse_gres(text) == gres


@pytest.mark.parametrize("text, state", [
    ("CANCELLED by 0", "CANCELLED"), ("CANCELLED+", "CANCELLED"), ("OOM", "OUT_OF_MEMORY"),
    ("OUT_OF_MEMORY", "OUT_OF_MEMORY"), ("CD", "COMPLETED"), ("running", "RUNNING"), ("", "UNKNOWN"),
])
def test_state_names(text, state):
    assert slurm_parse.normalize_state(text) == state


def test_state_map_is_complete():
    active = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
              "REQUEUE_FED", "RESIZING"}
    finished = {"PREEMPTED", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}
    assert active <= slurm_parse.ACTIVE_STATES
    assert not finished & slurm_parse.ACTIVE_STATES and finished <= set(slurm_parse.JOB_STATES)
    assert [s for s in slurm_parse.JOB_STATES if s != "COMPLETED" and slurm_parse.JOB_STATES[s].get("success")] == []


@pytest.mark.parametrize("text, seconds", [
    ("00:00:13", 13), ("1-02:03:04", 93784), ("05:30", 330), ("45", 2700), ("UNLIMITED", None), ("N/A", None),
    ("1-02", 93600), ("1-02:03", 93780), ("01:05.250", 65),
    # what is no duration is none: other scripts' digits (a superscript made int() raise), '1_0', garbage
    ("INVALID", None), ("\u0661:00", None), ("00:\uff11\uff13", None), ("\u00b2", None), ("\u0661-00:00:00", None),
    ("1_0", None), ("-5", None), ("1:2:3:4", None), ("1-", None), (":", None),
])
def test_durations(text, seconds):
    assert slurm_parse.parse_duration(text) == seconds


@pytest.mark.parametrize("text, code", [
    ("2:0", (2, 0)), ("0:15", (0, 15)), ("1", (1, 0)), ("", (None, None)), (None, (None, None)),
    ("\u0662:0", (None, None)), ("2:\u0660", (None, None)), ("\u00b2:0", (None, None)), ("1_0:0", (None, None)),
    ("-1:0", (None, None)), ("x:y", (None, None)),
])
def test_exit_codes(text, code):
    assert slurm_parse.parse_exit_code(text) == code


def test_unknown_job_and_errors():
    assert "Invalid job id" in fixture("scontrol_job_invalid.txt")
    j = slurm_parse.unknown_job(99)
    assert (j["job_id"], j["state"], j["active"], j["known"], j["success"]) == ("99", "UNKNOWN", False, False, None)
    assert "Invalid partition name" in fixture("sbatch_invalid_partition.txt")


def test_sacct_rows():
    row = slurm_parse.FIELD_SEP.join(["77", "train", "CANCELLED by 0", "0:15", "00:01:05", "n[1-2]", "2026-01-01T00:00:00",
                                      "2026-01-01T00:00:01", "2026-01-01T00:01:06", "gpu", "llmtrain:abc", "None"])
    j = slurm_parse.parse_sacct(row + "\n")[0]
    assert (j["job_id"], j["state"], j["signal"], j["elapsed"], j["nodes"]) == ("77", "CANCELLED", 15, 65, ["n1", "n2"])
    assert j["fingerprint"] == "abc" and j["known"] and j["source"] == "sacct"


def pending_record(**fields):
    """The recorded pending job with some fields changed."""
    rec = slurm_parse.parse_records(fixture("scontrol_job_pending.txt"), "JobId")[0]
    rec.update(fields)
    return rec


def test_job_from_scontrol_gives_the_node_count_and_whether_it_waits_for_nodes():
    assert job("pending")["num_nodes"] == 1 and job("pending")["waits_for_nodes"] is False
    j = slurm_parse.job_from_scontrol(pending_record(NumNodes="3", Reason="ReqNodeNotAvail,_UnavailableNodes:slurm-worker-1"))
    assert j["num_nodes"] == 3 and j["waits_for_nodes"] is True
    j = slurm_parse.job_from_scontrol(pending_record(NumNodes="3-3", Reason="Resources"))
    assert j["num_nodes"] == 3 and j["waits_for_nodes"] is False
    assert slurm_parse.job_from_scontrol(pending_record(NumNodes="2-4"))["num_nodes"] == 2  # the minimum it asked for
    running = job("running")
    assert running["num_nodes"] == 1 and running["waits_for_nodes"] is False
    assert slurm_parse.unknown_job(5)["num_nodes"] is None and slurm_parse.unknown_job(5)["waits_for_nodes"] is False


@pytest.mark.parametrize("state, reason, waits", [
    ("PENDING", "ReqNodeNotAvail,_UnavailableNodes:slurm-worker-1", True),
    ("PENDING", "ReqNodeNotAvail", True),
    ("PENDING", "NodeDown", True),
    ("PENDING", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions", True),
    ("PENDING", "Resources", False),
    ("PENDING", "Priority", False),
    ("PENDING", "BeginTime", False),
    ("PENDING", "JobHeldUser", False),
    ("PENDING", None, False),
    ("RUNNING", "ReqNodeNotAvail", False),
    ("RUNNING", None, False),
])
def test_waits_for_nodes(state, reason, waits):
    assert slurm_parse.waits_for_nodes(state, reason) is waits


def test_partition_nodes_counted_per_state():
    # recorded on the local cluster (Slurm 22.05): one node drained, one down, one idle
    counts = slurm_parse.parse_state_counts(fixture("sinfo_states.txt"))
    assert counts == [dict(count=1, state="drained", state_flags=[]), dict(count=1, state="idle", state_flags=[]),
                      dict(count=1, state="down", state_flags=[])]
    assert slurm_parse.usable_count(counts) == 1
    # usable_nodes's rule: not responding (*) or powered down (~) suffixes aside, flags count
    counts = slurm_parse.parse_state_counts("2040 allocated\n3 mixed\n2 idle~\n1 down*\n1 draining\n1 idle+drain\n")
    assert slurm_parse.usable_count(counts) == 2045
    assert slurm_parse.parse_state_counts("") == []
    with pytest.raises(ValueError, match="unexpected sinfo line 'PARTITION AVAIL'"):
        slurm_parse.parse_state_counts("PARTITION AVAIL\n")


def test_numbers_slurm_prints_are_of_ascii_digits_or_none():
    """Arabic-Indic, fullwidth and superscript digits are no count: refused where a line must hold one,
    else no number (a superscript made int() raise)."""
    for text in ("\u0663 idle\n", "\u00b2 idle\n", "\uff13 idle\n"):
        with pytest.raises(ValueError, match="unexpected sinfo line"):
            slurm_parse.parse_state_counts(text)
    line = fixture("scontrol_show_node.txt").splitlines()[0]
    line = line.replace("CPUTot=4", "CPUTot=\u0664").replace("RealMemory=4096", "RealMemory=\u00b2")
    node = slurm_parse.parse_nodes(line)[0]
    assert node["cpus"] is None and node["memory_mb"] is None
    text = "".join(slurm_parse.FIELD_SEP.join(["7", "RUNNING", "train", nodes]) + slurm_parse.RECORD_SEP
                   for nodes in ("\u0662", "\u00b2", "2"))
    jobs = slurm_parse.parse_squeue(text, fields=("job_id", "state", "name", "num_nodes"))
    assert [j["num_nodes"] for j in jobs] == [None, None, 2]
    assert slurm_parse.parse_version("slurm \u0662\u0664.\u0661\u0661.1") is None
    row = slurm_parse.FIELD_SEP.join(["77", "train", "FAILED", "\u0662:0", "00:\u0660\u0661:05", "n1", "", "", "",
                                      "gpu", "", "None"])
    j = slurm_parse.parse_sacct(row + "\n")[0]
    assert (j["state"], j["exit_code"], j["signal"], j["elapsed"]) == ("FAILED", None, None, None)
    j = slurm_parse.job_from_scontrol(pending_record(ExitCode="\u00b2:0", RunTime="\uff10:00:01"))
    assert (j["exit_code"], j["signal"], j["elapsed"]) == (None, None, None)


def _typed(record):
    """The fields of a job record whose value is not of the types JOB_FIELDS gives it."""
    assert set(record) == set(slurm_parse.JOB_FIELDS), set(record) ^ set(slurm_parse.JOB_FIELDS)
    return sorted(key for key, (types, _default, _meaning) in slurm_parse.JOB_FIELDS.items()
                  if not isinstance(record[key], types)
                  or (key in ("nodes", "excluded_nodes") and not all(isinstance(n, str) for n in record[key])))


@pytest.mark.parametrize("name", ["cancelled", "completed", "failed", "metachar_name", "pending", "running", "timeout"])
def test_every_recorded_scontrol_job_is_a_job_record_of_its_types(name):
    assert _typed(job(name)) == []


def test_sacct_and_unknown_jobs_are_job_records_of_their_types():
    row = slurm_parse.FIELD_SEP.join(["77", "train", "FAILED", "1:0", "00:00:05", "n1", "", "", "", "gpu", "", ""])
    assert _typed(slurm_parse.parse_sacct(row + "\n")[0]) == []
    assert _typed(slurm_parse.unknown_job(5)) == [] and slurm_parse.unknown_job(5)["job_id"] == "5"


def test_a_job_record_refuses_a_field_it_does_not_define():
    with pytest.raises(TypeError, match="no such field nodez"):
        slurm_parse.job_record("1", nodez=["n1"])
