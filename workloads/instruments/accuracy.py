"""The accuracy check: after measuring, a compiled cell trains a few steps compiled against eager on
the same batches, weights and optimizer state, with eager against eager as the noise floor.

As PyTorch's harness (benchmarks/dynamo/common.py `check_accuracy`): the same inputs and starting
state for every run, two eager runs (under `torch.compiler.set_stance("force_eager")`) that must
agree before a compiled run is judged, the RNG reseeded before each; `pass` or `fail_accuracy`. The
loss of each of CHECK_STEPS full training steps (forward, backward, optimizer step) is compared:
the first shows the forward, the later ones the updates that the gradients made.

The pass rule: the compiled losses' largest relative difference from eager's may be at most
max(the precision's tolerance, multiplier x the noise floor). The tolerance is the harness's for
training (`Precision.accuracy_tolerance`: 1e-3 in fp32 and TF32, 1e-2 under bf16 or fp16 autocast);
the multiplier its allowance for a result's error against eager's own (torch/_dynamo/utils.py
`same`: 2, 3 in half precision). Where eager is not deterministic (CUDA's atomic adds in some
backward kernels), the floor says how far eager moves by itself, and a compiled run may move a few
times as far. The harness measures eager's own error against an fp64 copy of the model; a second
copy of the weights is what a cell that fills its GPU cannot afford, so the floor is eager's rerun.

Dropout is switched off for the check (`dropout_off`), where the model has any: a dropout mask
drawn by inductor is not eager's, so compiled and eager would differ by construction. That
changes modules' `training`, on which dynamo guards: the compiled module recompiles once for the
check (the tiny CPU GPT with inductor, its cache empty, on a busy 2-core host: the check took 11 s
with dropout, 0.08 s without). Counters, peak memory and steps were recorded before this moment
(workloads/instruments/base.py), so the recompile is in no column but `accuracy_s`. A model without
dropout is not touched and does not recompile.

A failure inside the check is recorded (`accuracy` = `error`, `accuracy_error`), never raised: the
cell's measurement stands. Torchscript is not checked: its traced module has no eager stance, and
dropout is fixed in its trace.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

from workloads.cell.catalog import NON_DYNAMO_BACKENDS
from workloads.cell.config import CellConfig
from workloads.cell.precision import PRECISIONS
from workloads.cell.train import PreparedCell, TrainStep
from workloads.contract.vocabulary import ACCURACY_ERROR, ACCURACY_FAIL, ACCURACY_PASS
from workloads.instruments.base import Instrument

#: torch's dropout modules, by their public names (not their private base class).
DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
#: Training steps per run. Adam's first update is lr x sign(gradient) whatever the gradient's size:
#: the third step's loss is the first that the gradients' magnitudes have reached.
CHECK_STEPS = 3


def noise_multiplier(autocast_dtype: str | None) -> float:
    """How many noise floors a compiled run may differ by: the harness's 2, 3 in half precision."""
    return 3.0 if autocast_dtype is not None else 2.0


def max_rel_diff(values: list[float], reference: list[float]) -> float:
    """The largest |value - reference| / |reference| over the steps; NaN where any side is NaN."""
    diffs = [
        abs(a - b) / abs(b) if b != 0 else (0.0 if a == b else math.inf) for a, b in zip(values, reference)
    ]
    return math.nan if any(math.isnan(d) for d in diffs) else max(diffs)


@contextlib.contextmanager
def dropout_off(module: nn.Module) -> Iterator[None]:
    """Where `module` has dropout (a dropout module with p > 0), every module but the normalisations
    with running statistics in eval mode (functional dropout, e.g. attention's, reads its module's
    `training`), each restored after; else nothing changes."""
    if not any(isinstance(m, DROPOUTS) and m.p > 0 for m in module.modules()):
        yield
        return
    # Batch norms (timm's subclasses included) keep training: their running statistics' updates
    # are part of the step the check compares.
    switched = [(m, m.training) for m in module.modules() if not getattr(m, "track_running_stats", False)]
    for m, _ in switched:
        m.training = False
    try:
        yield
    finally:
        for m, training in switched:
            m.training = training


class TrainingState:
    """Parameters, buffers, optimizer state and loss scale of a step, copied to host memory (a cell
    that fills its GPU still fits), put back in place: compiled graphs keep the same tensors."""

    def __init__(self, step: TrainStep):
        self.step = step
        live = {id(t): t for t in step.model.module.state_dict(keep_vars=True).values()}
        self.tensors = [(t, _host_copy(t)) for t in live.values()]
        self.optimizer = {
            p: {k: _host_copy(v) if isinstance(v, torch.Tensor) else v for k, v in state.items()}
            for p, state in step.update.optimizer.state.items()
        }
        self.scaler = step.scaler.state_dict()

    @torch.no_grad()
    def restore(self) -> None:
        for tensor, saved in self.tensors:
            tensor.copy_(saved)
        live = self.step.update.optimizer.state
        for p in [p for p in live if p not in self.optimizer]:
            del live[p]
        for p, saved_state in self.optimizer.items():
            state = live[p]
            for key, value in saved_state.items():
                if isinstance(value, torch.Tensor) and isinstance(state.get(key), torch.Tensor):
                    state[key].copy_(value)
                else:
                    state[key] = value
        if self.step.scaler.is_enabled():
            self.step.scaler.load_state_dict(self.scaler)
        self.step.update.optimizer.zero_grad(set_to_none=not self.step.keep_grads)


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True)


class AccuracyCheck(Instrument):
    """After a compiled cell finished: `accuracy` (pass | fail_accuracy | error), the compiled losses'
    largest relative difference from eager's, eager's from itself, the limit and the check's time."""

    def __init__(self, cfg: CellConfig):
        self.seed = cfg.seed
        precision = PRECISIONS[cfg.precision.name]
        self.tolerance = precision.accuracy_tolerance
        self.multiplier = noise_multiplier(precision.autocast_dtype)
        self.cell: PreparedCell | None = None

    @classmethod
    def for_cell(cls, cfg: CellConfig, world_size: int, repeat: int = 0) -> Instrument:
        """The check for the first replicate of a dynamo-compiled cell of one process; else a no-op
        (eager is the reference, torchscript has no eager stance, ranks would each check alone). One
        replicate answers for all: the check's steps do not depend on the host's speed, and with
        dropout it recompiles (13 s of gpt small's inductor cell on the H100, docs/measurement.md)."""
        checked = cfg.backend.name not in NON_DYNAMO_BACKENDS and world_size == 1 and repeat == 0
        return cls(cfg) if checked else Instrument()

    def before_loop(self, cell: PreparedCell) -> None:
        self.cell = cell

    def after_finished(self) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            row = self._check()
        except Exception as error:  # the measurement stands: the check says what went wrong
            row = {"accuracy": ACCURACY_ERROR, "accuracy_error": f"{type(error).__name__}: {error}"[:2000]}
        return {**row, "accuracy_s": time.perf_counter() - start}

    def _check(self) -> dict[str, Any]:
        assert self.cell is not None
        step = self.cell.step
        stream = step.batches
        batches = [next(stream) for _ in range(CHECK_STEPS * step.grad_accum)]
        state = TrainingState(step)
        devices = [self.cell.device] if self.cell.device.type == "cuda" else []
        try:
            with dropout_off(step.model.module), torch.random.fork_rng(devices=devices):
                eager = self._losses(step, state, batches, eager=True)
                rerun = self._losses(step, state, batches, eager=True)
                compiled = self._losses(step, state, batches, eager=False)
        finally:
            step.batches = stream
            state.restore()
        floor = max_rel_diff(rerun, eager)
        diff = max_rel_diff(compiled, eager)
        limit = max(self.tolerance, self.multiplier * floor)
        return {
            "accuracy": ACCURACY_PASS if diff <= limit else ACCURACY_FAIL,
            "accuracy_rel_diff": diff,
            "accuracy_noise_floor": floor,
            "accuracy_tolerance": limit,
        }

    def _losses(
        self, step: TrainStep, state: TrainingState, batches: list[Any], *, eager: bool
    ) -> list[float]:
        """CHECK_STEPS steps from the saved state on `batches`, the RNG at the cell's seed."""
        state.restore()
        torch.manual_seed(self.seed)
        step.batches = iter(batches)
        stance = torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext()
        with stance:
            return [step()[0].item() for _ in range(CHECK_STEPS)]
