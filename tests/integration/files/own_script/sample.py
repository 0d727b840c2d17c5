"""Generates text from train.py's checkpoint (the same settings: config file and flags)."""
import os

import torch

from model import TinyLM

out_dir = os.environ.get("LLMTRAIN_CHECKPOINT_DIR", "out")
start = "def "
num_new_tokens = 16
seed = 1337
config_name = "defaults"
exec(open("configurator.py").read())

checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu")
config = checkpoint["config"]
model = TinyLM(vocab_size=256, block_size=config["block_size"], n_embd=config["n_embd"])
model.load_state_dict(checkpoint["model"])
model.eval()
torch.manual_seed(seed)
idx = torch.tensor([list(start.encode())], dtype=torch.long)
with torch.no_grad():
    for _token in range(num_new_tokens):
        logits, _loss = model(idx[:, -config["block_size"]:])
        nxt = torch.multinomial(torch.softmax(logits[:, -1, :], dim=-1), num_samples=1)
        idx = torch.cat([idx, nxt], dim=1)
print(bytes(idx[0].tolist()).decode("utf-8", errors="replace"))
