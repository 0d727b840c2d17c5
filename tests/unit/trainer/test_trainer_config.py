import itertools
import json
import signal

import pytest
from trainer import train
from trainer.config import ConfigError, TrainConfig, parse_signal
from trainer.mfu import mfu, peak_bf16_flops
from trainer.train import build_parser, lr_at
from trainer_testing import run_module


def resolve(argv):
    from trainer.config import resolve_config

    return resolve_config(build_parser().parse_args(["--data", "d", "--out", "o", *argv]))


def test_flags_override_the_json_config_which_overrides_defaults(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"n_layer": 3, "batch_size": 5, "learning_rate": 0.01, "compile": True, "steps": 9}))
    cfg = resolve(["--config", str(config), "--batch-size", "7", "--no-compile"])
    assert (cfg.n_layer, cfg.batch_size, cfg.lr, cfg.compile, cfg.steps) == (3, 7, 0.01, False, 9)
    assert cfg.n_head == TrainConfig.n_head  # untouched knobs keep their defaults
    assert resolve(["--steps", "4", "--learning-rate", "0.5", "--min-lr", "0"]).lr == 0.5


@pytest.mark.parametrize("content, message", [
    ({"n_layers": 3}, "unknown key 'n_layers'"),
    ({"batch_size": "8"}, "batch_size must be int"),
    ({"dropout": True}, "dropout must be float"),
    ([1, 2], "must hold a JSON object"),
])
def test_bad_json_config_is_named(tmp_path, content, message):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(content))
    with pytest.raises(ConfigError, match=message):
        resolve(["--config", str(config), "--steps", "3"])


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--steps", "-5"], "--steps must be a positive integer"),
    ([], "--steps must be a positive integer"),
    (["--steps", "3", "--n-embd", "30", "--n-head", "4"], "--n-embd .* multiple of --n-head"),
    (["--steps", "3", "--min-lr", "1", "--lr", "0.1"], "--min-lr"),
    (["--steps", "3", "--dtype", "float16"], "--dtype"),
    (["--steps", "3", "--preempt-signal", "SIGUSR1"], "--preempt-signal SIGUSR1 is refused"),
    (["--steps", "3", "--preempt-signal", "SIGKILL"], "--preempt-signal SIGKILL cannot be caught"),
    (["--steps", "3", "--preempt-signal", "SIGNOPE"], "--preempt-signal 'SIGNOPE'"),
    # a signal's number in other scripts' digits (\u0661\u0662 is 12 to int(): SIGUSR2) or a superscript
    (["--steps", "3", "--preempt-signal", "\u0661\u0662"], "--preempt-signal '\u0661\u0662' is not a signal name"),
    (["--steps", "3", "--preempt-signal", "\uff11\uff15"], "--preempt-signal '\uff11\uff15' is not a signal name"),
    (["--steps", "3", "--preempt-signal", "\u00b2"], "--preempt-signal '\u00b2' is not a signal name"),
    (["--steps", "3", "--rendezvous-timeout", "0"], r"--rendezvous-timeout must be a positive integer \(got 0\)"),
    (["--steps", "3", "--rendezvous-timeout", "-5"], "--rendezvous-timeout must be a positive integer"),
])
def test_invalid_values_name_their_flag(argv, message):
    with pytest.raises(ConfigError, match=message):
        resolve(argv)


def test_rendezvous_timeout_flag():
    assert resolve(["--steps", "3"]).rendezvous_timeout == 300
    assert resolve(["--steps", "3", "--rendezvous-timeout", "20"]).rendezvous_timeout == 20


def test_signal_names():
    assert parse_signal("SIGUSR2") is signal.SIGUSR2
    assert parse_signal("usr2") is signal.SIGUSR2
    assert parse_signal(str(int(signal.SIGTERM))) is signal.SIGTERM


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--steps", "-1"], "--steps must be a positive integer"),
    (["--steps", "5", "--preempt-signal", "SIGUSR1"], "--preempt-signal SIGUSR1 is refused"),
    (["--steps", "5", "--rendezvous-timeout", "0"], "--rendezvous-timeout must be a positive integer (got 0)"),
])
def test_train_cli_rejects_bad_values_with_exit_2(capsys, data_dir, tmp_path, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--data", str(data_dir), "--out", str(tmp_path / "run"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_train_cli_names_a_missing_data_dir(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run"), "--steps", "3"])
    assert exit_info.value.code == 2
    assert f"--data {tmp_path / 'nowhere'}: no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit):
        train.main(["--data", str(tmp_path / "empty"), "--out", str(tmp_path / "run"), "--steps", "3"])
    assert "no meta.json; prepare it first" in capsys.readouterr().err


def test_train_cli_refuses_a_block_size_the_data_cannot_fill(capsys, data_dir, tmp_path):
    with pytest.raises(SystemExit):
        train.main(["--data", str(data_dir), "--out", str(tmp_path / "run"), "--steps", "3", "--block-size", "100000"])
    assert "lower --block-size" in capsys.readouterr().err


def test_bad_flag_exit_status_from_the_command_line(tmp_path):
    result = run_module("train", "--data", tmp_path, "--out", tmp_path / "run", "--steps", "0", timeout=60)
    assert result.returncode == 2
    assert "--steps must be a positive integer (got 0)" in result.stderr


def test_learning_rate_schedule():
    cfg = TrainConfig(steps=100, warmup=10, lr=1.0, min_lr=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(55, cfg) == pytest.approx(0.55)
    assert lr_at(100, cfg) == pytest.approx(0.1)
    decay = [lr_at(s, cfg) for s in range(10, 101)]
    assert all(a >= b for a, b in itertools.pairwise(decay))
    assert lr_at(0, TrainConfig(steps=5, warmup=0, lr=1.0, min_lr=0.0)) == 1.0


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12),
    ("NVIDIA GH200 480GB", 989e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA A100 80GB PCIe", 312e12),
    ("NVIDIA L40S", 362e12),
    ("NVIDIA L4", 121e12),
    ("NVIDIA A10", 125e12),
    ("NVIDIA A10G", None),  # not an A10: unknown rather than wrong
    ("NVIDIA H100", None),  # which H100 is unknown
    ("Tesla T4", None),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_peak_flops_table(name, peak):
    assert peak_bf16_flops(name) == peak


def test_mfu_is_achieved_over_peak_per_gpu():
    assert mfu(flops_per_token=6e9, tokens_per_s=100_000, world_size=4, peak_flops=1e15) == pytest.approx(0.15)
