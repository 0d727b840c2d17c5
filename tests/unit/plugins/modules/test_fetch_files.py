import hashlib
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.paths import fetch_refusal
from ansible_collections.llmtrain.slurm.plugins.modules import fetch_files
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import run

MIB = 1048576


def sha1(data):
    return hashlib.sha1(data).hexdigest()


def fetch(tmp_path, capsys, check_mode=False, **args):
    return run(fetch_files.main, dict(dict(src=str(tmp_path / "run"), dest=str(tmp_path / "local")), **args), capsys,
               check_mode=check_mode)


def make_run(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_bytes(b'{"step": 0, "loss": 5.5}\n')
    (run_dir / "logs" / "job-7.out").write_bytes(b"iter 0: loss 5.5\n")
    return run_dir


def test_accepted_files_come_with_their_real_path_size_and_sha1(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    result = fetch(tmp_path, capsys, files={"metrics.jsonl": "metrics.jsonl", "logs/job-7.out": "logs/job-7.out",
                                            "node_times.json": "node_times.json"})
    assert result["changed"] is False and result["refused"] == {}
    assert sorted(result["files"]) == ["logs/job-7.out", "metrics.jsonl"]
    metrics = result["files"]["metrics.jsonl"]
    assert metrics["path"] == os.path.realpath(str(run_dir / "metrics.jsonl"))
    assert metrics["size"] == 25 and metrics["sha1"] == sha1(b'{"step": 0, "loss": 5.5}\n')
    assert metrics["mtime"] == os.stat(str(run_dir / "metrics.jsonl")).st_mtime
    # a missing file is only absent
    assert result["missing"] == ["node_times.json"]


def test_an_absolute_path_inside_the_run_directory_is_accepted(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    log = str(run_dir / "logs" / "job-7.out")
    result = fetch(tmp_path, capsys, files={"logs/job-7.out": log})
    assert result["files"]["logs/job-7.out"]["sha1"] == sha1(b"iter 0: loss 5.5\n") and result["refused"] == {}


def test_a_link_planted_to_outside_is_refused_with_where_it_leads(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    private = tmp_path / "private.txt"
    private.write_text("not for the run report\n")
    (run_dir / "metrics.jsonl").unlink()
    os.symlink(str(private), str(run_dir / "metrics.jsonl"))
    # a run directory next door whose name starts with this one's is outside too
    (tmp_path / "run-other").mkdir()
    (tmp_path / "run-other" / "x").write_text("x")
    os.symlink(str(tmp_path / "run-other" / "x"), str(run_dir / "other"))
    # a link that stays inside is followed
    os.symlink("logs/job-7.out", str(run_dir / "latest.out"))
    result = fetch(tmp_path, capsys, files={"metrics.jsonl": "metrics.jsonl", "other": "other",
                                            "latest.out": "latest.out"})
    real_run = os.path.realpath(str(run_dir))
    assert result["refused"] == {
        "%s/metrics.jsonl" % run_dir: "%s/metrics.jsonl is not fetched: it leads to %s, outside the run directory %s."
                                      % (run_dir, os.path.realpath(str(private)), real_run),
        "%s/other" % run_dir: "%s/other is not fetched: it leads to %s/run-other/x, outside the run directory %s."
                              % (run_dir, os.path.realpath(str(tmp_path)), real_run)}
    assert list(result["files"]) == ["latest.out"]
    assert result["files"]["latest.out"]["path"] == os.path.join(real_run, "logs", "job-7.out")
    assert result["missing"] == []


def test_a_log_over_the_cap_stays_and_the_text_names_the_setting(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    with open(str(run_dir / "logs" / "big.out"), "wb") as handle:
        handle.truncate(3 * MIB)
    (run_dir / "logs" / "exact.out").write_bytes(b"x" * (2 * MIB))
    result = fetch(tmp_path, capsys, files={"logs/big.out": "logs/big.out", "logs/exact.out": "logs/exact.out"},
                   max_bytes=2 * MIB, limit_name="pretrain_fetch_max_mb")
    assert result["refused"] == {
        "%s/logs/big.out" % run_dir: "%s/logs/big.out is not fetched: it has 3 MiB, more than pretrain_fetch_max_mb=2; "
                                     "it stays in the run directory." % run_dir}
    assert result["files"]["logs/exact.out"]["size"] == 2 * MIB  # the cap itself is allowed
    # without the setting's name, the option is named
    again = fetch(tmp_path, capsys, files={"logs/big.out": "logs/big.out"}, max_bytes=2 * MIB)
    assert again["refused"]["%s/logs/big.out" % run_dir].endswith("more than max_bytes=2097152; it stays in the run "
                                                                  "directory.")


def test_a_directory_a_fifo_and_a_name_with_dots_are_refused(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    os.mkfifo(str(run_dir / "a_fifo"))  # never opened: that would wait for a writer
    (tmp_path / "secrets.env").write_text("TOKEN=x\n")
    result = fetch(tmp_path, capsys, files={"logs": "logs", "fifo": "a_fifo", "secrets.env": "../secrets.env",
                                            "up.out": "logs/../logs/job-7.out"})
    assert result.get("failed") is None and result["files"] == {}
    assert result["refused"] == {
        "%s/logs" % run_dir: "%s/logs is not fetched: it is a directory, not a regular file." % run_dir,
        "%s/a_fifo" % run_dir: "%s/a_fifo is not fetched: it is a FIFO, not a regular file." % run_dir,
        "%s/../secrets.env" % run_dir: "%s/../secrets.env is not fetched: its name goes up ('..') out of the run "
                                       "directory %s." % (run_dir, os.path.realpath(str(run_dir))),
        "%s/logs/../logs/job-7.out" % run_dir: "%s/logs/../logs/job-7.out is not fetched: its name goes up ('..') out "
                                               "of the run directory %s." % (run_dir, os.path.realpath(str(run_dir)))}


def test_a_controller_name_outside_dest_fails_the_task(tmp_path, capsys):
    make_run(tmp_path)
    result = fetch(tmp_path, capsys, files={"../metrics.jsonl": "metrics.jsonl"},
                   patterns=[dict(path="/etc", pattern="*")])
    assert result["failed"] is True
    assert "files: '../metrics.jsonl' must not contain '..'" in result["msg"]
    assert "patterns[0].path: '/etc' must be a relative path" in result["msg"]


def test_patterns_find_files_at_their_depth_or_at_any_depth(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    board = run_dir / "tensorboard"
    (board / "old").mkdir(parents=True)
    (board / "events.out.tfevents.1.node0").write_bytes(b"e1")
    (board / "events.out.tfevents.2.node0").write_bytes(b"e2")
    (board / "old" / "events.out.tfevents.0.node0").write_bytes(b"e0")
    (board / "notes.txt").write_text("n")
    wandb = run_dir / "wandb"
    (wandb / "offline-run-1" / "files").mkdir(parents=True)
    (wandb / "offline-run-1" / "run-a.wandb").write_bytes(b"w1")
    (wandb / "offline-run-1" / "files" / "run-b.wandb").write_bytes(b"deeper")
    (wandb / "run-c.wandb").write_bytes(b"shallower")
    (wandb / "latest-run").mkdir()
    (wandb / "latest-run" / "run-d.wandb").write_bytes(b"not offline-run-*")
    tensorboard = dict(path="tensorboard", pattern="events.out.tfevents.*")
    offline = dict(path="wandb", pattern="offline-run-*/run-*.wandb")
    result = fetch(tmp_path, capsys, patterns=[tensorboard, offline])
    assert sorted(result["files"]) == ["tensorboard/events.out.tfevents.1.node0", "tensorboard/events.out.tfevents.2.node0",
                                       "wandb/offline-run-1/run-a.wandb"]
    assert result["files"]["wandb/offline-run-1/run-a.wandb"]["sha1"] == sha1(b"w1")

    deep = fetch(tmp_path, capsys, patterns=[dict(tensorboard, recurse=True, dest="board"),
                                             dict(path="wandb", pattern="run-*.wandb", recurse=True)])
    assert sorted(deep["files"]) == ["board/events.out.tfevents.1.node0", "board/events.out.tfevents.2.node0",
                                     "board/old/events.out.tfevents.0.node0", "wandb/latest-run/run-d.wandb",
                                     "wandb/offline-run-1/files/run-b.wandb", "wandb/offline-run-1/run-a.wandb",
                                     "wandb/run-c.wandb"]
    # a missing directory finds nothing
    none = fetch(tmp_path, capsys, patterns=[dict(path="no_such", pattern="*", recurse=True)])
    assert none["files"] == {} and none["refused"] == {} and none.get("failed") is None


def test_a_pattern_does_not_follow_links_out_of_the_run(tmp_path, capsys):
    run_dir = make_run(tmp_path)
    outside = tmp_path / "elsewhere"
    (outside / "sub").mkdir(parents=True)
    (outside / "events.out.tfevents.9").write_text("theirs")
    (outside / "sub" / "events.out.tfevents.8").write_text("theirs")
    os.symlink(str(outside), str(run_dir / "tensorboard"))
    result = fetch(tmp_path, capsys, patterns=[dict(path="tensorboard", pattern="events.out.tfevents.*")])
    assert result["files"] == {}
    assert result["refused"] == {
        "%s/tensorboard" % run_dir: "%s/tensorboard is not fetched: it leads to %s, outside the run directory %s."
                                    % (run_dir, os.path.realpath(str(outside)), os.path.realpath(str(run_dir)))}
    os.unlink(str(run_dir / "tensorboard"))
    (run_dir / "tensorboard").mkdir()
    os.symlink(str(outside / "sub"), str(run_dir / "tensorboard" / "linked"))
    os.symlink(str(outside / "events.out.tfevents.9"), str(run_dir / "tensorboard" / "events.out.tfevents.1"))
    deep = fetch(tmp_path, capsys, patterns=[dict(path="tensorboard", pattern="events.out.tfevents.*", recurse=True)])
    assert deep["files"] == {}
    assert list(deep["refused"]) == ["%s/tensorboard/events.out.tfevents.1" % run_dir]


def test_check_mode_reads_the_same(tmp_path, capsys):
    make_run(tmp_path)
    result = fetch(tmp_path, capsys, check_mode=True, files={"metrics.jsonl": "metrics.jsonl"})
    assert result["changed"] is False and result["files"]["metrics.jsonl"]["size"] == 25
    assert not (tmp_path / "local").exists()


def test_without_checksum_no_sha1(tmp_path, capsys):
    make_run(tmp_path)
    result = fetch(tmp_path, capsys, files={"metrics.jsonl": "metrics.jsonl"}, checksum=False)
    assert "sha1" not in result["files"]["metrics.jsonl"] and result["files"]["metrics.jsonl"]["size"] == 25


def test_the_refusal_texts_of_the_collect_step():
    """The sentences the pretrain role's play shows and the run report lists (not_fetched)."""
    run_dir = "/ws/r"
    assert fetch_refusal("/ws/r/metrics.jsonl", run_dir, real="/home/me/.ssh/id_rsa") == (
        "/ws/r/metrics.jsonl is not fetched: it leads to /home/me/.ssh/id_rsa, outside the run directory /ws/r.")
    assert fetch_refusal("/ws/r/other", run_dir, real="/ws/r-other/x") == (
        "/ws/r/other is not fetched: it leads to /ws/r-other/x, outside the run directory /ws/r.")
    assert fetch_refusal("/ws/r/logs/a.out", run_dir, real="/ws/r/logs/a.out", kind="file", size=300 * MIB,
                         max_bytes=256 * MIB, limit_name="pretrain_fetch_max_mb") == (
        "/ws/r/logs/a.out is not fetched: it has 300 MiB, more than pretrain_fetch_max_mb=256; it stays in the run "
        "directory.")
    assert fetch_refusal("/ws/r/logs/b.out", run_dir, real="/ws/r/logs/b.out", kind="file", size=1000,
                         max_bytes=256 * MIB, limit_name="pretrain_fetch_max_mb") is None
    assert fetch_refusal("/ws/r/x", run_dir + "/", real="/ws/r/x") is None
