"""A GPT-2 directory of a tiny reference model, made in milliseconds, for the tests of the jobs that read one."""

import json
from dataclasses import asdict

import torch
from trainer.hf import CONFIG, WEIGHTS, gpt2_config, to_gpt2_weights, tokenizer_files, write_safetensors
from trainer.model import GPT, GPTConfig
from trainer.tokenizer import Codec


def tiny_gpt2_dir(path, fill=None):
    """(path, the model) of a GPT-2 directory at path of a tiny reference model with the byte tokenizer,
    as trainer.export writes one; fill: a value every weight is set to."""
    model_config = GPTConfig(vocab_size=256, block_size=8, n_layer=1, n_head=2, n_embd=8)
    path.mkdir()
    model = GPT(model_config)
    if fill is not None:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(fill)
    (path / CONFIG).write_text(json.dumps(gpt2_config(asdict(model_config), Codec())))
    write_safetensors(path / WEIGHTS, to_gpt2_weights(model.state_dict(), asdict(model_config)))
    for name, text in tokenizer_files(None, model_config.block_size).items():
        (path / name).write_text(text)
    return path, model
