"""source_tree: what the deploy stage copies of your training code, and its digest."""

import hashlib
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import source_tree


def make_source(root):
    """A training repository as people keep one: code, a config, caches, a venv, version control."""
    files = {
        "train.py": "import model\n", "model.py": "class GPT: pass\n", "configurator.py": "# flags\n",
        "config/small.py": "n_layer = 2\n", "data/prepare.py": "# bytes\n", "data/shard_000.bin": "x" * 100,
        ".git/HEAD": "ref: refs/heads/main\n", "__pycache__/model.cpython-311.pyc": "pyc",
        "model.pyc": "pyc", ".venv/bin/python": "", "env312/pyvenv.cfg": "home = /usr/bin\n",
        "env312/lib/site.py": "", ".ipynb_checkpoints/x.ipynb": "{}", "out/ckpt.pt": "weights",
    }
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    os.chmod(str(root / "train.py"), 0o755)
    return root


def test_version_control_caches_and_venvs_stay_out(tmp_path):
    src = make_source(tmp_path / "nanolm")
    tree = source_tree.source([str(src)])
    assert [f["path"] for f in tree["files"]] == [
        "config/small.py", "configurator.py", "data/prepare.py", "data/shard_000.bin", "model.py", "out/ckpt.pt",
        "train.py"]
    assert tree["dirs"] == ["config", "data", "out"] and tree["skipped"] == []
    train = [f for f in tree["files"] if f["path"] == "train.py"][0]
    assert train["mode"] == "0755" and train["src"] == str(src / "train.py") and train["size"] == 13
    assert train["checksum"] == hashlib.sha1(b"import model\n").hexdigest()


def test_your_patterns_leave_out_paths_and_names_and_say_so(tmp_path):
    src = make_source(tmp_path / "nanolm")
    tree = source_tree.source([str(src)], exclude=["data/*.bin", "out", "*.pt"])
    assert [f["path"] for f in tree["files"]] == [
        "config/small.py", "configurator.py", "data/prepare.py", "model.py", "train.py"]
    assert tree["skipped"] == ["data/shard_000.bin", "out/"] and tree["dirs"] == ["config", "data"]
    assert tree["size"] == sum(f["size"] for f in tree["files"])


def test_the_digest_changes_with_content_mode_and_names_only(tmp_path):
    src = make_source(tmp_path / "nanolm")
    first = source_tree.source([str(src)])["digest"]
    (src / "__pycache__" / "new.pyc").write_text("ignored")
    assert source_tree.source([str(src)])["digest"] == first  # what is not deployed does not count
    os.utime(str(src / "model.py"), (1, 1))
    assert source_tree.source([str(src)])["digest"] == first  # a touched file is the same file
    (src / "model.py").write_text("class GPT: n = 1\n")
    second = source_tree.source([str(src)])["digest"]
    assert second != first
    os.chmod(str(src / "model.py"), 0o755)
    assert source_tree.source([str(src)])["digest"] not in (first, second)


def test_files_go_side_by_side_under_their_names(tmp_path):
    a, b = tmp_path / "train.py", tmp_path / "sub" / "model.py"
    b.parent.mkdir()
    a.write_text("import model\n")
    b.write_text("class GPT: pass\n")
    tree = source_tree.source([str(a), str(b)])
    assert [f["path"] for f in tree["files"]] == ["train.py", "model.py"] and tree["dirs"] == []


def test_links_to_directories_are_not_followed(tmp_path):
    src = make_source(tmp_path / "nanolm")
    os.symlink(str(tmp_path), str(src / "loop"))
    os.symlink(str(src / "model.py"), str(src / "model_link.py"))
    paths = [f["path"] for f in source_tree.source([str(src)])["files"]]
    assert "model_link.py" in paths and not any(p.startswith("loop") for p in paths)


def test_a_directory_among_files_goes_under_its_own_name(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import helpers\n")
    helpers = make_source(tmp_path / "helpers")
    tree = source_tree.source([str(script), str(helpers)])
    paths = [f["path"] for f in tree["files"]]
    assert paths[0] == "train.py" and "helpers/config/small.py" in paths and "helpers/train.py" in paths
    assert not any("__pycache__" in p or ".git/" in p for p in paths)
    assert tree["dirs"][:2] == ["helpers", "helpers/config"]


def test_what_looks_like_a_secret_stays_out_and_is_listed(tmp_path):
    src = make_source(tmp_path / "nanolm")
    for rel in (".env", ".env.production", ".netrc", ".secrets/hf_token", ".ssh/id_ed25519", "certs/server.key",
                "config/.envrc", "id_rsa"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("secret")
    tree = source_tree.source([str(src)])
    assert tree["secrets"] == [".env", ".env.production", ".netrc", ".secrets/", ".ssh/", "certs/server.key",
                               "config/.envrc", "id_rsa"]
    assert not any("secret" == open(f["src"]).read() for f in tree["files"])
    # a file you name yourself is deployed, whatever it is called
    key = tmp_path / "deploy.key"
    key.write_text("not a secret")
    assert [f["path"] for f in source_tree.source([str(key)])["files"]] == ["deploy.key"]
