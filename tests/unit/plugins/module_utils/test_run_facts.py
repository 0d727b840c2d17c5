"""The run's facts for the report (module_utils/rundir/run_facts.py): made in one place from what the collect step read
of the run directory, each fact defined in FIELDS, every file of the run read as untrusted JSON."""

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import run_facts

SETTINGS = {"run_name": "tiny", "workspace": "/shared/ws/tiny", "job_name": "llmtrain-tiny",
            "model": {"n_layer": 4}, "script": None, "partition": None, "gpus_per_node": 2, "procs_per_node": 2,
            "gpu_policy": "strict", "straggler_threshold": 0.2, "exclude_nodes": ["gpu-[07-08]"]}
READ = {
    "preflight.json": json.dumps({"slurm_partition": "debug", "slurm_version": "24.11.1", "gpu_policy": "report"}),
    "env/cluster.env": "export NCCL_SOCKET_IFNAME=eth0\nexport NCCL_IB_HCA='mlx5_0:1'\n",
    "node_check/llmtrain-tiny.json": json.dumps({"table": ["gpu-01 ok"], "time": "2026-12-06T03:00:00", "job_id": "41"}),
    "bad_nodes.json": json.dumps({"gpu-03": {"reason": "2 GPUs, 4 registered", "job_id": "40", "time": "t"},
                                  "gpu-07": {"reason": "Xid 79", "job_id": "39", "time": "t0"}}),
    "network_check/llmtrain-tiny.json": json.dumps({"job_id": "41", "busbw": 12.5, "slow": {}}),
}
JOB = {"job_id": "41", "state": "COMPLETED", "exit_code": 0, "elapsed": 93, "nodelist": "gpu-[01-02]",
       "start_time": "s", "end_time": "e", "restarts": 1, "reason": "None"}


def make(read=None, settings=None, job=None, checkpoints=("step_000050.pt", "step_000100.pt"), warnings=None):
    warn = (warnings if warnings is not None else []).append
    return run_facts.make(dict(READ if read is None else read), SETTINGS if settings is None else settings,
                          dict(JOB if job is None else job), "41", list(checkpoints), {"source": "metrics"}, warn)


def test_the_facts_of_a_finished_reference_run():
    facts = make()
    assert set(facts) == set(run_facts.FIELDS) - {"not_fetched", "ledger"}, "a fact made that FIELDS does not define, or the reverse"
    assert facts["cluster"] == {"partition": "debug", "slurm_version": "24.11.1", "nodes": ["gpu-01", "gpu-02"],
                                "gpus_per_node": 2, "procs_per_node": 2}
    assert facts["model"] == {"n_layer": 4} and facts["script"] is None
    assert facts["gpu_policy"] == "report", "the policy the preflight recorded is the one the run used"
    assert facts["node_check_table"] == ["gpu-01 ok"] and facts["node_check_job"] == "41"
    assert facts["network"] == {"job_id": "41", "busbw": 12.5, "slow": {}}
    # the user's hostlist expanded, then the node checks' bad nodes, each once, each with its reason
    assert facts["excluded_nodes"] == {"gpu-07": "Xid 79 (node check of job 39, t0)",
                                       "gpu-08": "named in slurm_exclude_nodes",
                                       "gpu-03": "2 GPUs, 4 registered (node check of job 40, t)"}
    assert facts["env"] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0:1"}
    assert facts["jobs"] == [{"kind": "train", "job_id": "41", "state": "COMPLETED", "exit_code": 0, "elapsed": 93,
                              "nodelist": "gpu-[01-02]", "start_time": "s", "end_time": "e", "restarts": 1}]
    assert facts["checkpoint"] == {"path": "/shared/ws/tiny/checkpoints/step_000100.pt", "step": 100}
    json.dumps(facts)


def test_your_scripts_facts_name_it_and_its_checkpoints_not_a_model():
    script = {"path": "/ws/tiny/src/train.py", "args": ["--x"], "chdir": "/ws/tiny/src", "source_dir": "/home/u/code",
              "files": 3, "digest": "abc"}
    facts = make(settings=dict(SETTINGS, script=script), checkpoints=["checkpoint-500", "checkpoint-1000"])
    assert facts["model"] is None and facts["checkpoint"] is None
    assert facts["script"] == dict(script, checkpoints=["checkpoint-500", "checkpoint-1000"])


def test_a_job_not_seen_and_files_not_there_leave_their_facts_empty():
    facts = make(read={}, job={}, checkpoints=[])
    assert facts["jobs"][0] == {"kind": "train", "job_id": "41", "state": "UNKNOWN", "exit_code": None, "elapsed": None,
                                "nodelist": None, "start_time": None, "end_time": None, "restarts": 0}
    assert facts["cluster"]["nodes"] == [] and facts["cluster"]["partition"] is None
    assert facts["network"] is None and facts["node_check_table"] == [] and facts["env"] == {}
    assert facts["excluded_nodes"] == {"gpu-07": "named in slurm_exclude_nodes", "gpu-08": "named in slurm_exclude_nodes"}
    assert facts["checkpoint"] is None


def test_a_file_a_job_spoilt_is_left_out_and_said_never_raised():
    warnings = []
    spoilt = dict(READ, **{"bad_nodes.json": "[1, 2]", "preflight.json": "{" * 5000,
                           "node_check/llmtrain-tiny.json": "\x1b[31mnot json"})
    facts = make(read=spoilt, warnings=warnings)
    assert facts["excluded_nodes"] == {"gpu-07": "named in slurm_exclude_nodes", "gpu-08": "named in slurm_exclude_nodes"}
    assert facts["cluster"]["slurm_version"] is None and facts["node_check_table"] == []
    assert len(warnings) == 3 and any("bad_nodes.json holds no JSON dict" in w for w in warnings)
    assert not any("\x1b" in w for w in warnings), "a warning shows no terminal escape a job wrote"


def test_a_run_not_watched_now_reports_the_facts_its_watch_kept():
    kept = {"run_name": "tiny", "jobs": [{"kind": "train", "job_id": "7"}]}
    read = dict(READ, **{"facts.json": json.dumps(kept)})

    def facts(read, job, reuse):
        return run_facts.kept_or_made(read, reuse, settings=SETTINGS, warn=[].append, job=job, job_id="41",
                                      checkpoints=[], progress_fact=None)

    assert facts(read, {}, True) == kept
    assert facts(read, JOB, False)["jobs"][0]["job_id"] == "41"
    # none kept: made now
    assert facts(READ, JOB, True)["cluster"]["partition"] == "debug"


def test_where_the_loss_records_come_from():
    events = {"records": 12, "source": "events", "tag": "train/loss", "files": ["/home/u/runs/tiny/events/a/ev.1"],
              "unreadable": 0, "tags": ["train/loss"]}
    assert run_facts.progress(True, events, False, None, 0, "") == {"source": "metrics"}
    assert run_facts.progress(False, events, False, None, 0, "/home/u/runs/tiny") == {
        "source": "events", "tag": "train/loss", "files": ["events/a/ev.1"], "unreadable": 0}
    assert run_facts.progress(False, {"records": 0, "tags": ["acc"]}, True, ["loss=(?P<loss>\\S+)"], 0, "") == {
        "source": "log", "patterns": ["loss=(?P<loss>\\S+)"]}
    assert run_facts.progress(False, {"records": 0, "tags": ["acc"]}, False, None, 2, "") == {
        "source": None, "tags": ["acc"], "event_files": 2}
    assert run_facts.progress(False, {}, False, None, 0, "") == {"source": None, "tags": [], "event_files": 0}
