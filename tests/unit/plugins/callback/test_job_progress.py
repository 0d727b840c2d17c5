"""The job_progress callback's line, from results as the modules return them."""

import json

from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import job_watch
from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import ENDLESS_RETRIES, event_lines, progress_line

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


def test_a_watch_without_a_time_limit_counts_its_polls():
    # pretrain_watch_timeout=0: the role's until retries ENDLESS_RETRIES times (Ansible adds the first run)
    result = dict(job_id="7", state="RUNNING", nodelist="n[1-2]", retries=ENDLESS_RETRIES + 1, attempts=120960)
    assert progress_line("h", result) == "[h] job 7 RUNNING on n[1-2] (poll 120960)"


def test_a_metrics_file_with_lines_that_are_no_record_is_said_once():
    message = "/w/run/metrics.jsonl: 2 of its last lines hold no complete JSON object ..."
    seen = set()
    assert event_lines("h", dict(job_id="7", progress_warnings={"/w/run/metrics.jsonl": message}), seen) == [
        "[h] [WARNING]: " + message]
    again = "/w/run/metrics.jsonl: 3 of its last lines hold no complete JSON object ..."
    assert event_lines("h", dict(job_id="7", progress_warnings={"/w/run/metrics.jsonl": again}), seen) == []


def test_results_of_other_tasks_give_no_line():
    assert progress_line("h", dict(rc=1, stdout="")) is None
    assert progress_line("h", dict(jobs=[], finished=False)) is None


CHECK = dict(job_id="42", restart=1, time="2026-11-30T10:00:00Z", bad={"n2": "no network interface ib0 on n2"},
             table=["NODE  GPUS(ASKED/STEP/SMI/TORCH/SLURM)  VERDICT", "n1    2/2/2/2/2                         ok",
                    "n2    2/2/2/2/2                         BAD"])
EXCLUDED = dict(job_id="42", restarts=1, excluded=["n2"], bad={"n2": "no network interface ib0 on n2"},
                message="job 42: node check excluded n2 (no network interface ib0 on n2); requeued without it")


def test_a_node_check_table_prints_once_per_check():
    seen = set()
    result = dict(jobs=[dict(job_id="42", state="PENDING")], node_check=CHECK, excluded=[EXCLUDED])
    assert event_lines("login", result, seen) == [
        "[login] node check of job 42 (start 2):",
        "    NODE  GPUS(ASKED/STEP/SMI/TORCH/SLURM)  VERDICT",
        "    n1    2/2/2/2/2                         ok",
        "    n2    2/2/2/2/2                         BAD",
        "[login] job 42: node check excluded n2 (no network interface ib0 on n2); requeued without it",
    ]
    # the next retries return the same record and the same release: nothing printed again
    assert event_lines("login", result, seen) == []
    assert event_lines("login", dict(result), seen) == []


def test_a_new_check_of_the_same_job_prints_its_table_again():
    seen = set()
    assert len(event_lines("login", dict(node_check=CHECK), seen)) == 4
    again = dict(CHECK, restart=2, time="2026-11-30T10:05:00Z", table=["NODE  VERDICT", "n1    ok"])
    assert event_lines("login", dict(node_check=again), seen) == [
        "[login] node check of job 42 (start 3):", "    NODE  VERDICT", "    n1    ok"]
    # the first start of a job (restart 0 or not recorded) is start 1
    first = dict(job_id="43", time="t", table=["n1 ok"])
    assert event_lines("login", dict(node_check=first), seen)[0] == "[login] node check of job 43 (start 1):"
    # another host watching the same job prints it too
    assert event_lines("other", dict(node_check=CHECK), seen)[0] == "[other] node check of job 42 (start 2):"


def test_each_exclusion_prints_once():
    seen = set()
    second = dict(EXCLUDED, restarts=2, excluded=["n2", "n3"], bad={"n3": "n3 did not answer"},
                  message="job 42: node check excluded n3 (n3 did not answer); requeued without it")
    assert event_lines("login", dict(excluded=[EXCLUDED]), seen) == ["[login] " + EXCLUDED["message"]]
    assert event_lines("login", dict(excluded=[EXCLUDED, second]), seen) == ["[login] " + second["message"]]
    assert event_lines("login", dict(excluded=[EXCLUDED, second]), seen) == []


def test_results_without_a_node_check_or_exclusion_print_nothing():
    seen = set()
    assert event_lines("h", dict(jobs=[], excluded=[]), seen) == []
    assert event_lines("h", dict(node_check=None, excluded=None), seen) == []
    assert event_lines("h", dict(node_check=dict(job_id="1", table="not a list")), seen) == []
    assert event_lines("h", dict(rc=1, stdout=""), seen) == [] and seen == set()


def test_a_straggler_is_named_once_per_job_and_node():
    seen = set()
    found = dict(node="slurm-worker-1", ratio=2.1, work_ms=412.0, median_ms=196.0, since_step=30, step=40)
    line = ("[login] job 42: straggler: slurm-worker-1 took 2.1x the median work per step (412 ms against 196 ms) "
            "in every record from step 30 to 40; every rank waits for it at each step")
    assert event_lines("login", dict(job_id="42", stragglers=[found]), seen) == [line]
    assert event_lines("login", dict(job_id="42", stragglers=[dict(found, step=45)]), seen) == []
    assert event_lines("login", dict(job_id="43", stragglers=[found]), seen) == [line.replace("job 42", "job 43")]
    assert event_lines("login", dict(job_id="43", stragglers=["not a record"]), seen) == []


NETWORK = dict(job_id="42", restart=0, time="2026-11-30T10:00:10Z", busbw=0.0021, latency_us=2600.0, limit=None,
               fraction=None, slow={"n2": "0.0021 GB/s with its ring neighbours, 0% of the other nodes' 0.61 GB/s"},
               slow_fabric=None,
               table=["NODE  INTERFACE  LINK(Gb/s)  BUSBW(GB/s)  OF LINK  LATENCY(us)  VERDICT",
                      "n1    eth0       unknown     0.61         -        150          ok",
                      "n2    eth0       unknown     0.0021       -        4100         SLOW"])


def test_the_network_check_prints_its_table_and_names_the_slow_node_once():
    seen = set()
    result = dict(jobs=[dict(job_id="42", state="RUNNING")], network_check=NETWORK)
    assert event_lines("login", result, seen) == [
        "[login] network check of job 42 (start 1): all-reduce bus bandwidth 0.0021 GB/s, latency 2600 us:",
        "    NODE  INTERFACE  LINK(Gb/s)  BUSBW(GB/s)  OF LINK  LATENCY(us)  VERDICT",
        "    n1    eth0       unknown     0.61         -        150          ok",
        "    n2    eth0       unknown     0.0021       -        4100         SLOW",
        "[login] network check: n2 is slow: 0.0021 GB/s with its ring neighbours, 0% of the other nodes' 0.61 GB/s",
    ]
    assert event_lines("login", result, seen) == []


def test_a_network_check_against_link_speed_says_the_fraction_and_a_slow_fabric():
    check = dict(NETWORK, busbw=4.0, limit=50.0, fraction=0.08, slow={}, table=["n1 ok"],
                 slow_fabric="all-reduce bus bandwidth 4 GB/s, 8% of the slowest link's 50 GB/s")
    assert event_lines("login", dict(network_check=check), set()) == [
        "[login] network check of job 42 (start 1): all-reduce bus bandwidth 4 GB/s (8% of the slowest link's "
        "50 GB/s), latency 2600 us:", "    n1 ok",
        "[login] network check: the fabric is slow: all-reduce bus bandwidth 4 GB/s, 8% of the slowest link's 50 GB/s"]


def test_the_final_line_of_a_watch_has_no_retry_count_and_other_results_have_none():
    from ansible_collections.llmtrain.slurm.plugins.callback.job_progress import final_line
    watch = dict(jobs=[dict(job_id="42", state="PENDING", reason="ReqNodeNotAvail")], progress=dict(step=16, loss=3.0),
                 retries=30, attempts=4)
    assert final_line("login", watch) == "[login] job 42 PENDING (ReqNodeNotAvail): step 16/?, loss 3"
    assert final_line("login", dict(job_id="42", state="COMPLETED")) is None


def test_a_progress_pattern_that_backtracks_is_warned_of_once_per_pattern():
    seen = set()
    message = ("pretrain_progress_regex '(a+)+x' took more than 0.1 s of CPU on one log line (line %d from the end): "
               "it backtracks; progress from the log skips it. ...")
    watch = dict(jobs=[dict(job_id="42", state="RUNNING")], progress_warnings={"(a+)+x": message % 3})
    assert event_lines("login", watch, seen) == ["[login] [WARNING]: " + message % 3]
    # the next polls find it on another line of the growing log: said once is enough
    assert event_lines("login", dict(watch, progress_warnings={"(a+)+x": message % 9}), seen) == []
    assert event_lines("login", dict(watch, progress_warnings={"(b+)+x": "b"}), seen) == ["[login] [WARNING]: b"]
    assert event_lines("login", dict(watch, progress_warnings=None), seen) == []


def test_a_hang_is_said_once_with_its_node_and_first_frames(tmp_path):
    """The hang watch's summary, as the watch module returns it (job_watch.newest_hang)."""
    for start, silent in ((1, 21), (2, 35)):
        stacks = tmp_path / ("45-%d" % start)
        stacks.mkdir()
        suspects = {"n%02d" % i: "no answer to the stack dump within 120 s" for i in range(10)}
        suspects["n01"] = "rank 2 stopped (state T)"
        (stacks / "summary.json").write_text(json.dumps(dict(
            job_id="45", restart=start - 1, time="t%d" % start, step=60, silent_s=silent, timeout_s=20, nodes=12,
            answered=2, ranks=4, suspects=suspects, frames={"n01": ["step (train.py:10)", "<module> (train.py:20)"]},
            dir=str(stacks))))
    (tmp_path / "46-1").mkdir()  # another job's
    hang = job_watch.newest_hang(str(tmp_path), "45")
    assert hang["start"] == 2 and hang["suspect_count"] == 10 and len(hang["suspects"]) == job_watch.HANG_NODES_SHOWN
    seen = set()
    lines = event_lines("h", dict(job_id="45", hang=hang), seen)
    assert lines[0] == "[h] job 45 (start 2) hung after step 60: no progress for 35 s (timeout 20 s); stacks in %s" % (
        tmp_path / "45-2")
    assert lines[1:5] == ["    n00: no answer to the stack dump within 120 s", "    n01: rank 2 stopped (state T)",
                          "        step (train.py:10)", "        <module> (train.py:20)"]
    assert lines[-1] == "    and 2 more node(s): %s/summary.json" % (tmp_path / "45-2")
    assert event_lines("h", dict(job_id="45", hang=hang), seen) == []
    assert job_watch.newest_hang(str(tmp_path), "47") is None and job_watch.newest_hang(str(tmp_path / "no"), "45") is None
