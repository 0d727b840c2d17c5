import os

from ansible_collections.llmtrain.slurm.plugins.modules import read_files
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import run


def test_reads_what_is_there_and_lists_what_is_missing(tmp_path, capsys):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "cluster.env").write_text("export NCCL_DEBUG=WARN\n")
    (tmp_path / "facts.json").write_text('{"run_name": "tiny", "note": "\u00e9"}\n')
    result = run(read_files.main, dict(src=str(tmp_path), names=["facts.json", "bad_nodes.json", "env/cluster.env"]),
                 capsys)
    assert result["changed"] is False
    assert result["files"] == {"facts.json": '{"run_name": "tiny", "note": "\u00e9"}\n',
                               "env/cluster.env": "export NCCL_DEBUG=WARN\n"}
    assert result["missing"] == ["bad_nodes.json"] and result["errors"] == {}


def test_what_cannot_be_read_is_named_and_does_not_fail_the_task(tmp_path, capsys):
    (tmp_path / "big.json").write_text("x" * 101)
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "a_dir").mkdir()
    os.mkfifo(str(tmp_path / "a_fifo"))  # never opened: that would wait for a writer
    (tmp_path / "small").write_text("ok")
    result = run(read_files.main, dict(src=str(tmp_path), names=["big.json", "binary", "a_dir", "a_fifo", "small"],
                                       max_bytes=100), capsys)
    assert result.get("failed") is None
    assert result["files"] == {"small": "ok"} and result["missing"] == []
    assert result["errors"] == {"big.json": "101 bytes, more than max_bytes=100", "binary": "not UTF-8 text",
                                "a_dir": "not a regular file", "a_fifo": "not a regular file"}
    if os.geteuid() != 0:  # root reads it anyway
        (tmp_path / "small").chmod(0)
        again = run(read_files.main, dict(src=str(tmp_path), names=["small"]), capsys)
        assert again["errors"] == {"small": "permission denied"}


def test_a_name_outside_src_is_refused(tmp_path, capsys):
    result = run(read_files.main, dict(src=str(tmp_path / "run"), names=["../secrets.env", "/etc/passwd"]), capsys)
    assert result["failed"] is True
    assert "'../secrets.env' must not contain '..'" in result["msg"] and "'/etc/passwd' must be a relative path" in result["msg"]


def test_a_link_is_not_followed(tmp_path, capsys):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file")
    (tmp_path / "run").mkdir()
    os.symlink(str(outside), str(tmp_path / "run" / "samples.txt"))
    result = run(read_files.main, dict(src=str(tmp_path / "run"), names=["samples.txt"]), capsys)
    assert result["files"] == {} and result["errors"] == {"samples.txt": "a link, not followed"}


def test_the_event_files_where_the_script_runs_and_in_the_run_directory_are_listed(tmp_path, capsys):
    run_dir = tmp_path / "run"
    inside = run_dir / "src" / "lightning_logs" / "version_7"
    outside = tmp_path / "elsewhere" / "runs" / "Dec05_host"
    for directory in (inside, outside):
        directory.mkdir(parents=True)
        (directory / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    (inside / "metrics.csv").write_text("step,train_loss\n")
    os.utime(str(inside / "metrics.csv"), (1000, 1000))
    dirs = [str(tmp_path / "elsewhere"), str(run_dir)]
    result = run(read_files.main, dict(src=str(run_dir), names=[], event_dirs=dirs), capsys)
    assert result["event_files"] == ["src/lightning_logs/version_7/metrics.csv",
                                     "src/lightning_logs/version_7/events.out.tfevents.1.host.1.0"]
    assert result["event_files_outside"] == [str(outside / "events.out.tfevents.1.host.1.0")]
    assert run(read_files.main, dict(src=str(run_dir), names=[]), capsys)["event_files"] == []


def test_list_dir_lists_the_checkpoints_as_find_would_and_a_missing_one_as_none(tmp_path, capsys):
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "step_000100").mkdir(parents=True)
    (checkpoints / "step_000050.pt").write_text("x")
    (checkpoints / ".step_000150.pt.tmp").write_text("being written")
    os.symlink("step_000050.pt", str(checkpoints / "latest.pt"))
    result = run(read_files.main, dict(src=str(tmp_path), names=[], list_dir="checkpoints"), capsys)
    listed = {os.path.basename(e["path"]): e["mtime"] for e in result["entries"]}
    assert sorted(listed) == ["latest.pt", "step_000050.pt", "step_000100"]
    assert listed["step_000050.pt"] == os.stat(str(checkpoints / "step_000050.pt")).st_mtime
    assert result["errors"] == {}
    none = run(read_files.main, dict(src=str(tmp_path / "new"), names=[], list_dir="checkpoints"), capsys)
    assert none["entries"] == [] and none["errors"] == {}
    refused = run(read_files.main, dict(src=str(tmp_path), names=[], list_dir="../elsewhere"), capsys)
    assert refused["failed"] and "../elsewhere" in refused["msg"]
