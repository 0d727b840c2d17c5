"""Samples from the newest checkpoint-N/ of train.py, as a user's own sampling script: its
standard output is the run's samples.

    python sample.py PROMPT...
"""
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.trainer_utils import get_last_checkpoint

checkpoint = get_last_checkpoint(os.environ["LLMTRAIN_CHECKPOINT_DIR"])
tokenizer = AutoTokenizer.from_pretrained(checkpoint)
model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
torch.manual_seed(0)
print("checkpoint %s" % os.path.basename(checkpoint))
for prompt in sys.argv[1:]:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=True, top_k=20, pad_token_id=tokenizer.eos_token_id)
    print(tokenizer.decode(out[0]))
