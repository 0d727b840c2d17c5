"""Generate text from the newest checkpoint of a run.

    python -m trainer.generate --checkpoint RUN --prompt TEXT [--prompt TEXT ...] [--prompt-file F]
        [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S] [--json]

--checkpoint is a run directory, its checkpoints/ directory, or one checkpoint (a step_*.pt file
or a sharded step_*/ directory, read in this one process). Text is
encoded and decoded with the tokenizer the checkpoint carries (bytes, or the BPE its data was
prepared with); --tokenizer FILE gives one to a model trained on token files that had none. Each
prompt is sampled with a generator seeded by --seed, so the same seed gives the same text
for a prompt whatever the other prompts are. Text goes to stdout (with --json: a list of
{"prompt", "completion"}); what was loaded goes to stderr.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from .batch import MAX_PROMPTS_BYTES
from .checkpoint import CheckpointError, find_checkpoint, is_sharded, load_sharded_model
from .hf import json_value
from .model import GPT, TEMPERATURES, GPTConfig, temperature_ok
from .tokenizer import Codec, TokenizerError

EMPTY_PROMPT = "\n"  # an empty prompt starts the text as if after a newline


def read_prompt_file(path):
    """A .json file holds a list of strings (prompts may span lines); any other file: one prompt per line."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_PROMPTS_BYTES + 1)  # bounded as the batch job's prompts file
    if len(data) > MAX_PROMPTS_BYTES:
        raise ValueError(f"it holds more than the {MAX_PROMPTS_BYTES} bytes a prompts file may: split its prompts "
                         "into several files")
    text = data.decode("utf-8")
    if Path(path).suffix == ".json":
        prompts = json_value(text)
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise ValueError("a .json prompt file must hold a list of strings")
        return prompts
    return [line for line in text.splitlines() if line.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m trainer.generate", description=__doc__.split("\n\n", maxsplit=1)[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--checkpoint", required=True, metavar="PATH", help="run dir, checkpoints dir, checkpoint file or sharded checkpoint dir")
    p.add_argument("--prompt", action="append", default=[], metavar="TEXT", help="a prompt; repeat for more")
    p.add_argument("--prompt-file", metavar="FILE", help="more prompts: one per line, or a JSON list in a .json file")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help=TEMPERATURES)
    p.add_argument("--top-k", type=int, default=50, help="sample from the k most likely tokens; 0: all")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--tokenizer", metavar="FILE", help="a tokenizer.json to use instead of the checkpoint's")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: one GPU if there is one")
    p.add_argument("--json", action="store_true", help="print a JSON list of {prompt, completion}")
    args = p.parse_args(argv)
    for name in ("max_new_tokens", "temperature", "top_k", "seed"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative (got {getattr(args, name)})")
    if not temperature_ok(args.temperature):
        p.error(f"--temperature must be {TEMPERATURES} (got {args.temperature})")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    if args.prompt_file:
        try:
            args.prompt += read_prompt_file(args.prompt_file)
        except (OSError, ValueError) as e:
            p.error(f"--prompt-file {args.prompt_file}: {e}")
    args.prompt = args.prompt or [""]
    return p, args


def generate(model, codec, prompt, max_new_tokens, temperature, top_k, seed, device):
    ids = codec.encode(prompt) or codec.encode(EMPTY_PROMPT)
    generator = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([ids], dtype=torch.long, device=device)
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k, generator=generator,
                         vocab_size=codec.vocab_size)
    return codec.decode(out[0, len(ids):].tolist())


def main(argv=None):
    parser, args = parse_args(argv)
    try:
        path, state = find_checkpoint(args.checkpoint)
    except CheckpointError as e:
        parser.error(str(e))
    try:
        codec = Codec.from_file(args.tokenizer) if args.tokenizer else Codec(state.get("tokenizer"))
    except (TokenizerError, OSError) as e:
        parser.error(f"--checkpoint {path}: {e}" if not args.tokenizer else f"--tokenizer {args.tokenizer}: {e}")
    if codec.vocab_size > state["model_config"]["vocab_size"]:
        parser.error(f"the tokenizer has {codec.vocab_size} tokens, the model of {path} only "
                     f"{state['model_config']['vocab_size']}: give the tokenizer its data was prepared with")
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    model = GPT(GPTConfig(**state["model_config"]))
    if is_sharded(path):
        try:
            load_sharded_model(path, model)
        except CheckpointError as e:  # its shards, read only now: a crafted value, a shard cut since the check
            parser.error(str(e))
    else:
        model.load_state_dict(state["model"])
    model.to(device).eval()
    print(f"generate: {path} (step {state['step']}, {model.num_params() / 1e6:.2f}M parameters, tokenizer "
          f"{codec.describe()}) on {device}", file=sys.stderr, flush=True)
    results = [{"prompt": prompt,
                "completion": generate(model, codec, prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed, device)}
               for prompt in args.prompt]
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
    else:
        for r in results:
            print(r["prompt"] + r["completion"])
            print("-" * 40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
