"""What the loop chooses for a GPU, pinned on the CPU: bfloat16 only where it is native, this run's
optimizer options on resume, torch.compile around DDP, and the stop vote of the ranks."""

import json
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from trainer import train
from trainer.checkpoint import WRAPPER_PREFIXES, list_checkpoints, read_state
from trainer.clock import WaitClock
from trainer.config import resolve_config
from trainer.distributed import Distributed
from trainer.prepare import read_meta
from trainer.state import load_optimizer_state
from trainer.train import EXIT_PREEMPTED, Training, build_parser, trains_in_bf16
from trainer_testing import FILES_DIR, TINY_TRAINING, free_port, losses, read_metrics, trainer_env


@pytest.fixture(autouse=True)
def single_process(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


class Stop:
    signum = 0


def config(data_dir, model_config_file, out, *argv):
    args = build_parser().parse_args(["--data", str(data_dir), "--config", str(model_config_file), *TINY_TRAINING,
                                      "--out", str(out), *map(str, argv)])
    return resolve_config(args)


def run_here(data_dir, model_config_file, out, *argv, stop=None):
    """train() of one process, as main() calls it (without main's signal handlers)."""
    cfg = config(data_dir, model_config_file, out, *argv)
    return train.train(cfg, str(data_dir), str(out), read_meta(data_dir), Distributed(cfg.rendezvous_timeout),
                       stop or Stop())


def checkpoint_steps(run_dir):
    return [s for s, _path in list_checkpoints(run_dir / "checkpoints")]


# bfloat16

def gpu(native):
    """torch.cuda.is_bf16_supported of a GPU with native bfloat16, or of one that emulates it (V100, T4)."""
    calls = []

    def is_bf16_supported(including_emulation=True):
        calls.append(including_emulation)
        return native or including_emulation

    return is_bf16_supported, calls


@pytest.mark.parametrize("native", [True, False])
def test_bf16_is_chosen_only_where_the_gpu_has_it_natively(monkeypatch, native):
    is_bf16_supported, calls = gpu(native)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    cuda = torch.device("cuda", 0)
    assert torch.cuda.is_bf16_supported() is True  # torch's default counts emulation
    assert trains_in_bf16(cuda, "auto") is native
    assert trains_in_bf16(cuda, "bfloat16") is native
    assert calls[1:] == [False, False]
    assert trains_in_bf16(cuda, "float32") is False
    assert trains_in_bf16(torch.device("cpu"), "bfloat16") is False
    assert len(calls) == 3  # float32 and the CPU do not ask


# optimizer options on resume

def optimizer(**options):
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3, **options)
    return layer, opt


def take_a_step(layer, opt):
    layer(torch.ones(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_loading_optimizer_state_keeps_this_runs_options_and_names_the_differences():
    saved_layer, saved_opt = optimizer(weight_decay=0.1, betas=(0.8, 0.9), foreach=False)
    take_a_step(saved_layer, saved_opt)
    saved = saved_opt.state_dict()
    del saved["param_groups"][0]["decoupled_weight_decay"]  # as torch before 2.6 wrote AdamW's state
    layer, opt = optimizer(weight_decay=0.05, fused=True)
    layer.load_state_dict(saved_layer.state_dict())

    changed = load_optimizer_state(opt, saved)
    group = opt.param_groups[0]
    assert (group["weight_decay"], group["betas"], group["fused"], group["foreach"]) == (0.05, (0.9, 0.999), True, None)
    assert group["decoupled_weight_decay"] is True  # AdamW, not Adam with L2
    assert sorted(changed) == ["betas (0.9, 0.999) (the checkpoint had (0.8, 0.9))",
                               "decoupled_weight_decay True (the checkpoint did not record it)",
                               "foreach None (the checkpoint had False)",
                               "fused True (the checkpoint had None)",
                               "weight_decay 0.05 (the checkpoint had 0.1)"]
    for p, saved_p in zip(layer.parameters(), saved_layer.parameters()):
        state, saved_state = opt.state[p], saved_opt.state[saved_p]
        assert torch.equal(state["exp_avg"], saved_state["exp_avg"])
        assert state["step"].dtype == torch.float32 and float(state["step"]) == 1.0  # as the fused kernel keeps it
    take_a_step(layer, opt)
    assert float(opt.state[next(layer.parameters())]["step"]) == 2.0


def test_the_same_options_load_silently():
    saved_layer, saved_opt = optimizer(weight_decay=0.1, foreach=True)
    take_a_step(saved_layer, saved_opt)
    _layer, opt = optimizer(weight_decay=0.1, foreach=True)
    opt.param_groups[0]["lr"] = 0.5  # the schedule sets it at every step: not an option to compare
    assert load_optimizer_state(opt, saved_opt.state_dict()) == []


def test_a_resumed_run_uses_the_current_weight_decay_and_says_so(monkeypatch, capsys, data_dir, model_config_file,
                                                                 tmp_path):
    out = tmp_path / "run"
    assert run_here(data_dir, model_config_file, out, "--steps", 2) == 0  # weight decay 0.1, the default
    assert "resuming with" not in capsys.readouterr().out
    runs = []

    class Recorded(Training):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(train, "Training", Recorded)
    assert run_here(data_dir, model_config_file, out, "--steps", 4, "--weight-decay", 0.05) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "train: resuming with weight_decay 0.05 (the checkpoint had 0.1)" in lines
    assert [g["weight_decay"] for g in runs[0].optimizer.param_groups] == [0.05, 0.0]  # matrices; biases, gains
    saved = read_state(out / "checkpoints" / "step_000004.pt")["optimizer"]
    assert [g["weight_decay"] for g in saved["param_groups"]] == [0.05, 0.0]

    assert run_here(data_dir, model_config_file, out, "--steps", 6, "--weight-decay", 0.05) == 0
    assert "resuming with" not in capsys.readouterr().out


# torch.compile around DDP

@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # emitted by importing torch.compile's machinery
def test_compile_wraps_ddp_evaluation_uses_the_raw_model_and_checkpoints_have_plain_keys(
        monkeypatch, data_dir, model_config_file, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    out = tmp_path / "run"
    cfg = config(data_dir, model_config_file, out, "--steps", 2, "--compile")
    dist = Distributed(cfg.rendezvous_timeout)
    try:
        assert dist.active
        _path, state = train.resume(out, dist)
        run = Training(cfg, str(data_dir), out, read_meta(data_dir), dist, state, None)
        assert isinstance(run.model, torch._dynamo.eval_frame.OptimizedModule)  # lazy: nothing compiled yet
        assert isinstance(run.model._orig_mod, DDP) and run.model._orig_mod.module is run.raw_model
        assert run.eval_model is run.raw_model
        run.checkpoint(0)
    finally:
        dist.close()
    keys = read_state(out / "checkpoints" / "step_000000.pt")["model"]
    assert keys and not any(k.startswith(WRAPPER_PREFIXES) for k in keys)


# stopping

class StopDuring:
    """A stop flag raised during step `index` (0-based), as a signal handler raises it."""

    def __init__(self, monkeypatch, index, signum=signal.SIGUSR2):
        self.signum = 0
        step = Training.step

        def step_and_signal(training, i):
            loss = step(training, i)
            if i == index:
                self.signum = signum
            return loss

        monkeypatch.setattr(Training, "step", step_and_signal)


def test_a_stop_in_one_process_checkpoints_the_step_it_stopped_after_and_exits_75(monkeypatch, data_dir,
                                                                                  model_config_file, tmp_path):
    out = tmp_path / "run"
    stop = StopDuring(monkeypatch, index=2)
    assert run_here(data_dir, model_config_file, out, "--steps", 8, "--checkpoint-interval", 1000,
                    stop=stop) == EXIT_PREEMPTED
    assert json.loads((out / "PREEMPTED").read_text())["step"] == 3  # alone, no vote: the step the flag came in
    assert checkpoint_steps(out) == [3]
    records = read_metrics(out)
    assert sorted(losses(records)) == [1, 2, 3]
    assert records[-1] == {"event": "preempted", "step": 3, "signal": "SIGUSR2"}


def test_a_stop_during_the_last_step_of_one_process_finishes_the_run(monkeypatch, data_dir, model_config_file,
                                                                     tmp_path):
    out = tmp_path / "run"
    assert run_here(data_dir, model_config_file, out, "--steps", 4, stop=StopDuring(monkeypatch, index=3)) == 0
    assert not (out / "PREEMPTED").exists() and checkpoint_steps(out) == [4]
    assert read_metrics(out)[-1]["event"] == "done"


RANK_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys, time
    from trainer import train

    rank, signal_index = int(os.environ["RANK"]), int(os.environ["TEST_SIGNAL_INDEX"])
    ran = []
    step = train.Training.step

    def step_and_signal(training, index):
        if rank == 0:
            time.sleep(0.05)  # rank 0 lags behind: the ranks do not reach each vote together
        loss = step(training, index)
        ran.append(index + 1)
        if rank == 1 and index == signal_index:
            os.kill(os.getpid(), signal.SIGUSR2)  # to this rank only, as a scheduler may deliver it
        return loss

    train.Training.step = step_and_signal
    status = train.main(sys.argv[1:])
    with open(os.path.join(os.environ["TEST_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump({"status": status, "steps": ran}, f)
    from trainer.distributed import exit_now
    exit_now(status)
""")

DDP_STEPS = 8


@pytest.fixture(scope="module")
def rank_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("script") / "signal_one_rank.py"
    path.write_text(RANK_SCRIPT)
    return path


def two_ranks_signalled(rank_script, train_args, out, signal_index):
    """Two gloo ranks; rank 1 raises SIGUSR2 at itself after step signal_index (0-based); {rank: its report}."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), str(rank_script), *map(str, train_args), "--batch-size", "2",
            "--checkpoint-interval", "1000", "--eval-interval", "0", "--out", str(out / "run"), "--steps", str(DDP_STEPS)]
    result = subprocess.run(argv, cwd=FILES_DIR, env=trainer_env(TEST_SIGNAL_INDEX=signal_index, TEST_OUT=out),
                            check=False, capture_output=True, text=True, timeout=120)
    reports = {rank: json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)
               if (out / f"rank{rank}.json").exists()}
    assert len(reports) == 2, result.stdout + result.stderr
    return reports


def test_a_stop_on_one_rank_stops_every_rank_after_the_same_step(rank_script, train_args, tmp_path):
    reports = two_ranks_signalled(rank_script, train_args, tmp_path, signal_index=2)
    # the vote started after step 3 is read after step 4, on both ranks
    assert reports[0] == reports[1] == {"status": EXIT_PREEMPTED, "steps": [1, 2, 3, 4]}
    run = tmp_path / "run"
    assert json.loads((run / "PREEMPTED").read_text())["step"] == 4  # written by rank 0, which got no signal
    assert checkpoint_steps(run) == [4]
    assert read_metrics(run)[-1] == {"event": "preempted", "step": 4, "signal": "SIGUSR2"}


def test_a_stop_voted_for_before_the_last_step_lets_every_rank_finish(rank_script, train_args, tmp_path):
    reports = two_ranks_signalled(rank_script, train_args, tmp_path, signal_index=DDP_STEPS - 2)
    assert reports[0] == reports[1] == {"status": 0, "steps": list(range(1, DDP_STEPS + 1))}
    run = tmp_path / "run"
    assert not (run / "PREEMPTED").exists() and checkpoint_steps(run) == [DDP_STEPS]
    assert read_metrics(run)[-1]["event"] == "done"


class FakeEvent:
    """torch.cuda.Event on the CPU: record() notes a clock that advances 5 ms per record."""
    clock = 0.0
    made = []

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.at = None
        FakeEvent.made.append(self)

    def record(self):
        FakeEvent.clock += 5.0
        self.at = FakeEvent.clock

    def elapsed_time(self, other):
        return other.at - self.at

    def synchronize(self):
        assert self.at is not None


def test_the_wait_clock_on_cuda_times_from_the_last_gradient_to_the_reduced_gradients(monkeypatch):
    """On CUDA the two moments are events on the stream: the last hook's record wins, a span per
    step is read at take(), and a backward that reaches no parameter adds nothing."""
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    clock = WaitClock(model.parameters(), torch.device("cuda", 0))
    for _step in range(2):
        clock.arm()
        model(torch.ones(2, 3)).sum().backward()  # four parameters: four records of the ready event
        clock.reduced()  # one more record: 5 ms after the last gradient
    model(torch.ones(2, 3)).sum().backward()  # not armed: the hooks record nothing
    clock.arm()
    clock.reduced()  # armed, but no gradient was computed: no span
    assert len(clock.spans) == 2
    assert clock.take() == pytest.approx(0.010) and clock.take() == 0.0


# the process group

@pytest.mark.parametrize("cuda", [True, False])
def test_an_nccl_rank_names_its_gpu_to_the_process_group(monkeypatch, cuda):
    """torch guesses a rank's GPU from its global rank when init_process_group is not told (and warns,
    on every start, that the guess can hang); NCCL ranks name theirs, gloo ranks have none to name."""
    from trainer import distributed
    calls = []
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))

    def init_process_group(backend=None, init_method=None, device_id=None):  # torch's keywords (2.3 and later)
        given = dict(backend=backend, init_method=init_method, device_id=device_id)
        calls.append(("init", {k: v for k, v in given.items() if v is not None}))

    monkeypatch.setattr(distributed.torch_dist, "init_process_group", init_process_group)
    monkeypatch.setattr(distributed.torch_dist, "barrier", lambda: calls.append(("barrier",)))
    Distributed(rendezvous_timeout=5)
    expected = {"backend": "nccl", "init_method": "env://", "device_id": torch.device("cuda", 1)} if cuda else \
        {"backend": "gloo", "init_method": "env://"}
    assert calls == ([("set_device", 1)] if cuda else []) + [("init", expected), ("barrier",)]


# --attention: the kernel tried first

def kernel_order():
    from torch.nn.attention import _cur_sdpa_kernel_backends  # pylint: disable=import-outside-toplevel
    return [backend.name for backend in _cur_sdpa_kernel_backends(with_priority=True)]


@pytest.mark.parametrize("choice, first", [("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"),
                                           ("math", "MATH")])
def test_attention_puts_its_kernel_first_only_while_entered_and_can_be_entered_again(choice, first):
    from trainer.model import AttentionKernels, attention_kernels_problem  # pylint: disable=import-outside-toplevel
    before = kernel_order()
    assert attention_kernels_problem(choice) is None
    kernels = AttentionKernels(choice)
    for _use in range(2):  # the trainer enters the same object at every step
        with kernels:
            order = kernel_order()
            assert order[0] == first
            # the others stay enabled, in torch's own order
            assert order[1:] == [name for name in before if name in order[1:]]
            assert {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION"} <= set(order)
        assert kernel_order() == before
    with AttentionKernels("auto"):
        assert kernel_order() == before


def test_attention_auto_needs_nothing_and_an_unknown_kernel_is_refused_by_name(data_dir, model_config_file, tmp_path):
    from trainer.config import ConfigError  # pylint: disable=import-outside-toplevel
    from trainer.model import attention_kernels_problem  # pylint: disable=import-outside-toplevel
    assert attention_kernels_problem("auto") is None
    assert "--attention" in attention_kernels_problem("fast")
    with pytest.raises(ConfigError, match=r"--attention must be one of auto, flash, efficient, math, cudnn \(got 'fast'\)"):
        config(data_dir, model_config_file, tmp_path / "run", "--steps", 2, "--attention", "fast")


def test_a_run_with_another_kernel_first_trains_as_the_default_one_does(data_dir, model_config_file, tmp_path):
    """The option reaches every forward without changing the run: on this CPU torch keeps its own
    kernel whatever the order, so the losses are the default run's, exactly."""
    assert run_here(data_dir, model_config_file, tmp_path / "auto", "--steps", 3) == 0
    assert run_here(data_dir, model_config_file, tmp_path / "cudnn", "--steps", 3, "--attention", "cudnn") == 0
    auto, cudnn_first = (losses(read_metrics(tmp_path / name)) for name in ("auto", "cudnn"))
    assert len(auto) == 3
    assert cudnn_first == auto
