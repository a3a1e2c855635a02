"""What one run of the accuracy check records, the fp64 copy of a training step it is judged against,
and each judged quantity's error between two runs (workloads/instruments/accuracy.py applies the rule).

A run is a few full training steps from one saved state; it records, as host copies, the losses of
its steps (one tensor, `loss`), the first step's gradient of every trained parameter as the backward
made it (`NAME.grad`: after accumulation, unscaled, before clipping and the update) and every
parameter and buffer after the last step (`NAME`). The first step's gradients are the only ones from
the same parameters in every run; later ones start from already different updates. What is judged
(`tensor_errors`): the losses, the gradients, and each parameter's and buffer's update over the run
(`NAME.update`: after - before, before being the saved state), each by its measures (`MEASURES`).
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
#: The measures (run.parquet `accuracy_measure`): ||c - r|| / ||r||, 1 - cos(c, r), | ||c|| / ||r|| - 1 |.
REL_L2, ONE_MINUS_COS, NORM_RATIO = "rel_l2", "1-cos", "norm_ratio"


def measures(quantity: str) -> tuple[str, ...]:
    """How a judged quantity is measured: the losses by relative L2; a gradient or an update by its
    direction and by its norm's ratio, each with its own limit (docs/measurement.md: inductor's
    resnet10t updates were 2.5e-2 apart from fp64's in relative L2, a direction error that 1 - cos
    reads 3.2e-4, their norms 3.2e-3)."""
    return (REL_L2,) if quantity == LOSS else (ONE_MINUS_COS, NORM_RATIO)


def trained_module(step: TrainStep) -> nn.Module:
    """The module as written (its parameter names), under a whole-model compile's wrapper."""
    module = step.model.module
    return getattr(module, "_orig_mod", module)


def record_run(step: TrainStep, module: nn.Module, steps: int) -> Record:
    """Run `steps` optimizer steps of `step` (whose parameters are `module`'s) and record them."""
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    record: Record = {}
    clip_gradients = step.clip_gradients

    def record_gradients_then_clip() -> None:
        if not record:  # the first step's, unscaled where a loss scaler scaled them
            scale = step.scaler.get_scale() if step.scaler.is_enabled() else 1.0
            for name, p in params.items():
                grad = _host(p.grad if p.grad is not None else torch.zeros_like(p))
                record[f"{name}.grad"] = grad.div_(scale) if scale != 1.0 else grad
        clip_gradients()

    step.clip_gradients = record_gradients_then_clip
    try:
        losses = torch.stack([step()[0].detach() for _ in range(steps)])
    finally:
        del step.clip_gradients  # the method again
    record[LOSS] = _host(losses)
    record.update((name, _host(p)) for name, p in params.items())
    record.update((name, _host(b)) for name, b in module.named_buffers())
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


def tensor_errors(
    result: Record, reference: Record, start: Record, device: torch.device
) -> dict[tuple[str, str], float]:
    """Each judged quantity's error against the reference, by each of its `measures`, keyed (quantity,
    measure): a tensor of `start` (a parameter or buffer) as its update, `NAME.update` = after -
    start, any other as it is; from norms in fp64 on `device` read back at once. 0 where both are 0,
    inf (relative L2, norm ratio) or 1 (1 - cos) where one is, NaN where either has a NaN."""
    quantities, norms = [], []
    for name, ref in reference.items():
        r, a = ref.to(device, torch.float64).flatten(), result[name].to(device, torch.float64).flatten()
        if name in start:
            before = start[name].to(device, torch.float64).flatten()
            r, a, name = r - before, a - before, f"{name}.update"
        vector_norm = torch.linalg.vector_norm
        quantities.append(name)
        norms.append(torch.stack([vector_norm(a - r), vector_norm(r), vector_norm(a), torch.dot(a, r)]))
    return {
        (name, measure): _error(measure, *values)
        for name, values in zip(quantities, torch.stack(norms).tolist())
        for measure in measures(name)
    }


def _error(measure: str, diff: float, norm: float, result_norm: float, dot: float) -> float:
    if any(math.isnan(v) for v in (diff, norm, result_norm, dot)):
        return math.nan
    if measure == ONE_MINUS_COS:
        if norm == 0 or result_norm == 0:
            return 0.0 if norm == result_norm else 1.0
        return max(0.0, 1.0 - dot / (norm * result_norm))
    if norm == 0:
        return 0.0 if (diff if measure == REL_L2 else result_norm) == 0 else math.inf
    return diff / norm if measure == REL_L2 else abs(result_norm / norm - 1.0)
