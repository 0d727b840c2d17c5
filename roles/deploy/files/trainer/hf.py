"""The Hugging Face format of a model: what ``trainer.export`` writes and what the evaluation and
batch jobs read back.

The reference model is GPT-2's architecture (pre-LayerNorm blocks, tanh GELU, learned positions,
tied embeddings), so an export is a plain ``GPT2LMHeadModel`` directory that transformers, vLLM
and llama.cpp's converters load with no custom code:

- ``config.json``: the GPT-2 configuration (the vocabulary is the model's, padded to a multiple of
  64; the rows past the tokenizer's are never a target);
- ``model.safetensors``: the weights in float32, GPT-2's names and layout (its Conv1D keeps a
  Linear's weight transposed); a model without biases gets zero ones, which compute the same;
- ``tokenizer.json`` and ``tokenizer_config.json``: the run's tokenizer as a ``tokenizers``
  file that ``AutoTokenizer`` loads (the byte tokenizer as a byte-level BPE with no merges whose
  ids are the bytes), with a plain chat template so that chat completions work;
- ``generation_config.json``: the end-of-text token when the tokenizer has one, and the padded
  rows suppressed.

Written with torch and the standard library alone: safetensors is a JSON header and the raw
little-endian tensor bytes, which this module writes and reads itself, bounded and checked.
Every JSON the jobs read from a file (a header, a config, a prompts line, a batch record) goes
through json_value, which bounds its nesting before json's parser recurses into it.
"""

import json
import math
import os
import re
import struct
from pathlib import Path

import torch

from .model import GPT, GPTConfig
from .tokenizer import BYTE_VOCAB, END_OF_TEXT, Codec

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
# what the export job records of its source (the checkpoint, its step and run), read by the playbooks
EXPORT_RECORD = "llmtrain_export.json"
# A safetensors header is a few KB per hundred tensors; anything far larger is not one of ours.
MAX_HEADER_BYTES = 16 * 1024 * 1024
MAX_JSON_BYTES = 64 * 1024 * 1024  # a config or a tokenizer.json of a large BPE vocabulary
# The safetensors dtypes torch holds, each with its size in bytes.
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
DTYPE_SIZES = {name: torch.empty((), dtype=dtype).element_size() for name, dtype in DTYPES.items()}
# A header nests 3 deep (its object, a tensor's, the shape); no weight has more than a few dimensions.
HEADER_DEPTH = 3
MAX_RANK = 16
# Beyond 64 bits no number of a file is a size, offset, seed or count.
MAX_INT = 2 ** 63 - 1
# No JSON the jobs read nests deeper (a header 3 levels, a prompts line or a record 1, a config a few).
MAX_JSON_DEPTH = 32
# The most a GPT-2 config.json may give each size: orders of magnitude past GPT-2 XL's (50257 tokens,
# 1024 positions, 48 layers, 25 heads, 1600 wide) and past those of every published GPT-2-style model,
# so that no real model is refused and a config of a model no machine holds is, before it is built.
GPT2_SIZES = {"vocab_size": 2 ** 24, "n_positions": 2 ** 20, "n_layer": 1024, "n_head": 1024, "n_embd": 65536}
# JSON's strings (a bracket in one is text; one left open runs to the end) and its brackets
JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
# The layers GPT-2 keeps as Conv1D: weight (in, out), the transpose of a Linear's (out, in).
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# A chat as plain text: each message on a line of its own after its role, then the assistant's turn.
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


class ExportError(ValueError):
    """A directory that is not a model this module can read; the message says why."""


# --- JSON of files -------------------------------------------------------------------------------

def _no_constant(name):
    raise ValueError(f"{name} is no number JSON allows")


def _int(text):
    """An integer of JSON, refused past 64 bits before Python converts it (which takes time quadratic
    in its digits where the interpreter has no limit of its own on them)."""
    if len(text.lstrip("-")) > len(str(MAX_INT)):
        raise ValueError(f"{text[:24]}... is an integer beyond 64 bits")
    return int(text)


def json_value(data, depth=MAX_JSON_DEPTH):
    """The JSON value of data (str, or bytes of UTF-8), refused (ValueError saying why) where it nests
    more than depth lists and objects deep, holds NaN, an infinity or an integer of more digits than
    64 bits hold, or is no JSON. The nesting is counted before json's parser runs: it recurses, and
    past the interpreter's limit raises RecursionError."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if text.count("[") + text.count("{") > depth:  # else it cannot nest deeper: no scan
        level = 0
        for token in JSON_TOKENS.finditer(text):
            char = text[token.start()]
            if char in "[{":
                level += 1
                if level > depth:
                    raise ValueError(f"it nests deeper than {depth} levels")
            elif char != '"':
                level -= 1
    return json.loads(text, parse_constant=_no_constant, parse_int=_int)


def _shown(value):
    """A name or value of a file as a message shows it: its repr (control characters escaped), cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- safetensors ---------------------------------------------------------------------------------

def write_safetensors(path, tensors, metadata=None):
    """Write tensors ({name: tensor}, CPU, contiguous) to path as safetensors, in name order."""
    header, offset = {}, 0
    for name in sorted(tensors):
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for name in sorted(tensors):
            t = tensors[name].detach().cpu().contiguous()
            out.write(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # a scalar too


def json_number(value, kind=int):
    """Whether value (of a file's JSON) is a number of kind (int: a whole number, not a bool; float: an
    int or a float) from 0 to MAX_INT: NaN and the infinity of 1e309 are not."""
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        return False
    return 0 <= value <= MAX_INT  # NaN fails both, an infinity the second


def _tensor_info(info, data_size):
    """(dtype name, shape, begin, end) of a header's tensor entry; ValueError saying what is wrong."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise ValueError("is not an object of dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
        raise ValueError(f"has dtype {_shown(dtype)}, none of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(json_number(n) for n in shape):
        raise ValueError(f"has shape {_shown(shape)}, not a list of at most {MAX_RANK} whole numbers >= 0")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(json_number(n) for n in offsets):
        raise ValueError(f"has data_offsets {_shown(offsets)}, not [begin, end] of whole numbers >= 0")
    begin, end = offsets
    if not begin <= end <= data_size:
        raise ValueError(f"has data_offsets {offsets}, not within the {data_size} bytes of data")
    if end - begin != math.prod(shape) * DTYPE_SIZES[dtype]:
        raise ValueError(f"has {end - begin} bytes, not the {math.prod(shape) * DTYPE_SIZES[dtype]} "
                         f"of shape {shape} in {dtype}")
    return dtype, shape, begin, end


def read_header(raw, data_size):
    """({name: (dtype name, shape, begin, end)}, metadata) of a safetensors header (raw, its bytes)
    over data_size bytes of data, checked against the format's rules: an object of tensors and an
    optional "__metadata__" of strings, whose tensors lie one after the other and cover the data
    exactly (no byte of the file is read twice, nor hidden); ValueError saying what is wrong."""
    try:
        header = json_value(raw, HEADER_DEPTH)
    except ValueError as e:
        raise ValueError(f"the header is unreadable: {str(e)[:200]}") from None
    if not isinstance(header, dict) or not raw.startswith(b"{"):
        raise ValueError("the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata  # null: none, as the format's own reader takes it
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("__metadata__ is not an object of strings")
    entries = {}
    for name, info in header.items():
        try:
            entries[name] = _tensor_info(info, data_size)
        except ValueError as e:
            raise ValueError(f"tensor {_shown(name)} {e}") from None
    position, previous = 0, None
    for name, (_dtype, _shape, begin, end) in sorted(entries.items(), key=lambda item: item[1][2:]):
        if begin != position:
            where = f"overlaps tensor {_shown(previous)}" if begin < position else f"leaves bytes {position} to {begin} unread"
            raise ValueError(f"tensor {_shown(name)} (data_offsets [{begin}, {end}]) {where}")
        position, previous = end, name
    if position != data_size:
        raise ValueError(f"the tensors end at byte {position} of the data, not at its end ({data_size})")
    return entries, metadata


def read_safetensors(path):
    """({name: tensor}, metadata) of the safetensors file at path; ExportError naming the file and what
    is wrong for one that is not."""
    path = Path(path)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(8)
        if len(head) < 8:
            raise ExportError(f"{path} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ExportError(f"{path}: a header of {length} bytes is not a safetensors header (the file holds "
                              f"{size - 8} bytes after its size; a header is at most {MAX_HEADER_BYTES})")
        data_size = size - 8 - length
        try:
            entries, metadata = read_header(handle.read(length), data_size)
        except ValueError as e:
            raise ExportError(f"{path} is not a safetensors file we read: {e}") from None
        tensors = {}
        for name, (dtype, shape, begin, end) in entries.items():
            raw = bytearray(end - begin)
            handle.seek(8 + length + begin)
            if handle.readinto(raw) != len(raw):
                raise ExportError(f"{path}: tensor {_shown(name)} is cut short (the file shrank while it was read)")
            tensor = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
            tensors[name] = tensor.view(DTYPES[dtype]).reshape(shape)
    return tensors, metadata


# --- GPT-2 configuration and weights -------------------------------------------------------------

def gpt2_config(model_config, codec):
    """The transformers GPT2Config (as a dict) of the reference model."""
    eos = codec.token_id(END_OF_TEXT)
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": int(model_config["vocab_size"]),
        "n_positions": int(model_config["block_size"]),
        "n_embd": int(model_config["n_embd"]),
        "n_layer": int(model_config["n_layer"]),
        "n_head": int(model_config["n_head"]),
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "use_cache": True,
        "tie_word_embeddings": True,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "dtype": "float32",
    }


def gpt2_sizes(config, path):
    """{field: value} of the sizes of a GPT-2 config.json (dict; path names it in a message): whole
    numbers from 1 to their bound in GPT2_SIZES, n_embd a multiple of n_head; ExportError naming the
    file and the field."""
    sizes = {}
    for field, bound in GPT2_SIZES.items():
        value = config.get(field)
        if not json_number(value) or not 1 <= value <= bound:
            raise ExportError(f"{path}: {field} {_shown(value)} is not a whole number from 1 to {bound}")
        sizes[field] = value
    if sizes["n_embd"] % sizes["n_head"]:
        raise ExportError(f"{path}: n_embd {sizes['n_embd']} is not a multiple of n_head {sizes['n_head']}")
    return sizes


def model_config_of(config, path=CONFIG):
    """The reference model's GPTConfig for a GPT-2 config.json (dict, read from path); ExportError for one
    it cannot hold."""
    if config.get("model_type") != "gpt2":
        raise ExportError(f"{path}: model_type {_shown(config.get('model_type'))} is not gpt2")
    sizes = gpt2_sizes(config, path)
    epsilon = config.get("layer_norm_epsilon", 1e-5)
    if (config.get("n_inner") not in (None, 4 * sizes["n_embd"])
            or config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh")
            or not config.get("tie_word_embeddings", True) or not config.get("scale_attn_weights", True)
            or config.get("scale_attn_by_inverse_layer_idx") or config.get("reorder_and_upcast_attn")
            or not json_number(epsilon, float) or abs(epsilon - 1e-5) > 1e-12):
        raise ExportError(f"{path}: a GPT-2 of another variant (MLP width, activation, untied embeddings, attention "
                          "scaling or LayerNorm epsilon)")
    return GPTConfig(vocab_size=sizes["vocab_size"], block_size=sizes["n_positions"], n_layer=sizes["n_layer"],
                     n_head=sizes["n_head"], n_embd=sizes["n_embd"], dropout=0.0, bias=True)


def gpt2_parameters(model_config):
    """The parameters of the reference model of model_config (GPTConfig, with biases), counted once."""
    c = model_config
    return (c.vocab_size + c.block_size) * c.n_embd + c.n_layer * (12 * c.n_embd ** 2 + 13 * c.n_embd) + 2 * c.n_embd


def to_gpt2_weights(state_dict, model_config):
    """GPT-2's tensors (names, Conv1D layout, biases) of the reference model's state dict, float32.
    The output matrix is the token embedding (tied), so it is not stored twice."""
    tensors = {}
    for name, tensor in state_dict.items():
        if name == "lm_head.weight":
            continue
        tensor = tensor.detach().to("cpu", torch.float32)
        tensors[name] = tensor.t().contiguous() if name.endswith(CONV1D) else tensor.contiguous()
    if not model_config.get("bias", True):  # GPT-2 always has biases: zeros compute the same
        shapes = {"ln_1.bias": "ln_1.weight", "ln_2.bias": "ln_2.weight"}
        for layer in range(int(model_config["n_layer"])):
            prefix = f"transformer.h.{layer}."
            for bias, weight in shapes.items():
                tensors[prefix + bias] = torch.zeros_like(tensors[prefix + weight])
            for proj in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
                tensors[f"{prefix}{proj}.bias"] = torch.zeros(tensors[f"{prefix}{proj}.weight"].shape[1])
        tensors["transformer.ln_f.bias"] = torch.zeros_like(tensors["transformer.ln_f.weight"])
    return tensors


def from_gpt2_weights(tensors):
    """The reference model's state dict of GPT-2's tensors (the inverse of to_gpt2_weights)."""
    state = {}
    for name, tensor in tensors.items():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # the causal mask some GPT-2 files carry as a buffer
        key = name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name
        state[key] = tensor.t() if key.endswith(CONV1D) else tensor
    state.setdefault("lm_head.weight", state.get("transformer.wte.weight"))
    return state


# --- the tokenizer ------------------------------------------------------------------------------

def byte_tokenizer_json():
    """The byte tokenizer (id = the byte) as a tokenizers byte-level BPE with no merges."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(BYTE_VOCAB):  # GPT-2's map of bytes to printable characters
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(BYTE_VOCAB + extra)
            extra += 1
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {chars[b]: b for b in range(BYTE_VOCAB)}, "merges": []},
    }


def tokenizer_json(text):
    """The JSON value of the text of a checkpoint's tokenizer.json, bounded as a file's; ExportError naming it."""
    size = len(text.encode("utf-8"))
    if size > MAX_JSON_BYTES:
        raise ExportError(f"its {TOKENIZER} holds {size} bytes, more than the {MAX_JSON_BYTES} of a tokenizer")
    try:
        return json_value(text)
    except ValueError as e:
        raise ExportError(f"its {TOKENIZER} is not readable JSON ({str(e)[:200]})") from None


def tokenizer_files(record, block_size):
    """{file name: text} of the tokenizer a checkpoint recorded ({kind, vocab_size, json})."""
    codec = Codec(record)
    text = record.get("json") if record and record.get("kind") != "bytes" else None
    tokenizer = tokenizer_json(text) if text else byte_tokenizer_json()
    eos = END_OF_TEXT if codec.token_id(END_OF_TEXT) is not None else None
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": int(block_size),
              "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}
    if eos:
        config.update(eos_token=eos, bos_token=eos, pad_token=eos)
    return {TOKENIZER: json.dumps(tokenizer, ensure_ascii=False), TOKENIZER_CONFIG: json.dumps(config, indent=2)}


def generation_config(codec, model_vocab):
    config = {"do_sample": True, "temperature": 0.8, "top_k": 50, "max_new_tokens": 200}
    eos = codec.token_id(END_OF_TEXT)
    if eos is not None:
        config.update(eos_token_id=eos, bos_token_id=eos, pad_token_id=eos)
    if model_vocab > codec.vocab_size:  # the padded rows: never a target, never to be sampled
        config["suppress_tokens"] = list(range(codec.vocab_size, model_vocab))
    return config


# --- reading an export back ---------------------------------------------------------------------

def read_json(path, what):
    path = Path(path)
    if not path.is_file() or path.stat().st_size > MAX_JSON_BYTES:
        raise ExportError(f"{path}: no {what} (or one over {MAX_JSON_BYTES} bytes)")
    try:
        value = json_value(path.read_bytes())
    except (OSError, ValueError) as e:
        raise ExportError(f"{path}: not a readable {what} ({e})") from None
    if not isinstance(value, dict):
        raise ExportError(f"{path}: not a readable {what} (not a JSON object)")
    return value


def codec_of(model_dir):
    """The Codec of the tokenizer.json in model_dir."""
    path = Path(model_dir) / TOKENIZER
    if not path.is_file():
        raise ExportError(f"{model_dir} has no {TOKENIZER}")
    return Codec.from_file(path)


def weights_files(model_dir):
    """The safetensors files of model_dir: model.safetensors, or the shards its index names."""
    model_dir = Path(model_dir)
    if (model_dir / WEIGHTS).is_file():
        return [model_dir / WEIGHTS]
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index, "safetensors index").get("weight_map")
        names = list(weight_map.values()) if isinstance(weight_map, dict) else []
        if names and all(isinstance(n, str) and "/" not in n and n.endswith(".safetensors") for n in names):
            return [model_dir / n for n in sorted(set(names))]
    raise ExportError(f"{model_dir} has no {WEIGHTS} (nor a model.safetensors.index.json)")


def load_gpt2(model_dir, device="cpu"):
    """(the reference GPT with model_dir's weights, its Codec, config.json as a dict) of a GPT-2
    directory: an export of this trainer, or a GPT-2 another trainer saved."""
    config = read_json(Path(model_dir) / CONFIG, CONFIG)
    model_config = model_config_of(config, Path(model_dir) / CONFIG)
    files = weights_files(model_dir)
    stored = sum(path.stat().st_size for path in files)
    # no dtype holds a weight in less than a byte: a config the files cannot fill is refused before its model is built
    if stored < gpt2_parameters(model_config):
        raise ExportError(f"{model_dir}: {CONFIG} describes {gpt2_parameters(model_config)} parameters, more than "
                          f"its weights' {stored} bytes hold")
    model = GPT(model_config)
    tensors = {}
    for path in files:
        tensors.update(read_safetensors(path)[0])
    state = from_gpt2_weights(tensors)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise ExportError(f"{model_dir}: the weights do not fit the config ({str(e).splitlines()[0]})") from None
    return model.to(device).eval(), codec_of(model_dir), config


def is_model_dir(path):
    """Whether path is a Hugging Face model directory (a config.json and safetensors weights)."""
    path = Path(path)
    return (path / CONFIG).is_file() and ((path / WEIGHTS).is_file() or (path / "model.safetensors.index.json").is_file())


# --- any model directory, for the jobs that use one ------------------------------------------------

class Model:
    """What the evaluation and batch jobs need of a model: token ids <-> text, the logits of a
    sequence, its context."""

    def __init__(self, forward, encode, decode, vocab_size, block_size, end_of_text, describe):
        self.forward, self.encode, self.decode = forward, encode, decode
        self.vocab_size, self.block_size, self.end_of_text, self.describe = vocab_size, block_size, end_of_text, describe


def load_model(model_dir, device, dtype=None):
    """The model in model_dir: a GPT-2 in the reference model, any other causal LM with transformers
    (in dtype where given); ExportError for a directory neither reads."""
    model_dir = Path(model_dir)
    try:
        config = read_json(model_dir / CONFIG, CONFIG)
    except ExportError as e:
        raise ExportError(f"--model {model_dir}: {e}") from None
    reason = None
    if config.get("model_type") == "gpt2":
        gpt2_sizes(config, model_dir / CONFIG)  # whichever loads it, no model of sizes beyond any real one
        try:
            model, codec, _config = load_gpt2(model_dir, device)
        except ExportError as e:
            reason = str(e)
        else:
            return Model(lambda idx: model(idx)[0], codec.encode, codec.decode, codec.vocab_size, model.config.block_size,
                         codec.token_id(END_OF_TEXT),
                         f"GPT-2 {model.num_params() / 1e6:.2f}M parameters, tokenizer {codec.describe()}")
    return load_transformers(model_dir, config, device, reason, dtype)


def load_transformers(model_dir, config, device, reason, dtype=None):
    try:
        import transformers  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ExportError(f"--model {model_dir}: a {config.get('model_type')} model "
                          f"({reason or 'not GPT-2'}) needs transformers in the nodes' Python") from None
    options = {"dtype": dtype} if dtype is not None else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), **options).to(device).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    block = next((config[k] for k in ("max_position_embeddings", "n_positions", "max_seq_len") if isinstance(config.get(k), int)),
                 None) or getattr(tokenizer, "model_max_length", None)
    if not isinstance(block, int) or block <= 0 or block > 1 << 24:
        block = 2048  # no context length it names: bound the prompt all the same
    return Model(lambda idx: model(input_ids=idx).logits, lambda text: tokenizer.encode(text, add_special_tokens=False),
                 tokenizer.decode, len(tokenizer), block, tokenizer.eos_token_id,
                 f"{config.get('model_type')} with transformers {transformers.__version__}")
