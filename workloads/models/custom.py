"""Bring your own model: `model=custom model.target=my_pkg.my_module:build`.

The target is any importable callable. A cell calls it as `build(size)` (`size` is the cell's size
preset name, tiny .. xl, for the builder to read or ignore; `sweep --smoke` asks for `tiny`) and it
returns a `CustomModel`: everything a cell needs to train it. docs/custom-models.md walks through
an example (examples/my_model/).

What goes wrong with a target is said in one line: the submitting process imports it and checks
that it is callable before any cell is written (`check_target` in workloads/cell/catalog.py, the grid
check, torch-free as the rest of it); what the call
returns is checked in the cell (`build_custom_model`), where a wrong return value or a first step
that raises is recorded as the cell's `failed` status with the message.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn as nn

from workloads.cell.catalog import load_target
from workloads.cell.config import ConfigError
from workloads.cell.train import Batch


@dataclass
class CustomModel:
    """What `model.target` returns: the model and how to train it."""

    module: nn.Module
    """The model, on the CPU (the cell moves it to its device), initialised from the cell's seed:
    torch's generator is seeded before the builder is called."""
    loss: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    """(module, inputs, targets) -> the scalar loss of a batch; called under the cell's autocast.
    `module` may be the compiled wrapper: call it, do not reach into the original."""
    make_batch: Callable[[int, torch.Generator], Batch]
    """(batch_size, generator) -> (inputs, targets): one batch of synthetic data on the CPU, drawn
    from `generator` (seeded by the cell). A few are made once and cycled, as for the built-in models;
    `inputs` is what `module(inputs)` takes (torchscript traces with it)."""
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    """(module) -> the optimizer of its parameters."""
    batch_size: int = 32
    """Micro-batch when the config's `batch_size` is null."""
    items_per_sample: int = 1
    """What throughput counts per sample: 1 for an image, the sequence length for tokens."""
    flops_per_item: float | None = None
    """Training FLOPs per item (forward and backward) for MFU; None: counted once on the uncompiled
    model with torch's FlopCounterMode."""
    output_head: str | None = None
    """Qualified name (as `module.named_modules()` gives it) of the layer that makes the outputs,
    which precision=fp8 leaves in bf16; None converts every Linear layer fit for fp8."""
    read_batches: Callable[[str, int, torch.Generator], Iterator[Batch]] | None = None
    """Real data for `data.source=custom data.path=PATH`: (path, batch_size, generator) -> endless
    (inputs, targets) batches on the CPU; None: the model trains on synthetic data only."""


def build_custom_model(target: str, size: str) -> CustomModel:
    """Call the target as `build(size)` and check what it returned; ConfigError (one line) if it is
    not a CustomModel with usable fields."""
    builder = load_target(target)
    built = builder(size)
    if not isinstance(built, CustomModel):
        raise ConfigError(
            f"model.target={target} returned a {type(built).__name__}, not a "
            "workloads.models.custom.CustomModel"
        )
    if not isinstance(built.module, nn.Module):
        raise ConfigError(
            f"model.target={target}: CustomModel.module is a {type(built.module).__name__}, "
            "not a torch.nn.Module"
        )
    for field in ("loss", "make_batch", "make_optimizer"):
        if not callable(getattr(built, field)):
            raise ConfigError(f"model.target={target}: CustomModel.{field} is not callable")
    if built.read_batches is not None and not callable(built.read_batches):
        raise ConfigError(f"model.target={target}: CustomModel.read_batches is not callable")
    for field in ("batch_size", "items_per_sample"):
        value = getattr(built, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"model.target={target}: CustomModel.{field} must be a positive int, got {value!r}"
            )
    flops = built.flops_per_item
    if flops is not None and (isinstance(flops, bool) or not isinstance(flops, numbers.Real) or flops <= 0):
        raise ConfigError(
            f"model.target={target}: CustomModel.flops_per_item must be positive or None, got {flops!r}"
        )
    return built


def custom_batches(
    built: CustomModel,
    source: str,
    path: str | None,
    batch_size: int,
    device: torch.device,
    generator: torch.Generator,
    pool: int = 4,
) -> Iterator[Batch]:
    """Endless batches on `device`: `pool` synthetic batches made once and cycled (as the built-in
    synthetic sources), or the model's own reader of `path` for `data.source=custom`."""
    if source == "custom":
        if built.read_batches is None:
            raise ConfigError("data.source=custom: the model's CustomModel has no read_batches")
        return _to_device(built.read_batches(str(path), batch_size, generator), device)
    batches = [tuple(t.to(device) for t in built.make_batch(batch_size, generator)) for _ in range(pool)]

    def cycle() -> Iterator[Batch]:
        while True:
            yield from batches  # type: ignore[misc]

    return cycle()


def _to_device(batches: Iterator[Batch], device: torch.device) -> Iterator[Batch]:
    for x, y in batches:
        yield x.to(device), y.to(device)
    # A reader that ends would stop the cell with a bare StopIteration: say what happened.
    raise RuntimeError("CustomModel.read_batches ran out of batches; it must yield batches endlessly")
