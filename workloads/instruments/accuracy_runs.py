"""What one run of the accuracy check records, the fp64 copy of a training step it is judged against,
and the per-tensor error between two runs (workloads/instruments/accuracy.py applies the rule).

A run is a few full training steps from one saved state; it records, as host copies, the losses of
its steps (one tensor, `loss`), the first step's gradient of every trained parameter as the
optimizer receives it (`NAME.grad`: after accumulation and clipping, before the update), and every
parameter and floating buffer after the last step (`NAME`: the updates that the gradients made, and
batch norms' running statistics). The first step's gradients are the only ones from the same
parameters in every run; later ones start from already different updates.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn as nn

from workloads.cell.precision import PRECISIONS
from workloads.cell.train import OptimizerUpdate, TrainedModel, TrainStep

#: A run's record: tensor name -> host copy.
Record = dict[str, torch.Tensor]
LOSS = "loss"


def trained_module(step: TrainStep) -> nn.Module:
    """The module as written (its parameter names), under a whole-model compile's wrapper."""
    module = step.model.module
    return getattr(module, "_orig_mod", module)


def record_run(step: TrainStep, module: nn.Module, steps: int) -> Record:
    """Run `steps` optimizer steps of `step` (whose parameters are `module`'s) and record them."""
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    record: Record = {}
    optimizer_step = step.optimizer_step

    def record_gradients_then_step() -> None:
        if not record:  # the first step's
            for name, p in params.items():
                record[f"{name}.grad"] = _host(p.grad if p.grad is not None else torch.zeros_like(p))
        optimizer_step()

    step.optimizer_step = record_gradients_then_step
    try:
        losses = torch.stack([step()[0].detach() for _ in range(steps)])
    finally:
        step.optimizer_step = optimizer_step
    record[LOSS] = _host(losses)
    record.update((name, _host(p)) for name, p in params.items())
    record.update((name, _host(b)) for name, b in module.named_buffers() if b.is_floating_point())
    return record


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


def fp64_step(step: TrainStep, module: nn.Module, batches: list[Any]) -> TrainStep:
    """The same training step on an fp64 copy of `module` and its optimizer (state as it is now),
    without autocast or loss scaling, on `batches` with their floating tensors in fp64."""
    copied, optimizer = copy.deepcopy((module, step.update.optimizer))  # one memo: the same parameters
    for m in copied.modules():
        # nn.Module.compile (regional compilation) keeps a compiled call of the *original* module; the
        # copy must call its own forward.
        m._compiled_call_impl = None
    copied.to(torch.float64)  # in place: the optimizer's parameters are the copy's
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and key != "step":
                state[key] = value.to(torch.float64)
    return TrainStep(
        model=TrainedModel(copied, step.model.loss_fn, step.model.device),
        update=OptimizerUpdate(optimizer, optimizer.step, step.update.grad_clip),
        batches=iter([tuple(_fp64(t) for t in batch) for batch in batches]),
        precision=PRECISIONS["fp32"],
        grad_accum=step.grad_accum,
    )


def _fp64(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64) if t.is_floating_point() else t


def by_direction(name: str) -> bool:
    """Whether a tensor is judged by its direction, 1 - cos(result, reference): every one but the
    losses (see docs/measurement.md). Relative L2 flagged correct compiles: Adam's first update is
    lr x g / |g| per element, so an element whose gradient is below its reduction's rounding moves by
    +-lr whichever its sign (a batch norm's shift, started at 0, 1.6% apart after 3 steps of
    resnet10t under inductor, eager's 8e-7 from fp64), and inductor's stem gradients of the same
    cell were 4.4e-3 from fp64's (eager's 6.4e-6); 1 - cos read 1.2e-4 and 1e-5 there, while a
    zeroed gradient reads 1 and a negated one 2."""
    return name != LOSS


def tensor_errors(result: Record, reference: Record, device: torch.device) -> dict[str, float]:
    """Each tensor's error against the reference, from norms in fp64 on `device` read back at once:
    ||result - reference|| / ||reference|| (relative L2) for the losses, 1 - cos(result, reference)
    for the others (`by_direction`). 0 where both are 0, inf
    (relative) or 1 (direction) where one is, NaN where either has a NaN."""
    norms = []
    for name, ref in reference.items():
        r, a = ref.to(device, torch.float64).flatten(), result[name].to(device, torch.float64).flatten()
        vector_norm = torch.linalg.vector_norm
        norms.append(torch.stack([vector_norm(a - r), vector_norm(r), vector_norm(a), torch.dot(a, r)]))
    return {name: _error(name, *values) for name, values in zip(reference, torch.stack(norms).tolist())}


def _error(name: str, diff: float, norm: float, result_norm: float, dot: float) -> float:
    if any(math.isnan(v) for v in (diff, norm, result_norm, dot)):
        return math.nan
    if by_direction(name):
        if norm == 0 or result_norm == 0:
            return 0.0 if norm == result_norm else 1.0
        return max(0.0, 1.0 - dot / (norm * result_norm))
    if norm == 0:
        return 0.0 if diff == 0 else math.inf
    return diff / norm
