"""fp16's loss scaling in the training step, on the CPU: a step whose gradients overflowed is skipped
and the scale lowered; every other precision gets a disabled GradScaler, whose calls change nothing."""

from __future__ import annotations

import math

import torch

from tests.conftest import TINY_CELL, merge
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.train_cell import prepare_cell


def prepared(precision: str):
    cfg = cell_config_from_dict(
        merge({**TINY_CELL, "model": {"name": "gpt"}}, {"precision": {"name": precision}})
    )
    return prepare_cell(cfg, CellRecorder("scaling", 1))


def parameters(step) -> list[torch.Tensor]:
    return [p.detach().clone() for p in step.params]


def test_fp16_skips_a_step_whose_gradients_overflowed_and_lowers_the_scale() -> None:
    step = prepared("fp16").step
    assert step.scaler.is_enabled()
    loss, _ = step()  # a normal step: the parameters move
    assert math.isfinite(loss.item())
    scale, before = step.scaler.get_scale(), parameters(step)
    # The next backward yields infinite gradients: the scaler must skip the optimizer and halve its scale.
    handles = [p.register_hook(lambda grad: torch.full_like(grad, math.inf)) for p in step.params]
    step()
    for handle in handles:
        handle.remove()
    assert all(torch.equal(a, b) for a, b in zip(before, parameters(step)))
    assert step.scaler.get_scale() == scale / 2
    step()  # and trains on
    assert not all(torch.equal(a, b) for a, b in zip(before, parameters(step)))


def test_other_precisions_step_through_a_disabled_scaler() -> None:
    step = prepared("bf16").step
    assert not step.scaler.is_enabled()
    assert step.optimizer_step == step.update.step  # the update's own step, not the scaler's
    before = parameters(step)
    loss, _ = step()
    assert math.isfinite(loss.item())
    assert not all(torch.equal(a, b) for a, b in zip(before, parameters(step)))
