"""The fp8 cross-check of issue 26: a 4-layer MLP, 4096 -> 16384 -> 4096 -> 16384 -> 4096, trained as a
`model=custom` cell, every Linear fit for fp8 (no output head is kept in bf16):

    PYTHONPATH=. compilebench sweep model=custom model.target=examples.benchmarks.fp8_mlp:build \
        precision=bf16,fp8 backend=eager,inductor device=cuda

A batch is ROWS rows of 4096 features regressed onto a random target (mean squared error); AdamW.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from workloads.models.custom import CustomModel

WIDTH, HIDDEN = 4096, 16384
#: Rows per batch: each layer's matmul is ROWS x 4096 x 16384, compute-bound on an H100 in bf16 and fp8.
ROWS = 16384


def build(size: str) -> CustomModel:
    module = nn.Sequential(
        nn.Linear(WIDTH, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, HIDDEN),
        nn.ReLU(),
        nn.Linear(HIDDEN, WIDTH),
    )

    def make_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch_size, WIDTH, generator=generator), torch.randn(
            batch_size, WIDTH, generator=generator
        )

    return CustomModel(
        module=module,
        loss=lambda m, x, y: nn.functional.mse_loss(m(x).float(), y),
        make_batch=make_batch,
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4),
        batch_size=ROWS,
        # 4 Linear layers, forward and backward: 3 matmuls of 2 x 4096 x 16384 FLOPs each per row.
        flops_per_item=4 * 3 * 2 * WIDTH * HIDDEN,
    )
