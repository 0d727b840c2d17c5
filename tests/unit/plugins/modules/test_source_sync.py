"""source_sync: a redeploy of your training code removes only what an earlier deploy wrote,
checked on real directories: the source as the source_tree lookup lists it, the directory it
runs in as a nanoGPT-style script leaves it (out/ckpt.pt, prepared data, Hydra's outputs)."""

import json
import os
import stat

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import source_tree
from ansible_collections.llmtrain.slurm.plugins.modules import source_sync
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import run


def write(root, files, mode=None):
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        if mode is not None:
            os.chmod(str(path), mode)


def mode_of(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


@pytest.fixture
def umask_002():
    old = os.umask(0o002)
    yield
    os.umask(old)


class Deploy:
    """The deploy stage's three steps against dest: source_sync, a copy of its to_copy, the manifest."""

    def __init__(self, tmp_path, capsys):
        self.source, self.dest = tmp_path / "nanolm", tmp_path / "run" / "src"
        self.manifest = tmp_path / "run" / "deployed.json"
        self.dest.mkdir(parents=True)
        self.capsys = capsys

    def __call__(self, exclude=(), check_mode=False, expect_failure=False):
        tree = source_tree.source([str(self.source)], exclude)
        result = run(source_sync.main, dict(dest=str(self.dest) + "/", manifest=str(self.manifest), files=tree["files"],
                                            dirs=tree["dirs"], keep=list(exclude)), self.capsys,
                     check_mode=check_mode)
        assert bool(result.get("failed")) == expect_failure, result
        if expect_failure or check_mode:
            return result
        for entry in result["to_copy"]:
            target = self.dest / entry["path"]
            with open(entry["src"], "rb") as src, open(str(target), "wb") as out:
                out.write(src.read())
            os.chmod(str(target), int(entry["mode"], 8))
        self.manifest.write_text(result["manifest"])
        return result


@pytest.fixture
def deploy(tmp_path, capsys):
    return Deploy(tmp_path, capsys)


def test_a_redeploy_keeps_what_the_script_wrote_beside_its_code(deploy):
    write(deploy.source, {"train.py": "import model\n", "model.py": "class GPT: pass\n", "config/tiny.py": "n = 1\n",
                          "data/prepare.py": "# bytes\n"})
    first = deploy(exclude=["data/*.bin"])
    assert sorted(e["path"] for e in first["to_copy"]) == ["config/tiny.py", "data/prepare.py", "model.py", "train.py"]
    # what a nanoGPT-style script writes in its working directory
    write(deploy.dest, {"out/ckpt.pt": "weights", "data/shakespeare/train.bin": "tokens", "data/train.bin": "x",
                        "outputs/2026-12-02/log.txt": "hydra"})
    again = deploy(exclude=["data/*.bin"])
    assert again["changed"] is False and again["to_copy"] == [] and again["removed"] == []
    # a file dropped from the source goes; so does a directory of the source that is now empty
    os.unlink(str(deploy.source / "config" / "tiny.py"))
    os.rmdir(str(deploy.source / "config"))
    (deploy.source / "model.py").write_text("class GPT: n = 2\n")
    third = deploy(exclude=["data/*.bin"])
    assert third["removed"] == ["config/tiny.py"] and third["removed_dirs"] == ["config"]
    assert [e["path"] for e in third["to_copy"]] == ["model.py"]
    for kept in ("out/ckpt.pt", "data/shakespeare/train.bin", "data/train.bin", "outputs/2026-12-02/log.txt"):
        assert (deploy.dest / kept).is_file(), kept


def test_a_deployed_file_that_changed_since_is_kept_with_a_warning(deploy):
    write(deploy.source, {"train.py": "x\n", "notes.txt": "mine\n"})
    deploy()
    (deploy.dest / "notes.txt").write_text("the job added to it\n")
    os.unlink(str(deploy.source / "notes.txt"))
    result = deploy()
    assert result["removed"] == [] and (deploy.dest / "notes.txt").read_text() == "the job added to it\n"
    assert result["kept"] == ["%s/notes.txt changed since it was deployed and is no longer in run_source_dir: it "
                              "is left as it is" % deploy.dest]


def test_what_the_excludes_match_is_never_removed_even_if_deployed_before(deploy):
    write(deploy.source, {"train.py": "x\n", "data/shard.bin": "tokens"})
    deploy()
    assert (deploy.dest / "data" / "shard.bin").is_file()
    result = deploy(exclude=["data/*"])  # now left out: the copy there may be the job's to use
    assert result["removed"] == [] and result["removed_dirs"] == [] and (deploy.dest / "data" / "shard.bin").is_file()


def test_without_a_manifest_nothing_is_removed(deploy):
    """A run deployed by an earlier release: what is there may be the job's."""
    write(deploy.dest, {"train.py": "old\n", "stale.py": "old\n", "out/ckpt.pt": "w"})
    write(deploy.source, {"train.py": "new\n"})
    result = deploy()
    assert result["removed"] == [] and [e["path"] for e in result["to_copy"]] == ["train.py"]
    assert sorted(os.listdir(str(deploy.dest))) == ["out", "stale.py", "train.py"]
    assert json.loads(deploy.manifest.read_text())["files"] == {"train.py": source_tree.sha1(str(deploy.source / "train.py"))}


def test_something_of_the_jobs_in_the_way_fails_naming_it_and_nothing_is_removed(deploy):
    write(deploy.source, {"train.py": "x\n"})
    deploy()
    write(deploy.dest, {"out/ckpt.pt": "weights"})
    write(deploy.source, {"out": "now a file of the source\n"})
    result = deploy(expect_failure=True)
    assert "%s is a directory where run_source_dir has the file out" % (deploy.dest / "out") in result["msg"]
    assert (deploy.dest / "out" / "ckpt.pt").is_file()


def test_no_deployed_file_or_directory_is_writable_by_group_or_others(deploy, umask_002):
    """Under umask 002 on both sides (the controller's checkout and the login node)."""
    write(deploy.source, {"train.py": "x\n", "pkg/model.py": "y\n", "run.sh": "#!/bin/sh\n"}, mode=0o664)
    os.chmod(str(deploy.source / "run.sh"), 0o775)
    os.chmod(str(deploy.source / "pkg"), 0o775)
    result = deploy()
    assert {e["path"]: e["mode"] for e in result["to_copy"]} == {"pkg/model.py": "0644", "run.sh": "0755",
                                                                 "train.py": "0644"}
    assert mode_of(deploy.dest / "pkg") == 0o755
    assert deploy()["changed"] is False


def test_a_trailing_slash_changes_nothing_and_check_mode_touches_nothing(deploy):
    write(deploy.source, {"train.py": "x\n", "gone.py": "y\n"})
    deploy()
    os.unlink(str(deploy.source / "gone.py"))
    planned = deploy(check_mode=True)
    assert planned["removed"] == ["gone.py"] and (deploy.dest / "gone.py").is_file()
    assert deploy()["removed"] == ["gone.py"] and not (deploy.dest / "gone.py").exists()


def test_a_removal_never_follows_a_link_out_of_dest(deploy, tmp_path):
    write(deploy.source, {"train.py": "x\n", "sub/a.py": "a\n"})
    deploy()
    outside = tmp_path / "outside"
    write(outside, {"a.py": "a\n"})  # the same content as the deployed file
    os.unlink(str(deploy.dest / "sub" / "a.py"))
    os.rmdir(str(deploy.dest / "sub"))
    os.symlink(str(outside), str(deploy.dest / "sub"))
    os.unlink(str(deploy.source / "sub" / "a.py"))
    os.rmdir(str(deploy.source / "sub"))
    result = deploy()
    assert result["removed"] == [] and (outside / "a.py").is_file()
