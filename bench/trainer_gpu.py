"""GPU throughput and MFU of trainer.train at the GPT-2 small (124M) shape, bf16, torch.compile.

Runs the trainer itself (one process per GPU under torch.distributed.run when --gpus > 1)
on random tokens with GPT-2's padded vocabulary, and reports the steady-state tokens/s
and MFU from its metrics.jsonl. Without a CUDA device it says so, prints the measurements
kept in bench/recorded/trainer_gpu.jsonl (where and with what each was taken), and exits 0;
--record appends this run's result there, with the machine's versions.

    python bench/trainer_gpu.py                  # all GPUs of this machine
    python bench/trainer_gpu.py --gpus 1 --format json
    python bench/trainer_gpu.py --smoke          # a tiny model, any device: checks the script itself
    python bench/trainer_gpu.py --gpus 1 --batch-size 32,64 --attention auto,cudnn   # 4 runs, one data set

MFU is the trainer's own figure: tokens/s x FLOPs per token / (GPUs x the GPU's dense bf16
peak), FLOPs per token = 6*N + 12*L*H*Q*T (trainer.model.GPT.flops_per_token): N the
parameters less the position table, L layers, H heads of Q dimensions, T the context, the
attention counted over the whole T x T, not halved for the causal mask, as nanoGPT and
torchtitan count it. Without torch.compile (none here, or it fails) the run is eager, and the
output says so. The data and the run directory are in a temporary directory (TMPDIR), removed
at the end with the checkpoint the trainer always writes of its last step (about 1.5 GB at 124M).
The trainer's own output goes to stderr.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
FILES_DIR = ROOT / "roles" / "deploy" / "files"
RECORDED = ROOT / "bench" / "recorded" / "trainer_gpu.jsonl"
sys.path.insert(0, str(FILES_DIR))
from trainer.config import ATTENTION  # noqa: E402  pylint: disable=wrong-import-position
from trainer.mfu import peak_bf16_flops  # noqa: E402  pylint: disable=wrong-import-position
from trainer.model import GPT, GPTConfig  # noqa: E402  pylint: disable=wrong-import-position

GPT2_SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024}
SMOKE = {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 64, as nanoGPT does
MFU_FORMULA = "6*N + 12*L*H*Q*T"


def write_random_tokens(data_dir, n_tokens, vocab):
    """A prepared data directory (trainer.prepare's format) of uniformly random uint16 tokens."""
    data_dir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_tokens), ("val", n_tokens // 10)):
        rng.integers(0, vocab, n, dtype=np.uint16).tofile(data_dir / f"{split}.bin")
    meta = {"format": 1, "tokenizer": "random", "vocab_size": vocab, "dtype": "uint16",
            "train_tokens": n_tokens, "val_tokens": n_tokens // 10}
    (data_dir / "meta.json").write_text(json.dumps(meta))


def flops_per_token(shape, vocab):
    """(FLOPs per token, N) as the trainer counts them for its MFU, for a model of this shape."""
    with torch.device("meta"):  # the shapes only: no memory, no initialisation
        model = GPT(GPTConfig(vocab_size=vocab, dropout=0.0, **shape))
    return model.flops_per_token(), model.num_params(non_embedding=True)


def compile_problem(device):
    """Why torch.compile does not work here (its error), or None when a small function compiles and runs."""
    try:
        double_gelu = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2)
        double_gelu(torch.ones(64, device=device))
    except Exception as e:  # any failure of the compiler stack: no Triton, no C compiler, an unsupported Python
        message = str(e).strip().splitlines()
        return f"{type(e).__name__}: {message[0] if message else ''}"
    return None


def run_trainer(argv, out_dir, env):
    """Run the trainer into out_dir (removed first); its exit status. Its output goes to stderr."""
    shutil.rmtree(out_dir, ignore_errors=True)
    return subprocess.run(argv + ["--out", str(out_dir)], cwd=FILES_DIR, env=env, stdout=sys.stderr,
                          check=False).returncode


def comma_list(kind, choices=None):
    """An argparse type: a comma-separated list of kind, each one of choices where given."""
    def parse(text):
        values = [kind(part.strip()) for part in text.split(",") if part.strip()]
        wrong = [v for v in values if choices and v not in choices]
        if not values or wrong:
            raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list"
                                             + (f" of {', '.join(choices)}" if choices else ""))
        return values
    return parse


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count(), help="ranks, one per GPU")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--skip-steps", type=int, default=20, help="first steps left out (compilation, warmup)")
    p.add_argument("--batch-size", type=comma_list(int), default=[16],
                   help="sequences per GPU per micro-step; several (16,32,64): one run each")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--attention", type=comma_list(str, ATTENTION), default=["auto"],
                   help="the trainer's --attention, the attention kernel tried first; several (auto,cudnn): one run "
                        "each, every batch size with every kernel, on the same data")
    p.add_argument("--smoke", action="store_true", help="tiny model on whatever device there is")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    p.add_argument("--record", action="store_true", help=f"append each result to {RECORDED.relative_to(ROOT)}")
    args = p.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("trainer_gpu: no CUDA device here; skipped (run it on a GPU node, or with --smoke)")
        if args.format != "json":
            print_recorded(args.format)
        return 0
    shape = SMOKE if args.smoke else GPT2_SMALL
    vocab = 256 if args.smoke else VOCAB
    cuda = torch.cuda.is_available()
    gpus = max(1, args.gpus) if cuda else 1

    compile_note = None
    use_compile = args.compile and not args.smoke
    if use_compile:
        problem = compile_problem("cuda" if cuda else "cpu")
        if problem:
            use_compile, compile_note = False, f"torch.compile does not work here ({problem}); ran eagerly"

    results = []
    with tempfile.TemporaryDirectory(prefix="trainer_gpu-") as tmp:
        data_dir = Path(tmp) / "data"
        write_random_tokens(data_dir, 1 << 22 if args.smoke else 1 << 27, vocab)
        for batch_size in args.batch_size:
            for attention in args.attention:
                result = measure(args, shape, vocab, gpus, data_dir, Path(tmp) / "run", batch_size, attention,
                                 use_compile, compile_note)
                if result is None:
                    return 1
                if args.record:
                    record(result)
                results.append(result)
                if args.format != "json":
                    print_result(result, args.format)
    if args.format == "json":  # one object for one run, as before; a list for several
        print(json.dumps(results[0] if len(results) == 1 else results, indent=2))
    return 0


def measure(args, shape, vocab, gpus, data_dir, out_dir, batch_size, attention, use_compile, compile_note):
    """One run of the trainer at this batch size and attention kernel: its result, or None when it failed."""
    cuda = torch.cuda.is_available()
    dtype = "bfloat16" if cuda else "float32"
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus)]
                if gpus > 1 else [sys.executable])
    trainer = launcher + ["-m", "trainer.train", "--data", str(data_dir),
                          "--steps", str(args.steps), "--batch-size", str(batch_size), "--warmup", "10",
                          "--log-interval", "10", "--eval-interval", "0", "--eval-iters", "1",
                          "--checkpoint-interval", "0", "--dtype", dtype, "--attention", attention]
    trainer += [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    env = dict(os.environ, PYTHONPATH=str(FILES_DIR))
    status = run_trainer(trainer + ["--compile" if use_compile else "--no-compile"], out_dir, env)
    if status != 0 and use_compile:
        use_compile, compile_note = False, f"the compiled run failed (exit {status}, its output above); ran eagerly"
        print(f"trainer_gpu: {compile_note}", file=sys.stderr, flush=True)
        status = run_trainer(trainer + ["--no-compile"], out_dir, env)
    if status != 0:
        print(f"trainer_gpu: the trainer failed with exit status {status} (its output above)", file=sys.stderr)
        return None
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in records if "loss" in r and r["step"] > args.skip_steps]
    if not steady:
        print(f"trainer_gpu: no metrics after step {args.skip_steps}; raise --steps", file=sys.stderr)
        return None
    mfus = [r["mfu"] for r in steady if r.get("mfu") is not None]
    flops, n_params = flops_per_token(shape, vocab)
    native_bf16 = cuda and torch.cuda.is_bf16_supported(including_emulation=False)
    peak = peak_bf16_flops(torch.cuda.get_device_name()) if native_bf16 else None
    result = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "gpus": gpus, "model": shape, "vocab_size": vocab,
        "batch_size_per_gpu": batch_size, "compile": use_compile, "compile_note": compile_note,
        "attention": attention,
        "dtype": dtype if native_bf16 or not cuda else "float32",
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in steady)),
        "mfu": round(statistics.median(mfus), 4) if mfus else None,
        "mfu_formula": f"tokens_per_s * ({MFU_FORMULA}) / (gpus * peak_flops)",
        "flops_per_token": flops, "non_embedding_params": n_params, "peak_flops": peak,
        "final_loss": steady[-1]["loss"],
    }
    if not cuda:
        result["mfu_note"] = "n/a (no GPU)"
    elif not native_bf16:
        result["mfu_note"] = "n/a (no native bfloat16 on this GPU: trained in float32)"
    return result


def print_result(result, fmt, where=""):
    """One result (this run's or a recorded one) as a markdown table row or as text; where: the
    recorded machine it was measured on ("(2)"), when there are several."""
    shape = result["model"]
    flops, n_params, peak = result["flops_per_token"], result["non_embedding_params"], result["peak_flops"]
    mfu = (f"{result['mfu']:.1%}" if result["mfu"] is not None
           else result.get("mfu_note") or "n/a (GPU not in the peak-FLOPs table)")
    L, H, T = shape["n_layer"], shape["n_head"], shape["block_size"]
    Q = shape["n_embd"] // H
    formula = (f"{MFU_FORMULA} = {flops / 1e9:.3g} GFLOP per token (N = {n_params / 1e6:.1f}M parameters less the "
               f"position table, L*H*Q*T = {L}*{H}*{Q}*{T}, attention over the whole T x T)")
    if peak:
        formula += f", over {peak / 1e12:g} TFLOP/s dense bf16 per GPU"
    note = result.get("compile_note")
    compiled = f"compile={result['compile']}" + (f" ({note})" if note else "")
    if result.get("attention", "auto") != "auto":
        compiled += f", attention {result['attention']} first"
    what = (f"{result['gpus']} x {result['device']}, GPT {', '.join(f'{k}={v}' for k, v in shape.items())}, "
            f"batch {result['batch_size_per_gpu']}/GPU, {compiled}{' ' + where if where else ''}")
    if fmt == "markdown":
        print(f"| {what} | {result['tokens_per_s']:,} tokens/s | MFU {mfu}; {formula} |")
    else:
        print(f"{what}\n  {result['tokens_per_s']:,} tokens/s, MFU {mfu}\n  MFU counts {formula}")


def machine():
    """Where a result was measured: the date, the GPU and driver, and the software's versions."""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=60, check=False)
        gpus = smi.stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        gpus = []
    return {"date": datetime.date.today().isoformat(), "gpus": gpus, "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None}


def record(result):
    with RECORDED.open("a") as handle:
        handle.write(json.dumps(dict(result, recorded=machine()), sort_keys=True) + "\n")


def print_recorded(fmt):
    """The results kept in RECORDED, each with where and with what it was measured."""
    try:
        results = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        print(f"trainer_gpu: no recorded GPU measurement to show ({RECORDED.relative_to(ROOT)}: {e})")
        return

    def where_of(r):
        return (r["recorded"]["date"], r["recorded"].get("machine") or ", ".join(r["recorded"].get("gpus", [])),
                f"torch {r['recorded']['torch']}, CUDA {r['recorded']['cuda']}, NCCL {r['recorded']['nccl']}")

    where = sorted({where_of(r) for r in results})
    label = {w: f"({i})" if len(where) > 1 else "" for i, w in enumerate(where, 1)}
    print(f"\nMeasured earlier on GPUs, as kept in {RECORDED.relative_to(ROOT)} (this script with `--record`, or its "
          "`--format json` output with the machine added):" if fmt == "markdown" else "recorded on GPUs:")
    ceilings = {where_of(r): r["recorded"].get("ceilings") for r in results}
    for w in where:
        date, gpu, versions = w
        line = f"{'- ' if fmt == 'markdown' else '  '}{label[w] + ' ' if label[w] else ''}{date}: {gpu}; {versions}"
        if ceilings.get(w):
            line += "; bf16 matrix products measured there (M x K x N: TFLOP/s): " + ", ".join(
                f"{shape if 'x' in shape else 'x'.join([shape] * 3)}: {v:g}"
                for shape, v in sorted((k.split("_")[2], v) for k, v in ceilings[w].items()))
        print(line)
    if fmt == "markdown":
        print("\n| what | throughput | MFU |\n|---|---:|---|")
    for r in results:
        print_result(r, fmt, label[where_of(r)])


if __name__ == "__main__":
    sys.exit(main())
