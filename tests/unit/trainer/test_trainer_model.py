import math

import numpy as np
import pytest
import torch
from trainer.data import TRAIN_STREAM, window_starts, windows
from trainer.model import GPT, GPTConfig
from trainer_testing import corpus_text


def tiny(**overrides):
    cfg = {"vocab_size": 256, "block_size": 32, "n_layer": 2, "n_head": 2, "n_embd": 32, "dropout": 0.0}
    cfg.update(overrides)
    torch.manual_seed(0)
    return GPT(GPTConfig(**cfg))


def expected_params(V, T, L, C):
    per_block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C)
    return V * C + T * C + L * per_block + 2 * C  # token table shared with lm_head, then positions, blocks, ln_f


def test_forward_shapes_and_initial_loss():
    model = tiny()
    idx, targets = torch.randint(0, 256, (2, 3, 32))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 32, 256)
    assert loss.shape == ()
    # a fresh model predicts nearly uniformly over 256 bytes
    assert abs(loss.item() - math.log(256)) < 0.3
    logits, loss = model(idx[:, :5])
    assert logits.shape == (3, 5, 256) and loss is None


def test_parameter_count_and_weight_tying():
    model = tiny()
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.num_params() == expected_params(256, 32, 2, 32)
    assert model.num_params(non_embedding=True) == expected_params(256, 32, 2, 32) - 32 * 32


def test_without_bias_only_weights_remain_and_the_optimizer_is_fused_on_cpu():
    model = GPT(GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=2, n_embd=32, bias=False))
    names = [name for name, _p in model.named_parameters()]
    assert not [name for name in names if name.endswith(".bias")]
    # biases: per block 3 Linear (qkv 3C, proj C, fc 4C, mlp proj C) + 2 LayerNorm (2C), and ln_f (C)
    assert tiny().num_params() - model.num_params() == 2 * (3 * 32 + 32 + 4 * 32 + 32 + 2 * 32) + 32
    optimizer = model.configure_optimizer(weight_decay=0.1, lr=1e-3)
    # torch 2.4 and later: the fused kernel on the CPU as on CUDA
    assert all(group["fused"] and not group["foreach"] for group in optimizer.param_groups)


def test_gpt2_small_shape_has_124m_parameters():
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768))
    assert model.num_params() == 124_439_808


def test_attention_is_causal():
    model = tiny().eval()
    idx = torch.randint(0, 256, (1, 20))
    changed = idx.clone()
    changed[0, 12:] = (changed[0, 12:] + 1) % 256
    with torch.no_grad():
        a, _loss = model(idx)
        b, _loss = model(changed)
    assert torch.equal(a[0, :12], b[0, :12])
    assert not torch.allclose(a[0, 12:], b[0, 12:])


def test_longer_than_block_size_is_refused():
    with pytest.raises(ValueError, match="block_size"):
        tiny()(torch.zeros(1, 33, dtype=torch.long))


def test_loss_falls_on_repetitive_text():
    tokens = np.frombuffer(corpus_text().encode(), dtype=np.uint8)
    model = tiny()
    optimizer = model.configure_optimizer(weight_decay=0.1, lr=3e-3)
    first = last = None
    for step in range(80):
        x, y = windows(tokens, window_starts(len(tokens), 32, 0, TRAIN_STREAM, step, (8,)), 32)
        _logits, loss = model(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        first = loss.item() if first is None else first
        last = loss.item()
    assert first > 5.0
    assert last < 2.0


def test_generate_greedy_is_top_k_1_and_seeded_sampling_repeats():
    model = tiny().eval()
    idx = torch.tensor([[ord("d"), ord("e"), ord("f")]])
    greedy = model.generate(idx, 10, temperature=0)
    assert greedy.shape == (1, 13) and torch.equal(greedy[:, :3], idx)
    assert torch.equal(greedy, model.generate(idx, 10, temperature=1.0, top_k=1, generator=torch.Generator().manual_seed(5)))
    a = model.generate(idx, 40, temperature=1.0, generator=torch.Generator().manual_seed(3))
    b = model.generate(idx, 40, temperature=1.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    # the context is cropped to block_size, so generation runs past it
    assert model.generate(idx, 40, temperature=0).shape == (1, 43)


def test_window_sampling_is_a_function_of_seed_and_step():
    a = window_starts(1000, 32, seed=1, stream=TRAIN_STREAM, step=5, shape=(2, 8))
    assert torch.equal(a, window_starts(1000, 32, seed=1, stream=TRAIN_STREAM, step=5, shape=(2, 8)))
    assert not torch.equal(a, window_starts(1000, 32, seed=1, stream=TRAIN_STREAM, step=6, shape=(2, 8)))
    assert not torch.equal(a, window_starts(1000, 32, seed=2, stream=TRAIN_STREAM, step=5, shape=(2, 8)))
    assert int(a.max()) < 1000 - 32
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = windows(tokens, torch.tensor([0, 900]), 32)
    assert x.dtype == torch.int64 and x.shape == (2, 32)
    assert torch.equal(x[1], torch.arange(900, 932)) and torch.equal(y[1], torch.arange(901, 933))
