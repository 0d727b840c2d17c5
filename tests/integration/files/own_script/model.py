"""A tiny causal language model: token and position embeddings, one masked self-attention
layer, an MLP and a linear head."""
import torch
from torch import nn
from torch.nn import functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        self.attn = nn.MultiheadAttention(n_embd, num_heads=2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.norm = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        h = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), diagonal=1)
        h = h + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        h = h + self.mlp(h)
        logits = self.head(self.norm(h))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
