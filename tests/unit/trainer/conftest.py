"""Trainer tests: the package under test (roles/deploy/files), trainer_testing and the faults on sys.path."""

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2] / "roles" / "deploy" / "files"), str(HERE), str(HERE.parents[1] / "faults")]

import torch
from trainer_testing import REFERENCE_STEPS, TINY_MODEL, TINY_TRAINING, corpus_text, run_module

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A prepared byte-level corpus."""
    from trainer import prepare

    root = tmp_path_factory.mktemp("corpus")
    (root / "text").mkdir()
    (root / "text" / "code.py").write_text(corpus_text())
    assert prepare.main(["--input", str(root / "text"), "--out", str(root / "data")]) == 0
    return root / "data"


@pytest.fixture(scope="session")
def model_config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "tiny.json"
    path.write_text(json.dumps(TINY_MODEL))
    return path


@pytest.fixture(scope="session")
def train_args(data_dir, model_config_file):
    """Arguments for a tiny training run, less --out and --steps."""
    return ["--data", data_dir, "--config", model_config_file, *TINY_TRAINING]


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory, train_args):
    """An uninterrupted run of REFERENCE_STEPS steps; the others compare their losses to it."""
    out = tmp_path_factory.mktemp("reference") / "run"
    result = run_module("train", *train_args, "--out", out, "--steps", REFERENCE_STEPS,
                        "--checkpoint-interval", "4", "--keep-checkpoints", "2")
    assert result.returncode == 0, result.stderr
    return out, result
