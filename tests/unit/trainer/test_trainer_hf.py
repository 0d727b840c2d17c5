"""trainer.hf's safetensors reader and writer, and the bounded JSON of the files the jobs read: what the
writer writes reads back equal; a file that breaks a rule of the format is refused with ExportError
naming the file and what is wrong, never with another exception; so is a config.json of sizes no real
model has."""

import json
import struct

import pytest
import torch
from tiny_gpt2 import tiny_gpt2_dir
from trainer.hf import (CONFIG, WEIGHTS, ExportError, gpt2_parameters, load_gpt2, load_model, read_json, read_safetensors,
                        write_safetensors)


def tensors_of_every_kind():
    generator = torch.Generator().manual_seed(0)
    return {
        "transformer.wte.weight": torch.randn(5, 3, generator=generator),
        "half": torch.randn(2, 3, 4, generator=generator).half(),
        "bf16": torch.randn(7, generator=generator).bfloat16(),
        "double": torch.randn(3, generator=generator).double(),
        "ids": torch.arange(-4, 5, dtype=torch.int64),
        "small": torch.tensor([-3, 300], dtype=torch.int16),
        "bytes": torch.tensor([0, 255], dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
    }


def test_what_the_writer_writes_reads_back_equal(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = tensors_of_every_kind()
    write_safetensors(path, tensors, metadata={"format": "pt", "step": 24})
    back, metadata = read_safetensors(path)
    assert metadata == {"format": "pt", "step": "24"}
    assert sorted(back) == sorted(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape and torch.equal(back[name], tensor), name


def crafted(path, header, data=b""):
    """A safetensors file of header (a dict, or the header's bytes as they are) and data."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def tensor(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


F32_4 = tensor("F32", [4], 0, 16)


@pytest.mark.parametrize("header, data, message", [
    ({"a": tensor("F32", [-2, -2], 0, 16)}, 16, "tensor 'a' has shape [-2, -2], not a list of at most 16 whole numbers >= 0"),
    (b'{"a": {"dtype": "F32", "shape": [1e309], "data_offsets": [0, 4]}}', 4, "tensor 'a' has shape [inf], not a list"),
    ({"a": tensor("F32", [True, 4], 0, 16)}, 16, "tensor 'a' has shape [True, 4], not a list"),
    ({"a": tensor("F32", [4.0], 0, 16)}, 16, "tensor 'a' has shape [4.0], not a list"),
    ({"a": tensor("F32", "4", 0, 16)}, 16, "tensor 'a' has shape '4', not a list"),
    ({"a": tensor("F32", [1] * 17, 0, 4)}, 4, "tensor 'a' has shape [1, 1, 1"),
    ({"a": tensor("F7", [4], 0, 16)}, 16, "tensor 'a' has dtype 'F7', none of F32, F16, BF16"),
    ({"\x1b[2Ja": tensor(["F32"], [4], 0, 16)}, 16, "tensor '\\x1b[2Ja' has dtype ['F32'], none of"),
    ({"a": {"dtype": "F32", "shape": [4]}}, 16, "tensor 'a' is not an object of dtype, shape and data_offsets"),
    ({"a": tensor("F32", [5], 0, 16)}, 16, "tensor 'a' has 16 bytes, not the 20 of shape [5] in F32"),
    ({"a": tensor("F32", [4], 0, 16)}, 8, "tensor 'a' has data_offsets [0, 16], not within the 8 bytes of data"),
    ({"a": tensor("F32", [0], 16, 8)}, 16, "tensor 'a' has data_offsets [16, 8], not within"),
    ({"a": tensor("F32", [4], -16, 0)}, 16, "tensor 'a' has data_offsets [-16, 0], not [begin, end] of whole numbers >= 0"),
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16, 32]}}, 32, "has data_offsets [0, 16, 32], not [begin, end]"),
    ({"a": tensor("F32", [1], 0, 10 ** 30)}, 16, "the header is unreadable: 100000000000000000000000... is an integer beyond 64 bits"),
    ({"a": F32_4, "b": tensor("F32", [4], 8, 24)}, 24, "tensor 'b' (data_offsets [8, 24]) overlaps tensor 'a'"),
    ({"a": F32_4, "b": F32_4}, 16, "tensor 'b' (data_offsets [0, 16]) overlaps tensor 'a'"),
    ({"a": tensor("F32", [2], 0, 8), "b": tensor("F32", [2], 12, 20)}, 20, "tensor 'b' (data_offsets [12, 20]) leaves bytes 8 to 12 unread"),
    ({"a": tensor("F32", [2], 0, 8)}, 16, "the tensors end at byte 8 of the data, not at its end (16)"),
    ({"__metadata__": {"format": 1}, "a": F32_4}, 16, "__metadata__ is not an object of strings"),
    ({"__metadata__": ["pt"], "a": F32_4}, 16, "__metadata__ is not an object of strings"),
    (b'[{"a": 1}]', 0, "the header is not a JSON object"),
    (b' {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}', 16, "the header is not a JSON object"),
    (b'{"a": NaN}', 0, "the header is unreadable: NaN is no number JSON allows"),
    (b'{"a": "\xff"}', 0, "the header is unreadable: 'utf-8' codec can't decode byte 0xff"),
    (b'{"a": ', 0, "the header is unreadable: Expecting value"),
    pytest.param(b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}", 0, "the header is unreadable: it nests deeper than 3 levels",
                 id="nested 100000 deep"),
    pytest.param(b'{"__metadata__": {"a": {"b": "c"}}}', 0, "__metadata__ is not an object of strings", id="metadata nested"),
    pytest.param(b'{"a": {"dtype": "F32", "shape": [[4]], "data_offsets": [0, 16]}}', 16, "the header is unreadable: it nests deeper than 3 levels",
                 id="shape nested"),
])
def test_a_header_that_breaks_the_format_is_refused_naming_the_file_and_why(tmp_path, header, data, message):
    path = crafted(tmp_path / "model.safetensors", header, bytes(data))
    with pytest.raises(ExportError) as error:
        read_safetensors(path)
    assert str(error.value).startswith(f"{path} is not a safetensors file we read: ")
    assert message in str(error.value) and "\x1b" not in str(error.value)


@pytest.mark.parametrize("size, message", [
    (1000, "a header of 1000 bytes is not a safetensors header (the file holds 26 bytes after its size"),
    (1 << 63, f"a header of {1 << 63} bytes is not a safetensors header"),
])
def test_a_header_size_past_the_file_is_refused_unread(tmp_path, size, message):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", size) + b'{"__metadata__": {}}' + b" " * 6)
    with pytest.raises(ExportError) as error:
        read_safetensors(path)
    assert str(error.value).startswith(f"{path}: {message}")


def test_a_file_shorter_than_the_header_size_is_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x10\x00")
    with pytest.raises(ExportError, match="is not a safetensors file \\(too short\\)"):
        read_safetensors(path)


def test_empty_tensors_may_share_an_offset_and_an_empty_file_holds_none(tmp_path):
    path = crafted(tmp_path / "model.safetensors", {"a": tensor("F32", [0, 3], 0, 0), "b": tensor("I8", [2], 0, 2),
                                                    "c": tensor("F16", [0], 2, 2), "__metadata__": None}, b"\x01\xff")
    back, metadata = read_safetensors(path)
    assert metadata == {} and back["a"].shape == (0, 3) and back["b"].tolist() == [1, -1] and back["c"].shape == (0,)
    assert read_safetensors(crafted(tmp_path / "none.safetensors", {})) == ({}, {})


def test_a_json_file_of_the_model_nested_too_deep_is_refused(tmp_path):
    """config.json and the export record are read through the same bound as a header."""
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "gpt2", "x": ' + "[" * 200000 + "]" * 200000 + "}")
    with pytest.raises(ExportError, match="not a readable config.json \\(it nests deeper than 32 levels\\)"):
        read_json(path, "config.json")
    path.write_text('{"model_type": "gpt2", "x": "' + "[" * 200000 + '"}')  # brackets in a string are text
    assert read_json(path, "config.json")["model_type"] == "gpt2"


def test_the_safetensors_package_and_this_module_read_each_others_files(tmp_path):
    st_torch = pytest.importorskip("safetensors.torch", reason="the safetensors package is not installed here "
                                   "(the nodes do not need it: trainer.hf reads and writes the format itself)")
    tensors = tensors_of_every_kind()
    ours = tmp_path / "ours.safetensors"
    write_safetensors(ours, tensors, metadata={"format": "pt"})
    theirs = st_torch.load_file(str(ours))
    assert sorted(theirs) == sorted(tensors) and all(torch.equal(theirs[n], t) for n, t in tensors.items())
    package = tmp_path / "package.safetensors"
    st_torch.save_file(tensors, str(package), metadata={"format": "pt"})
    back, metadata = read_safetensors(package)
    assert metadata == {"format": "pt"}
    assert sorted(back) == sorted(tensors) and all(torch.equal(back[n], t) for n, t in tensors.items())


def test_a_tiny_gpt2_directory_loads_with_its_weights(tmp_path):
    path, model = tiny_gpt2_dir(tmp_path / "model")
    loaded, codec, config = load_gpt2(path)
    assert (config["n_layer"], config["n_embd"], codec.vocab_size) == (1, 8, 256)
    assert loaded.num_params() == model.num_params() == gpt2_parameters(model.config)
    idx = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.equal(loaded(idx)[0], model.eval()(idx)[0])


@pytest.mark.parametrize("field, text, message", [
    ("vocab_size", "1e309", "vocab_size inf is not a whole number from 1 to 16777216"),
    ("vocab_size", "256.0", "vocab_size 256.0 is not a whole number from 1 to 16777216"),
    ("vocab_size", str(2 ** 24 + 1), "vocab_size 16777217 is not a whole number from 1 to 16777216"),
    ("n_layer", "1" + "0" * 30, "not a readable config.json (100000000000000000000000... is an integer beyond 64 bits)"),
    ("n_layer", "1025", "n_layer 1025 is not a whole number from 1 to 1024"),
    ("n_layer", "0", "n_layer 0 is not a whole number from 1 to 1024"),
    ("n_head", "true", "n_head True is not a whole number from 1 to 1024"),
    ("n_head", "3", "n_embd 8 is not a multiple of n_head 3"),
    ("n_embd", "-8", "n_embd -8 is not a whole number from 1 to 65536"),
    ("n_embd", '"\\u001b[2J8"', "n_embd '\\x1b[2J8' is not a whole number from 1 to 65536"),
    ("n_positions", str(2 ** 20 + 1), "n_positions 1048577 is not a whole number from 1 to 1048576"),
    ("n_positions", "null", "n_positions None is not a whole number from 1 to 1048576"),
])
def test_a_config_of_sizes_no_real_model_has_is_refused_naming_the_file_and_the_field(tmp_path, field, text, message):
    """Whichever loader would read it (the reference model, or transformers where it is installed)."""
    path = config_with(tmp_path, field, text)
    for load in (load_gpt2, lambda model_dir: load_model(model_dir, "cpu")):
        with pytest.raises(ExportError) as error:
            load(path)
        assert f"{path / CONFIG}: " in str(error.value) and message in str(error.value), str(error.value)
        assert "\x1b" not in str(error.value)


@pytest.mark.parametrize("text", ["[1e-05]", '"1e-05"', "1e309", "1e-04"])
def test_a_layer_norm_epsilon_of_another_kind_is_another_variant(tmp_path, text):
    path = config_with(tmp_path, "layer_norm_epsilon", text)
    with pytest.raises(ExportError, match=f"{path / CONFIG}: a GPT-2 of another variant"):
        load_gpt2(path)


def config_with(tmp_path, field, text):
    """A tiny GPT-2 directory whose config.json gives field the JSON text."""
    path, _model = tiny_gpt2_dir(tmp_path / "model")
    config = (path / CONFIG).read_text()
    changed = config.replace(f'"{field}": {json.dumps(json.loads(config)[field])}', f'"{field}": {text}')
    assert changed != config
    (path / CONFIG).write_text(changed)
    return path


def test_a_config_larger_than_its_weights_is_refused_before_its_model_is_built(tmp_path):
    """Sizes within the bounds that describe a model of about 53 trillion parameters (211 TB in float32):
    the weights' few KB cannot fill it, and nothing of it is allocated."""
    path, _model = tiny_gpt2_dir(tmp_path / "model")
    config = json.loads((path / CONFIG).read_text())
    (path / CONFIG).write_text(json.dumps(dict(config, n_layer=1024, n_head=1024, n_embd=65536)))
    stored = (path / WEIGHTS).stat().st_size
    with pytest.raises(ExportError, match=f"config.json describes 52777447981056 parameters, more than its weights' "
                                          f"{stored} bytes hold"):
        load_gpt2(path)


@pytest.mark.parametrize("text", ["[]", '"gpt2"', "null", "7"])
def test_a_json_file_of_the_model_that_is_no_object_is_refused(tmp_path, text):
    path, _model = tiny_gpt2_dir(tmp_path / "model")
    (path / CONFIG).write_text(text)
    with pytest.raises(ExportError, match=f"{path / CONFIG}: not a readable config.json \\(not a JSON object\\)"):
        load_model(path, "cpu")


@pytest.mark.parametrize("weight_map", [["model.safetensors"], {"a": ["model.safetensors"]}, {"a": 7}, {"a": "../model.safetensors"}])
def test_a_safetensors_index_that_names_no_files_beside_it_is_refused(tmp_path, weight_map):
    path, _model = tiny_gpt2_dir(tmp_path / "model")
    (path / WEIGHTS).rename(tmp_path / WEIGHTS)
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ExportError, match="has no model.safetensors \\(nor a model.safetensors.index.json\\)"):
        load_gpt2(path)


def test_the_shards_a_safetensors_index_names_are_read(tmp_path):
    path, model = tiny_gpt2_dir(tmp_path / "model")
    (path / WEIGHTS).rename(path / "model-00001-of-00001.safetensors")
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}}))
    loaded, _codec, _config = load_gpt2(path)
    assert all(torch.equal(p, q) for p, q in zip(loaded.parameters(), model.parameters()))
