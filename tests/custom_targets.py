"""Targets of `model=custom` that go wrong, each in one way (tests/test_custom_model.py), and one
whose work its environment sets (tests/test_bisect.py): the user's builders a test names as
`tests.custom_targets:NAME`. The good one is examples/my_model."""

from __future__ import annotations

import os
from typing import Any

import torch

from workloads.models.custom import CustomModel

#: Not a callable: `model.target=tests.custom_targets:NOT_CALLABLE`.
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


#: How many hidden layers `layers_from_environment` stacks (unset: 1); an environment's `env` sets it.
LAYERS_ENV = "COMPILEBENCH_TEST_LAYERS"
#: Width of its layers, and its batch: a layer's forward and backward are 6 x 64 x 256² FLOPs (25 M),
#: most of a step, so that a step's time follows the layer count on any machine.
WIDTH, BATCH = 256, 64


def layers_from_environment(size: str) -> CustomModel:
    """An MLP of $COMPILEBENCH_TEST_LAYERS hidden layers: an environment that sets 20 trains a step of
    20 times the work of one that leaves it unset, on any machine and under any load alike."""
    layers = int(os.environ.get(LAYERS_ENV, "1"))
    module = torch.nn.Sequential(
        *(m for _ in range(layers) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())),
        torch.nn.Linear(WIDTH, 1),
    )
    return CustomModel(
        module=module,
        loss=lambda module, x, y: torch.nn.functional.mse_loss(module(x).squeeze(1), y),
        make_batch=lambda batch_size, generator: (
            torch.randn(batch_size, WIDTH, generator=generator),
            torch.randn(batch_size, generator=generator),
        ),
        make_optimizer=lambda module: torch.optim.SGD(module.parameters(), lr=0.01),
        batch_size=BATCH,
        flops_per_item=6.0 * WIDTH * (layers * WIDTH + 1),
    )
