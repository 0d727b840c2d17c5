import os
import stat

import pytest

from ansible_collections.llmtrain.slurm.plugins.modules import put_files
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import run


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_writes_missing_files_then_only_those_that_differ(tmp_path, capsys):
    dest = tmp_path / "run" / "scripts"
    files = {"node_check.sh": "#!/bin/sh\necho {{ not a template }}\n", "trainer/model.py": "x = 1\n"}
    first = run(put_files.main, dict(dest=str(dest), files=files), capsys)
    assert first["changed"] is True and first["written"] == ["node_check.sh", "trainer/model.py"]
    assert (dest / "node_check.sh").read_text() == files["node_check.sh"]
    assert mode_of(dest / "trainer" / "model.py") == 0o644

    again = run(put_files.main, dict(dest=str(dest), files=files), capsys)
    assert again["changed"] is False and again["written"] == [] and len(again["unchanged"]) == 2

    (dest / "trainer" / "model.py").write_text("x = 2\n")
    os.chmod(dest / "node_check.sh", 0o600)
    third = run(put_files.main, dict(dest=str(dest), files=files), capsys)
    assert third["written"] == ["node_check.sh", "trainer/model.py"]
    assert (dest / "trainer" / "model.py").read_text() == "x = 1\n" and mode_of(dest / "node_check.sh") == 0o644
    assert sorted(os.listdir(dest)) == ["node_check.sh", "trainer"]  # no temporary file left


def test_check_mode_writes_nothing_and_says_what_it_would(tmp_path, capsys):
    result = run(put_files.main, dict(dest=str(tmp_path / "d"), files={"a": "1"}, mode="0755"), capsys, check_mode=True)
    assert result["changed"] is True and result["written"] == ["a"]
    assert not (tmp_path / "d").exists()


def test_a_link_in_the_way_is_replaced_not_followed(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.write_text("theirs\n")
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "a.sh").symlink_to(outside)
    result = run(put_files.main, dict(dest=str(dest), files={"a.sh": "ours\n"}), capsys)
    assert result["written"] == ["a.sh"]
    assert outside.read_text() == "theirs\n" and not (dest / "a.sh").is_symlink()
    assert (dest / "a.sh").read_text() == "ours\n"


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/../b", "a//b", ""])
def test_names_outside_dest_are_refused_before_anything_is_written(tmp_path, capsys, name):
    result = run(put_files.main, dict(dest=str(tmp_path / "d"), files={name: "x", "ok": "y"}), capsys)
    assert result["failed"] is True and "each name is a path inside dest" in result["msg"] and repr(name) in result["msg"]
    assert not (tmp_path / "d").exists()


def test_bad_mode_and_a_file_as_dest_are_clear_errors(tmp_path, capsys):
    result = run(put_files.main, dict(dest=str(tmp_path), files={"a": "x"}, mode="rw-r--r--"), capsys)
    assert result["failed"] is True and "mode='rw-r--r--'" in result["msg"]
    (tmp_path / "f").write_text("")
    result = run(put_files.main, dict(dest=str(tmp_path / "f"), files={"a": "x"}), capsys)
    assert result["failed"] is True and "is not a directory" in result["msg"]


def test_prune_removes_the_matching_files_it_was_not_given_and_nothing_else(tmp_path, capsys):
    dest = tmp_path / "env"
    dest.mkdir()
    for name in ("cluster.env", "gone-node.env", "secrets.env", "notes.txt"):
        (dest / name).write_text("old\n")
    (dest / "sub.env").mkdir()
    outside = tmp_path / "outside.env"
    outside.write_text("theirs\n")
    (dest / "link.env").symlink_to(outside)
    args = dict(dest=str(dest), files={"cluster.env": "new\n", "n1.env": "x\n"}, prune="*.env", keep=["secrets.env"])

    checked = run(put_files.main, args, capsys, check_mode=True)
    assert checked["changed"] is True and checked["removed"] == ["gone-node.env"]
    assert (dest / "gone-node.env").exists()

    result = run(put_files.main, args, capsys)
    assert result["removed"] == ["gone-node.env"] and result["written"] == ["cluster.env", "n1.env"]
    assert sorted(os.listdir(dest)) == ["cluster.env", "link.env", "n1.env", "notes.txt", "secrets.env", "sub.env"]
    assert outside.read_text() == "theirs\n" and (dest / "secrets.env").read_text() == "old\n"

    again = run(put_files.main, args, capsys)
    assert again["changed"] is False and again["removed"] == []


def test_prune_does_not_follow_a_linked_dest_and_refuses_a_path_as_pattern(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    (real / "old.env").write_text("old\n")
    (tmp_path / "env").symlink_to(real)
    result = run(put_files.main, dict(dest=str(tmp_path / "env"), files={}, prune="*.env"), capsys)
    assert result["failed"] is True and "it is a link, not followed" in result["msg"]
    assert (real / "old.env").exists()
    result = run(put_files.main, dict(dest=str(real), files={"a.env": "x"}, prune="../*.env"), capsys)
    assert result["failed"] is True and "prune='../*.env'" in result["msg"] and not (real / "a.env").exists()


def test_private_files_are_written_for_their_owner_alone_in_the_same_call(tmp_path, capsys):
    dest = tmp_path / "env"
    files = {"cluster.env": "export A=1\n", "secrets.env": "export KEY=s3cret\n"}
    first = run(put_files.main, dict(dest=str(dest), files=files, private=["secrets.env"], prune="*.env"), capsys)
    assert sorted(first["written"]) == ["cluster.env", "secrets.env"]
    assert mode_of(dest / "cluster.env") == 0o644 and mode_of(dest / "secrets.env") == 0o600
    again = run(put_files.main, dict(dest=str(dest), files=files, private=["secrets.env"], prune="*.env"), capsys)
    assert again["changed"] is False
    # a secret no longer asked for goes
    gone = run(put_files.main, dict(dest=str(dest), files={"cluster.env": files["cluster.env"]}, private=["secrets.env"],
                                    prune="*.env"), capsys)
    assert gone["removed"] == ["secrets.env"] and sorted(os.listdir(dest)) == ["cluster.env"]
