"""A GPT in the nanoGPT architecture: pre-LayerNorm blocks, causal self-attention through
`scaled_dot_product_attention` (flash kernels on GPUs), GELU MLP, no biases, the token
embedding tied to the output head. Read top to bottom: config, attention, MLP, block, model.

The size presets reproduce nanoGPT's configs so that parameter counts and FLOP estimates
compare with the seminar report: `small` = train_shakespeare_char (10.65M parameters),
`medium` = train_gpt2 (123.59M non-embedding parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    """Transformer blocks."""
    n_head: int
    """Attention heads per block."""
    n_embd: int
    """Model width; head size is n_embd // n_head."""
    block_size: int
    """Context length T in tokens."""
    vocab_size: int
    """Vocabulary; 50304 = GPT-2's 50257 padded to a multiple of 64 (as nanoGPT)."""
    dropout: float
    """Dropout after attention, MLP and embeddings (0.2 for shakespeare-char, else 0)."""
    batch_size: int
    """Default micro-batch (sequences)."""
    grad_accum: int
    """Default gradient-accumulation micro-steps per optimizer step."""


GPT_SIZES: dict[str, GPTConfig] = {
    "tiny": GPTConfig(
        n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=65, dropout=0.0, batch_size=8, grad_accum=1
    ),
    "small": GPTConfig(
        n_layer=6,
        n_head=6,
        n_embd=384,
        block_size=256,
        vocab_size=65,
        dropout=0.2,
        batch_size=64,
        grad_accum=1,
    ),
    "medium": GPTConfig(
        n_layer=12,
        n_head=12,
        n_embd=768,
        block_size=1024,
        vocab_size=50304,
        dropout=0.0,
        batch_size=12,
        grad_accum=40,
    ),
    "large": GPTConfig(
        n_layer=24,
        n_head=16,
        n_embd=1024,
        block_size=1024,
        vocab_size=50304,
        dropout=0.0,
        batch_size=12,
        grad_accum=40,
    ),
    "xl": GPTConfig(
        n_layer=48,
        n_head=25,
        n_embd=1600,
        block_size=1024,
        vocab_size=50304,
        dropout=0.0,
        batch_size=4,
        grad_accum=40,
    ),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)  # q, k, v in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, head_size)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """One pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
                wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
                drop=nn.Dropout(cfg.dropout),
                h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
                ln_f=nn.LayerNorm(cfg.n_embd, bias=False),
            )
        )
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections: std 0.02 / sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; like nanoGPT, position embeddings are excluded by default
        (token embeddings stay: they are tied to, and counted as, the output head)."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of next-token prediction over the batch."""
        T = idx.size(1)
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def flops_per_token(self) -> float:
        """nanoGPT's training FLOPs per token: 6N + 12 * L * H * Q * T (PaLM appendix B)."""
        c = self.cfg
        return 6 * self.num_params() + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * c.block_size

    def optimizer_groups(self, weight_decay: float) -> list[dict]:
        """nanoGPT's AdamW groups: decay matrices (dim >= 2), not biases or norm weights."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
