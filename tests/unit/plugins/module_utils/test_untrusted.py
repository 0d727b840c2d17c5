"""What a job writes cannot crash a reader: the bounded JSON reader (node/untrusted.py) and every
reader of the run's files fed the records that crashed them (deep nesting, numbers beyond a float
or 64 bits, NaN and infinities where a number is shown, fields of the wrong type, job ids that are
paths), and text made printable for a terminal."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.watch import check_summary, exclusion, job_watch, recovery
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import done_record, run_status
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import log_progress, metrics, trainer_state
from ansible_collections.llmtrain.slurm.plugins.module_utils.progress.log_progress import DEFAULT_PATTERNS, compile_patterns
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import hang, job_end, node_check, run_files, untrusted

DEEP = "[" * 50000
DEEP_CLOSED = "[" * 50000 + "]" * 50000
# what OSC 52 (the clipboard), CSI 2J (clear the screen), OSC 8 (a link) and a bidirectional override look like
ESCAPES = "7\x1b]52;c;aGVsbG8=\x07\x1b[2J\x1b]8;;https://evil.example/\x1b\\\u202egnp.exe\x9b0m\x00"


@pytest.mark.parametrize("text, why", [
    (DEEP, "nests deeper than 32 levels"),
    (DEEP_CLOSED, "nests deeper than 32 levels"),
    ('{"a": ' + "[" * 33 + "]" * 33 + "}", "nests deeper than 32 levels"),
    ('{"max_steps": ' + "9" * 5000 + "}", "an integer beyond 64 bits"),
    ('{"global_step": %d}' % 10 ** 400, "an integer beyond 64 bits"),
    ('{"epoch": 1e999}', "inf .NaN, an infinity or a number beyond a float., which is no number"),
    ('{"eta_s": Infinity}', "inf .NaN, an infinity or a number beyond a float., which is no number"),
    ('{"loss": NaN}', "nan .NaN, an infinity or a number beyond a float., which is no number"),
    ('{"step": 1', "is no JSON"),
    ("[" * 40 + '"' + '\\"' * 200000, "is no JSON"),  # a string that never ends, full of escaped quotes
    (b'{"n\xff": 1}', "not UTF-8"),
    ('{"a": "%s"}' % ("x" * 100), "longer than 64 bytes"),
])
def test_what_no_reader_can_take_is_unreadable_and_says_why(text, why):
    limit = 64 if "x" * 100 in str(text) else 10 ** 6
    with pytest.raises(untrusted.Unreadable, match=why):
        untrusted.loads(text, limit)
    assert untrusted.record(text, limit) is None


def test_an_interpreter_without_a_limit_on_digits_refuses_a_long_integer_before_converting_it(monkeypatch):
    """Python converts a string of n digits in time quadratic in n where nothing limits them (before
    the fix of CVE-2020-10735): the hook refuses it by its length."""
    monkeypatch.setattr(untrusted, "PARSE_INT", untrusted._int)
    with pytest.raises(untrusted.Unreadable, match="an integer beyond 64 bits"):
        untrusted.loads('{"step": %s}' % ("9" * 1000000), 10 ** 7)
    assert untrusted.loads('{"step": -9223372036854775807}', 100) == {"step": -(2 ** 63 - 1)}


def test_what_records_hold_is_read_as_it_is():
    nested = '{"a": ' + "[" * 31 + "]" * 31 + ', "s": "[[[[{{{{' + "[" * 40 + '"}'
    assert untrusted.loads(nested, 10 ** 6)["s"].startswith("[[[[{{{{")
    assert untrusted.loads('{"step": 9223372036854775807, "loss": 1.5e300}', 100) == dict(
        step=2 ** 63 - 1, loss=1.5e300)
    # a diverged run's loss is NaN, and the metrics reader says so
    assert str(untrusted.record('{"loss": NaN, "val_loss": -Infinity}', 100, nonfinite=True)) == \
        "{'loss': nan, 'val_loss': -inf}"
    # a list of thousands of per-node records is no deeper than 3
    many = json.dumps(dict(nodes=[dict(node="n%d" % i, ms=[1, 2]) for i in range(5000)]))
    assert len(untrusted.loads(many, len(many))["nodes"]) == 5000


def test_fields_of_the_wrong_type_are_absent():
    record = {"step": "5", "total_steps": 100, "loss": 1, "eta_s": float("inf"), "lr": True, "job_id": "999_/../x",
              "event": ["x"]}
    assert untrusted.fields(record, metrics.METRIC_FIELDS) == dict(total_steps=100, loss=1)
    assert untrusted.field(12, untrusted.JOB) == "12" and untrusted.field("12_3", untrusted.JOB) == "12_3"
    for bad in ("999_/../../secret", "-1", "12;rm", "", "1_", "1" * 19, 1.5):
        assert untrusted.field(bad, untrusted.JOB) is None


def test_printable_takes_out_escapes_and_controls_and_keeps_the_words():
    assert untrusted.printable(ESCAPES) == "7gnp.exe"
    assert untrusted.printable("\x1b[31mred\x1b[0m\tdone\r\nnext\u2028line") == "red\tdone next line"
    assert untrusted.printable("one\r\ntwo\rX\n\x1b[2Kthree\x85four", lines=True) == "one\ntwo X\nthree\nfour"
    for text in (ESCAPES, "\x1b", "\x1b]unterminated", "a\x1bPdcs\x1b\\b", "\x1b(B\x1b=\x1b7"):
        out = untrusted.printable(text)
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u202e\u2066\u200f" for c in out), repr(out)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_the_metrics_tail_counts_crafted_lines_unreadable_and_progress_has_numbers_or_nothing(tmp_path):
    good = dict(step=40, total_steps=100, loss=2.5)
    path = write(tmp_path / "metrics.jsonl", "\n".join([json.dumps(good), DEEP, '{"step": %d, "loss": 1}' % 10 ** 400,
                                                        '{"step": 41, "loss": 1e999}']) + "\n")
    records, unreadable = metrics.tail_records(path)
    assert records[0] == good and unreadable == 2
    assert records[1]["loss"] == float("inf")  # a diverged loss is shown, not dropped
    progress = metrics.progress_of([{"step": "5", "total_steps": 100, "loss": 1, "eta_s": float("inf"),
                                     "tokens_per_s": "fast", "event": {"x": 1}}])
    assert (progress["step"], progress["loss"], progress["eta_s"], progress["tokens_per_s"], progress["event"]) == (
        None, 1, None, None, None)
    assert "percent" not in progress
    # the last loss record is the last whose loss is a number
    assert metrics.progress_of([good, {"step": 41, "loss": "1.0\x1b[2J"}])["step"] == 40


def test_starts_lines_with_deep_nesting_bad_types_or_a_job_id_that_is_a_path_are_no_start(tmp_path):
    resume = dict(event="resume", job_id="7", start=2, step=10, restart_in_job=1,
                  failed_ranks=[dict(rank=3, node="n1", step=12, error="E", extra=[[[1]]]), [[["x"]]], "y"])
    lines = [json.dumps(resume), DEEP, json.dumps(dict(job_id="999_/../../../../secret", start=1, nodes="n1")),
             json.dumps(dict(job_id=7, start="1", nodes="n1")), json.dumps(dict(event="end", job_id="x", start=1)),
             json.dumps(dict(job_id="7", start=1, nodes="n[1-2]", left=["x"], time="T"))]
    starts, events, ends, unreadable = recovery.run_starts(write(tmp_path / "starts.jsonl", "\n".join(lines) + "\n"))
    assert starts == [dict(job_id="7", start=1, nodes="n[1-2]", left="", time="T")]
    assert events == [dict(event="resume", job_id="7", start=2, step=10, restart_in_job=1,
                           failed_ranks=[dict(rank=3, node="n1", step=12, error="E")])]
    assert ends == [] and unreadable == 4


def make_run(workspace, name, files):
    run = workspace / name
    (run / "scripts").mkdir(parents=True)
    (run / "scripts" / "pretrain.sbatch").write_text("#!/bin/bash\n")
    os.chmod(run, 0o755)
    for relative, text in files.items():
        write(run / relative, text)
    return run


def row(workspace, name, queue=()):
    return run_status.run_row(str(workspace), name, list(queue), "llmtrain-", "logs/%x-%j.out",
                              compile_patterns(DEFAULT_PATTERNS))


def state_file(**top):
    state = dict(dict(global_step=20, max_steps=100, logging_steps=10, epoch=2.0,
                      log_history=[dict(step=10, loss=3.0, epoch=1.0), dict(step=20, loss=2.5, epoch=2.0)]), **top)
    return json.dumps(state, indent=2, sort_keys=True)


def large_state(old, new):
    """A Trainer's state large enough to be read from its ends (as the watch reads it), its text with old
    replaced by new."""
    state = json.loads(state_file(global_step=4000, max_steps=5000, epoch=40.0))
    state["log_history"] = [dict(step=i, loss=2.0, epoch=i / 100) for i in range(10, 4001, 10)] * 3
    text = json.dumps(state, indent=2, sort_keys=True)
    assert len(text) > trainer_state.HEAD_BYTES + trainer_state.TAIL_BYTES and old in text
    return text.replace(old, new)


@pytest.mark.parametrize("files", [
    {"bad_nodes.json": DEEP},
    {"starts.jsonl": DEEP + "\n"},
    {"train.done.json": DEEP},
    {"hangs/7-1/summary.json": DEEP},
    {"metrics.jsonl": '{"step": 5, "total_steps": 100, "loss": 1, "eta_s": Infinity}\n'},
    {"checkpoints/checkpoint-20/trainer_state.json": large_state('"max_steps": 5000', '"max_steps": ' + "9" * 5000)},
    {"checkpoints/checkpoint-20/trainer_state.json": large_state('  "epoch": 40.0,', '  "epoch": 1e999,')},
    {"checkpoints/checkpoint-20/trainer_state.json": large_state('"global_step": 4000', '"global_step": %d' % 10 ** 400)},
    {"checkpoints/checkpoint-20/trainer_state.json": state_file(global_step=10 ** 400)},
])
def test_a_crafted_file_in_a_run_leaves_its_row_and_the_table_whole(tmp_path, files):
    files = dict({"train.done.json": json.dumps(dict(fingerprint="f", job_id="7", state="PENDING")),
                  "starts.jsonl": json.dumps(dict(job_id="7", start=1, nodes="n1", left="", time="T")) + "\n",
                  # a Hugging Face Trainer's lines, after the state's entries: their steps come from its epochs
                  "logs/llmtrain-r-7.out": "{'loss': 2.0, 'learning_rate': 5e-05, 'epoch': 99.5}\n"
                                           "{'loss': 1.9, 'learning_rate': 5e-05, 'epoch': 99.6}\n"}, **files)
    make_run(tmp_path, "r", files)
    found = row(tmp_path, "r", [dict(job_id="7", state="RUNNING", name="llmtrain-r", reason=None, nodelist="n1",
                                     num_nodes=1)])
    assert found["state"] == "running" and found["job_id"] == "7" and found["eta_s"] is None
    lines = run_status.table([found]) + run_status.detail(found, None)
    assert lines[2].startswith("r ")


def test_a_job_id_read_from_the_run_is_a_job_id_or_names_no_job(tmp_path):
    make_run(tmp_path, "r", {
        "train.done.json": json.dumps(dict(fingerprint="f", job_id="5/../../../../etc/passwd", state="PENDING")),
        "starts.jsonl": json.dumps(dict(job_id="999_/../../../../secret", start=1, nodes="n1")) + "\n"})
    found = row(tmp_path, "r")
    assert (found["state"], found["job_id"], found["stdout_path"]) == ("not submitted", None, None)
    record, why = done_record.read(str(tmp_path / "r" / "train.done.json"), "f")
    assert record is None and "names no Slurm job" in why
    assert job_end.completed(dict(fingerprint="f", job_id="5/../x"), "5/../x", "T") is None


def test_runs_in_a_workspace_others_can_replace_are_untrusted_and_not_read(tmp_path):
    workspace = tmp_path / "shared"
    make_run(workspace, "r", {"train.done.json": json.dumps(dict(fingerprint="f", job_id="7", state="COMPLETED"))})
    os.chmod(workspace, 0o777)  # no sticky bit: anyone can rename r and put their own in its place
    why = run_status.workspace_problem(str(workspace), os.getuid())
    assert "%s is writable by group and others (mode 0777) without the sticky bit" % workspace in why
    found = run_status.run_row(str(workspace), "r", [], "llmtrain-", "logs/%x-%j.out", [], workspace_distrust=why)
    assert (found["state"], found["job_id"]) == ("untrusted", None) and "the sticky bit" in found["why"]
    os.chmod(workspace, 0o1777)
    assert run_status.workspace_problem(str(workspace), os.getuid()) is None
    assert row(workspace, "r")["state"] == "finished"
    # a directory of the run that the status reads, writable by others, is theirs as much as the user's
    (workspace / "r" / "logs").mkdir(mode=0o777)
    os.chmod(workspace / "r" / "logs", 0o777)
    assert row(workspace, "r")["state"] == "untrusted"


def test_the_newest_hang_and_the_checks_summaries_have_their_types(tmp_path):
    summary = dict(job_id="7", restart=0, time="T", silent_s="long", timeout_s=30, step=[1], dir="/x",
                   suspects={"n1": "rank 3 \x1b]52;c;x\x07is stopped", "n2": ["x"]}, frames={"n1": "abc", "n2": [1, 2]})
    write(tmp_path / "hangs" / "7-1" / "summary.json", json.dumps(summary))
    found = job_watch.newest_hang(str(tmp_path / "hangs"), "7")
    assert found.get("silent_s") is None and found.get("step") is None and found["timeout_s"] == 30
    assert found["suspects"] == {"n1": "rank 3 \x1b]52;c;x\x07is stopped", "n2": "['x']"}
    assert found["frames"] == {"n2": ["1", "2"]}  # a frame list, of text; a string is no list of frames
    write(tmp_path / "hangs" / "7-2" / "summary.json", DEEP)
    assert job_watch.newest_hang(str(tmp_path / "hangs"), "7")["start"] == 1
    network = check_summary.network_check_summary(dict(job_id=["x"], busbw="fast", fraction=float("nan"), slow={"n1": 3},
                                                       table="NODE  GBPS"), "/f")
    assert (network["job_id"], network["busbw"], network["fraction"], network["slow"], network["table"]) == (
        None, None, None, {"n1": "3"}, [])


def test_the_bad_nodes_file_and_the_done_record_nested_too_deep_are_said_not_raised(tmp_path):
    path = write(tmp_path / "bad_nodes.json", DEEP)
    record, warning = exclusion.load_bad_nodes(path)
    assert record == {} and "nests deeper than 32 levels" in warning
    write(tmp_path / "train.done.json", DEEP)
    record, why = done_record.read(str(tmp_path / "train.done.json"), "f")
    assert record is None and "nests deeper" in why
    assert "cannot read" in job_end.mark(str(tmp_path / "train.done.json"), "5")
    assert node_check.read_json(path, {}) == {}


def test_a_trainer_state_with_numbers_beyond_range_names_no_step_and_the_one_before_is_read(tmp_path):
    good = tmp_path / "checkpoint-10" / "trainer_state.json"
    write(good, state_file(global_step=10))
    for name, text in (("checkpoint-20", state_file(global_step=10 ** 400)),
                       ("checkpoint-30", state_file().replace('"max_steps": 100', '"max_steps": ' + "9" * 5000)),
                       ("checkpoint-40", state_file(epoch=1e308).replace("1e+308", "1e999"))):
        write(tmp_path / name / "trainer_state.json", text)
    state, _errors = trainer_state.read_newest(str(tmp_path), tries=4)
    assert state["global_step"] == 10
    # the ends of a large state, as the watch reads them: the regular expressions take no number beyond 64 bits
    big = json.loads(state_file())
    big["log_history"] = [dict(step=i, loss=1.0, epoch=i / 100) for i in range(1, 5000)]
    text = json.dumps(big, indent=2, sort_keys=True).replace('"global_step": 20', '"global_step": ' + "9" * 5000)
    text = text.replace('"epoch": 2.0,\n  "global', '"epoch": 1e999,\n  "global')
    write(tmp_path / "checkpoint-50" / "trainer_state.json", text)
    state = trainer_state.read(str(tmp_path / "checkpoint-50" / "trainer_state.json"))
    assert state["global_step"] is None and state["epoch"] is None and state["max_steps"] == 100


def test_the_collect_step_reads_a_large_trainer_state_from_its_ends(tmp_path, monkeypatch):
    """A week of a Trainer's records: the state is read on the cluster, its first 4 KiB and last
    4 MiB, and its newest entries are those of the whole file."""
    state = json.loads(state_file(global_step=300000, max_steps=300000, logging_steps=1, epoch=300.0))
    state["log_history"] = [dict(step=i, loss=round(2 + 1 / i, 4), epoch=i / 1000, grad_norm=0.5, learning_rate=1e-4)
                            for i in range(1, 300001)]
    path = tmp_path / "checkpoint-300000" / "trainer_state.json"
    write(path, json.dumps(state, indent=2, sort_keys=True))
    assert path.stat().st_size > 8 * trainer_state.COLLECT_TAIL_BYTES
    read = []
    real_open = open

    def counting_open(name, *args, **kwargs):
        handle = real_open(name, *args, **kwargs)
        real_read = handle.read

        def counted(*read_args):
            data = real_read(*read_args)
            read.append(len(data))
            return data
        handle.read = counted
        return handle
    monkeypatch.setattr(trainer_state, "open", counting_open, raising=False)
    found, errors = trainer_state.read_newest(str(tmp_path), tail_bytes=trainer_state.COLLECT_TAIL_BYTES)
    monkeypatch.undo()
    assert errors == [] and sum(read) <= trainer_state.HEAD_BYTES + trainer_state.COLLECT_TAIL_BYTES
    assert (found["global_step"], found["max_steps"], found["logging_steps"]) == (300000, 300000, 1)
    assert 10000 < len(found["entries"]) < 40000 and found["entries"][-1] == (300000, 300.0, 2.0)
    back = trainer_state.from_result(json.loads(json.dumps(trainer_state.compact(found))))
    assert back == found


def test_the_hang_watch_reads_past_crafted_lines_and_keeps_watching(tmp_path):
    """The training job's hang watch runs in the node package; a line nested too deep made it raise
    and stop watching for the rest of the job."""
    records = hang.Records()
    assert records('{"step": 3, "loss": 2.0}') and not records(DEEP) and not records('{"step": ' + "9" * 5000 + "}")
    metrics_file = write(tmp_path / "metrics.jsonl", '{"step": 3, "loss": 2.0}\n' + '{"step": ' + "[" * 5000 + "\n")
    assert hang.last_step(metrics_file) == 3
    # the node package, run as the job runs it (its own interpreter, the package alone on the path)
    package = tmp_path / "scripts"
    from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package
    for name, text in node_package.files().items():
        write(package / name, text)
    probe = ("import sys; from llmtrain_node import hang; r = hang.Records(); "
             "print(r(sys.argv[1]), hang.last_step(sys.argv[2]))")
    out = subprocess.run([sys.executable, "-E", "-s", "-c", probe, DEEP, metrics_file], cwd=str(package),
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    assert out.split() == ["False", "3"]


# what str.isdigit() and \d take for digits besides 0-9: Arabic-Indic 42, fullwidth 12, a superscript 2
OTHER_DIGITS = ("\u0664\u0662", "\uff11\uff12", "\u00b2")


@pytest.mark.parametrize("text", OTHER_DIGITS + ("4\u00b2", "\u0664_1", "1_\u0662", "", "-1", " 1", "1\n", "1.5", None))
def test_a_job_id_or_a_number_read_from_text_is_of_the_digits_0_to_9_only(text):
    assert untrusted.field(text, untrusted.JOB) is None and not untrusted.digits(text)
    assert untrusted.whole(text) is None and untrusted.whole(text, 0) == 0


def test_job_ids_and_numbers_of_ascii_digits_are_read():
    assert untrusted.field("42_7", untrusted.JOB) == "42_7" and untrusted.field(42, untrusted.JOB) == "42"
    assert untrusted.digits("0042") and untrusted.whole("0042") == 42
    assert untrusted.whole("9" * 18) == 10 ** 18 - 1 and untrusted.whole("9" * 19) is None  # beyond 64 bits


def test_readers_of_the_run_take_names_of_other_digits_for_no_number(tmp_path):
    # a hang of the job whose start is no number (int() raised on the superscript) is no hang of it
    write(tmp_path / "hangs" / "7-\u00b2" / "summary.json", json.dumps(dict(suspects={"n1": "stopped"})))
    assert job_watch.newest_hang(str(tmp_path / "hangs"), "7") is None
    assert run_files.checkpoint_step("step_\u0664\u0662.pt") is None
    assert run_files.checkpoint_step("checkpoint-\uff11\uff12") is None and run_files.checkpoint_step("step_000042.pt") == 42
    write(tmp_path / "r" / "eval" / "step_\u0664\u0662.json", json.dumps(dict(loss=1.0, tokens=2)))
    assert run_status.newest_evaluation(str(tmp_path / "r")) is None
    write(tmp_path / "checkpoints" / "checkpoint-\u0664\u0662" / "trainer_state.json", state_file())
    assert trainer_state.read_newest(str(tmp_path / "checkpoints")) == (None, [])


def test_a_job_s_cpus_and_its_ranks_are_counted_from_ascii_digits_only(tmp_path):
    # SLURM_JOB_CPUS_PER_NODE of other digits is none: the batch node's count on each node
    assert run_files.job_cpus("\u0664(x3)", "1", 2) == 2 and run_files.job_cpus("", "\u00b2", 2) == 0
    assert node_check.cpu_binding({"SLURM_CPUS_PER_TASK": "\u0664"}, 0, affinity={0, 1})["asked"] == 1
    assert node_check.cpu_binding({"SLURM_CPUS_PER_TASK": "\u00b2"}, 0, affinity={0, 1})["asked"] == 1
    # /proc: only a directory named by a pid in 0-9 is a process (the others were the same pid 42, or raised)
    for name in ("42",) + OTHER_DIGITS:
        (tmp_path / "proc" / name).mkdir(parents=True)
        (tmp_path / "proc" / name / "environ").write_bytes(b"SLURM_JOB_ID=7\0RANK=0\0LOCAL_RANK=0\0")
    assert [pid for pid, _env in hang.ranks_of("7", proc=str(tmp_path / "proc"))] == [42]


def test_the_built_in_progress_patterns_read_steps_and_numbers_of_ascii_digits_only():
    compiled = compile_patterns(DEFAULT_PATTERNS)
    assert log_progress.records(["step 4 loss 2.5"], compiled)[0] == [dict(step=4, loss=2.5)]
    for line in ("step \u0664 loss 2.5", "step 4 loss \u0662.\u0665", "iteration \u0664/ 10 | lm loss: 2.0 |"):
        assert log_progress.records([line], compiled)[0] == []
    assert log_progress.records(["step: 4 loss: 2.0 tps: \u0661\u0662\u0663"], compiled)[0] == [dict(step=4, loss=2.0)]
