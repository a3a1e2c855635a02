"""Targets of `model=custom` that go wrong, each in one way (tests/system/test_custom_model.py), and a
small one whose step time its environment sets (tests/system/test_bisect.py,
tests/system/test_compile_cache.py): the user's builders a test names as
`tests.helpers.custom_targets:NAME`. The good one is examples/my_model."""

from __future__ import annotations

import itertools
import os
import time
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


#: Seconds that `mlp_of_environment`'s loss waits in each step (unset: none), or several separated by
#: `/`, waited in turn step after step (`0.1/0.8`: a median step that the bootstrap cannot pin down);
#: an environment's `env` sets it.
STEP_WAIT_ENV = "COMPILEBENCH_TEST_STEP_WAIT_S"
#: Seconds that its forward waits where it runs eagerly, not under torch.compile (the eager cell, and
#: a paired cell's force_eager side): the speedup over eager grows by that wait.
EAGER_WAIT_ENV = "COMPILEBENCH_TEST_EAGER_WAIT_S"
#: Width of its one hidden layer, and its batch.
WIDTH, BATCH = 256, 64


class _EagerWaits(torch.nn.Sequential):
    """An MLP whose forward waits `eager_wait_s` where it is not being compiled."""

    def __init__(self, eager_wait_s: float, *layers: torch.nn.Module):
        super().__init__(*layers)
        self.eager_wait_s = eager_wait_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.eager_wait_s and not torch.compiler.is_compiling():  # dynamo traces no wait
            time.sleep(self.eager_wait_s)
        return super().forward(x)


def mlp_of_environment(size: str) -> CustomModel:
    """An MLP of one hidden layer whose every step also waits $COMPILEBENCH_TEST_STEP_WAIT_S seconds
    (in turn, where several), and whose eager forward $COMPILEBENCH_TEST_EAGER_WAIT_S more: an
    environment that sets them has steps at least that long, whatever the machine's speed or load."""
    waits = itertools.cycle(float(s) for s in os.environ.get(STEP_WAIT_ENV, "0").split("/"))
    eager_wait_s = float(os.environ.get(EAGER_WAIT_ENV, "0"))
    module = _EagerWaits(
        eager_wait_s, torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, 1)
    )

    def loss(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        time.sleep(next(waits))  # outside the compiled module: no graph break
        return torch.nn.functional.mse_loss(module(x).squeeze(1), y)

    return CustomModel(
        module=module,
        loss=loss,
        make_batch=lambda batch_size, generator: (
            torch.randn(batch_size, WIDTH, generator=generator),
            torch.randn(batch_size, generator=generator),
        ),
        make_optimizer=lambda module: torch.optim.SGD(module.parameters(), lr=0.01),
        batch_size=BATCH,
        flops_per_item=6.0 * WIDTH * (WIDTH + 1),
    )
