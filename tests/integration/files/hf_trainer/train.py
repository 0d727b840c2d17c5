"""A tiny GPT-2 trained by the Hugging Face Trainer, as a user's own script (docs/own-script.md):
the model from a config, a byte-level BPE tokenizer trained here with `tokenizers`, text from
the files named on the command line; nothing is fetched from a hub.

    python train.py MAX_STEPS FILE... (under torch.distributed.run, one process per node)

It keeps its checkpoints (checkpoint-N/) in LLMTRAIN_CHECKPOINT_DIR, resumes from the newest,
and stops cleanly on the job's stop notice (StopOnSignal, the snippet of docs/own-script.md).
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from tokenizers import ByteLevelBPETokenizer
from transformers import (DataCollatorForLanguageModeling, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast,
                          Trainer, TrainerCallback, TrainingArguments)
from transformers.trainer_utils import get_last_checkpoint


class StopOnSignal(TrainerCallback):
    """SIGUSR2, the job's stop notice: every rank stops after the same step, with a checkpoint."""

    def __init__(self):
        self.asked = False  # this rank's notice
        self.stopped = False  # every rank's: the same on all of them once training returns
        signal.signal(signal.SIGUSR2, lambda *_: setattr(self, "asked", True))

    def on_step_end(self, args, state, control, **kwargs):
        asked = torch.tensor([int(self.asked)], device=args.device)  # NCCL: the rank's GPU
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(asked, op=dist.ReduceOp.MAX)  # one rank's notice stops them all, at one step
        if asked.item():
            self.stopped = control.should_save = control.should_training_stop = True
        return control


class StepTime(TrainerCallback):
    """Steps of 0.2 s at least, as a real model's are (tqdm draws its bar at every step)."""

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(max(0.0, 0.2 - (time.monotonic() - self.start)))


def main():
    out = os.environ.get("LLMTRAIN_CHECKPOINT_DIR", "out")
    steps, files = int(sys.argv[1]), sys.argv[2:]
    text = "".join(open(name).read() for name in files)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text], vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>")
    ids = tokenizer(text)["input_ids"]
    block = 32
    blocks = [ids[i:i + block] for i in range(0, len(ids) - block, block)]

    class Blocks(torch.utils.data.Dataset):
        def __init__(self, count):
            self.count = min(count, len(blocks))

        def __len__(self):
            return self.count

        def __getitem__(self, i):
            return {"input_ids": torch.tensor(blocks[i])}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=block, n_embd=32, n_layer=2, n_head=2))
    args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4, logging_steps=5,
                             save_steps=10, eval_strategy="steps", eval_steps=10, learning_rate=1e-3, report_to=["tensorboard"],
                             use_cpu=not torch.cuda.is_available(), seed=0,
                             ddp_backend=("nccl" if torch.cuda.is_available() else "gloo") if "RANK" in os.environ else None)
    stop = StopOnSignal()
    trainer = Trainer(model=model, args=args, train_dataset=Blocks(len(blocks)), eval_dataset=Blocks(16),
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False), processing_class=tokenizer,
                      callbacks=[stop, StepTime()])
    last = get_last_checkpoint(out) if os.path.isdir(out) else None
    trainer.train(resume_from_checkpoint=last)
    # stop.stopped, not stop.asked: the notice may reach one rank only, and every rank must take the
    # same branch (save_model waits for all of them)
    if trainer.state.global_step < steps and stop.stopped:  # stopped by the notice, with a checkpoint
        if trainer.is_world_process_zero() and os.environ.get("LLMTRAIN_PREEMPT_MARKER"):
            with open(os.environ["LLMTRAIN_PREEMPT_MARKER"], "w") as marker:
                marker.write("step %d\n" % trainer.state.global_step)
    else:
        trainer.save_model(out)  # the final model beside the checkpoints, as run_clm.py does
    # The Trainer leaves the process group to the interpreter's exit, where gloo's threads can end a
    # rank with "terminate called without an active exception" (SIGABRT) after training finished,
    # or hang it: freeing the DDP model frees gloo's process group, whose destructor joins its
    # worker thread while holding the GIL that thread waits for (torch 2.13, seen by py-spy). So
    # the process group goes first, then the process, with nothing left to free.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
