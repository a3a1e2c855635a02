"""Targets of `model=custom` that go wrong, each in one way (tests/system/test_custom_model.py): the
user's builders a test names as `tests.helpers.custom_targets:NAME`. The good one is examples/my_model."""

from __future__ import annotations

from typing import Any

import torch

from workloads.models.custom import CustomModel

#: Not a callable: `model.target=tests.helpers.custom_targets:NOT_CALLABLE`.
NOT_CALLABLE = 42


def returns_dict(size: str) -> dict[str, Any]:
    """What a user might return instead of a CustomModel."""
    return {"module": torch.nn.Linear(4, 2)}


def first_step_raises(size: str) -> CustomModel:
    """A model whose loss raises, as a user's bug does in the first step."""

    def loss(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("shape mismatch in my loss")

    return CustomModel(
        module=torch.nn.Linear(4, 2),
        loss=loss,
        make_batch=lambda batch_size, generator: (
            torch.randn(batch_size, 4, generator=generator),
            torch.randint(2, (batch_size,), generator=generator),
        ),
        make_optimizer=lambda module: torch.optim.SGD(module.parameters(), lr=0.1),
        batch_size=4,
        flops_per_item=1.0,  # so that the loss is first called by the first step, not by the FLOP count
    )
