"""A GPT language model: pre-LayerNorm transformer blocks, causal attention, tied embeddings."""

import math
from dataclasses import dataclass

import torch
from torch import nn
import torch.nn.functional as F


VOCAB_MULTIPLE = 64
# --attention: the scaled-dot-product-attention kernel tried first; the others stay enabled, in
# torch's own order, as fallbacks for inputs the first cannot take. torch picks among them per
# call on CUDA (when compiled: once, as the graph is traced); its CPU kernels ignore the order.
ATTENTION_KERNELS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH",
                     "cudnn": "CUDNN_ATTENTION"}


def padded_vocab(vocab_size):
    """The model's vocabulary: the tokenizer's, rounded up to a multiple of 64 (the embedding and
    output matrices then tile evenly on GPUs). The extra rows are never a target and are masked
    out when sampling."""
    return -(-int(vocab_size) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 256
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = True  # biases in Linear and LayerNorm; False as in many GPT-2-style trainers


class AttentionKernels:
    """A reusable context manager that puts one attention kernel first (torch.nn.attention.sdpa_kernel
    with set_priority, torch 2.6 or newer), or does nothing for "auto"."""

    def __init__(self, choice):
        self.order = None
        self._entered = []
        if choice != "auto":
            from torch.nn.attention import SDPBackend  # pylint: disable=import-outside-toplevel
            first = ATTENTION_KERNELS[choice]
            self.order = [getattr(SDPBackend, name) for name in
                          [first] + [name for name in ATTENTION_KERNELS.values() if name != first]]

    def __enter__(self):
        context = None
        if self.order is not None:
            from torch.nn.attention import sdpa_kernel  # pylint: disable=import-outside-toplevel
            context = sdpa_kernel(self.order, set_priority=True)
            context.__enter__()
        self._entered.append(context)
        return self

    def __exit__(self, *exc):
        context = self._entered.pop()
        return context.__exit__(*exc) if context is not None else False


def attention_kernels_problem(choice):
    """Why --attention CHOICE cannot work with this torch, or None."""
    if choice == "auto":
        return None
    if choice not in ATTENTION_KERNELS:
        return f"--attention must be one of auto, {', '.join(ATTENTION_KERNELS)} (got {choice!r})"
    try:
        import inspect  # pylint: disable=import-outside-toplevel
        from torch.nn.attention import sdpa_kernel  # pylint: disable=import-outside-toplevel
        if "set_priority" not in inspect.signature(sdpa_kernel).parameters:
            raise ImportError
    except (ImportError, TypeError, ValueError):
        return f"--attention {choice} needs torch 2.6 or newer (this is {torch.__version__}); use --attention auto"
    return None


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def fused_adamw_devices():
    """The device types this torch has a fused AdamW for (it checks only at the first step)."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices  # pylint: disable=import-outside-toplevel
    except ImportError:  # a torch without the list: CUDA only, as before 2.4
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(cfg.vocab_size, cfg.n_embd),
            "wpe": nn.Embedding(cfg.block_size, cfg.n_embd),
            "drop": nn.Dropout(cfg.dropout),
            "h": nn.ModuleList(Block(cfg) for _layer in range(cfg.n_layer)),
            "ln_f": nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
        })
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2: scale the init of projections into the residual stream by depth
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding=False):
        """Parameters counted once (the tied embedding too); non_embedding drops the position table."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def flops_per_token(self):
        """Training FLOPs per token (forward + backward), PaLM appendix B, as in nanoGPT."""
        c = self.config
        return 6 * self.num_params(non_embedding=True) + 12 * c.n_layer * c.n_embd * c.block_size

    def forward(self, idx, targets=None):
        T = idx.size(1)
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizer(self, weight_decay, lr):
        """AdamW; matrices decay, biases and LayerNorm gains do not. The fused kernel (one kernel
        for every parameter's update) where this torch has one for the parameters' device: CUDA,
        and the CPU since torch 2.4, where it takes about a third of the multi-tensor kernel's
        time. Elsewhere the multi-tensor (foreach) one, which torch would use by default only on
        CUDA: a parameter at a time costs a CPU step several times more optimizer time."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        devices = fused_adamw_devices()
        fused = all(p.device.type in devices and p.is_floating_point() for p in params)
        kernel = {"fused": True} if fused else {"foreach": True}
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **kernel)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, vocab_size=None):
        """Append max_new_tokens sampled tokens to idx (B, T); temperature 0 picks the most likely.
        vocab_size: the tokenizer's (the model's is padded); tokens past it are never picked."""
        for _token in range(max_new_tokens):
            logits, _loss = self(idx[:, -self.config.block_size:])
            idx = torch.cat((idx, sample_next(logits[:, -1, :], temperature, top_k, generator, vocab_size)), dim=1)
        return idx


# The temperatures sampling takes. It divides the float32 logits by the temperature: a temperature
# much below MIN overflows them to infinities, one past float32's range turns the masked rows' -inf
# into NaN, and either makes every probability NaN. Below MIN the most likely token is as good as
# certain (0 takes it outright), past MAX every token as likely as any other.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 1e4
TEMPERATURES = f"0 (the most likely token) or from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}"


def temperature_ok(temperature):
    """Whether sample_next takes temperature: one of TEMPERATURES (not NaN)."""
    return temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE


def sample_next(logits, temperature, top_k, generator=None, vocab_size=None):
    """The next token of each row of logits (B, V) as (B, 1): the most likely with temperature 0, else
    sampled from the top_k (0: all) after dividing by temperature (see temperature_ok); tokens from
    vocab_size on (the padding of the model's vocabulary) are never picked."""
    logits = logits.float()
    if vocab_size is not None and vocab_size < logits.size(-1):
        logits[:, vocab_size:] = float("-inf")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
