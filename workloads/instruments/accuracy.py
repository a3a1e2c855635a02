"""The accuracy check: after measuring, a compiled cell trains a few steps compiled against eager on
the same batches, weights and optimizer state, and each judged quantity is held against eager's own
error, as PyTorch's harness does (benchmarks/dynamo/common.py `check_accuracy`, torch/_dynamo/
utils.py `same`: RMSE against an fp64 run, eager's own RMSE the floor).

Runs (workloads/instruments/accuracy_runs.py records them): an fp64 copy of the model and optimizer
where it fits on the device (the reference), eager twice (under `torch.compiler.set_stance(
"force_eager")`), then compiled; the same inputs, starting state and RNG seed for each. Each run
records its CHECK_STEPS losses, its first step's gradients (before clipping) and its parameters and
buffers after the last step. Judged (accuracy_runs.tensor_errors): the losses by relative L2; each
gradient and each parameter's and buffer's update (after - start) by direction (1 - cos) and by the
ratio of its norm to the reference's, which sees scale. A (quantity, measure) passes when its error
against the reference (fp64, else eager's first run) is at most max(the least limit, multiplier x
eager's own error), eager's own being the larger of eager's error against fp64 and its rerun's
against itself (nondeterministic kernels). The least limit is the harness's training tolerance
(`Precision.accuracy_tolerance`: 1e-3 in fp32 and TF32, 1e-2 under bf16 or fp16 autocast), for a
norm's ratio at least NORM_TOLERANCE; the multiplier is `same`'s (2, 3 in half precision).
`fail_accuracy` where any fails; the row names the worst (the largest error against its limit): the
quantity, its measure, its error, eager's and the limit.

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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from workloads.cell.catalog import NON_DYNAMO_BACKENDS
from workloads.cell.config import CellConfig
from workloads.cell.precision import PRECISIONS
from workloads.cell.train import PreparedCell, TrainStep
from workloads.contract.vocabulary import (
    ACCURACY_EAGER,
    ACCURACY_ERROR,
    ACCURACY_FAIL,
    ACCURACY_FP64,
    ACCURACY_PASS,
)
from workloads.instruments.accuracy_runs import (
    NORM_RATIO,
    Record,
    fp64_step,
    record_run,
    tensor_errors,
    trained_module,
)
from workloads.instruments.base import Instrument

#: torch's dropout modules, by their public names (not their private base class).
DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
#: Training steps per run. Adam's first update is lr x sign(gradient) whatever the gradient's size:
#: the third step's loss is the first that the gradients' magnitudes have reached.
CHECK_STEPS = 3


#: The least limit of a norm's ratio: a correct compile's arithmetic moved norms by more than fp32's
#: 1e-3 (inductor's resnet10t on the CPU after 8 steps: an update's 3.2e-3, a gradient's 1.5e-3,
#: eager's own 4e-7 and 3e-7), times 3, the harness's allowance in half precision: its half-precision
#: tolerance. The smallest scale bug it lets through in fp32: every gradient x1.01.
NORM_TOLERANCE = 1e-2


def noise_multiplier(autocast_dtype: str | None) -> float:
    """How many noise floors a compiled run may differ by: the harness's 2, 3 in half precision."""
    return 3.0 if autocast_dtype is not None else 2.0


@dataclass(frozen=True)
class TensorResult:
    """One quantity's judgement by one measure: the compiled run's error, eager's own and the largest
    that passes."""

    name: str
    measure: str
    error: float
    floor: float
    limit: float

    @property
    def passed(self) -> bool:
        return self.error <= self.limit  # False for NaN

    @property
    def badness(self) -> tuple[bool, float]:
        """Sorts the worst last: failing first, then by error over limit (NaN worst of all)."""
        ratio = math.inf if math.isnan(self.error) else self.error / self.limit
        return (not self.passed, ratio)


def judge(
    compiled: dict[tuple[str, str], float],
    eager_rerun: dict[tuple[str, str], float],
    eager_vs_fp64: dict[tuple[str, str], float] | None,
    tolerance: float,
    multiplier: float,
) -> list[TensorResult]:
    """Each (quantity, measure)'s result from its errors: the compiled run's against the reference,
    eager's rerun against eager, and (with an fp64 reference) eager's against it."""
    results = []
    for key, error in compiled.items():
        floor = max(eager_rerun[key], eager_vs_fp64[key] if eager_vs_fp64 is not None else 0.0)
        least = max(tolerance, NORM_TOLERANCE) if key[1] == NORM_RATIO else tolerance
        results.append(TensorResult(*key, error, floor, max(least, multiplier * floor)))
    return results


@dataclass(frozen=True)
class References:
    """What a compiled run is judged against: the state the runs start from, eager's two runs and the
    fp64 run (None where it could not be made)."""

    start: Record
    eager: Record
    rerun: Record
    fp64: Record | None


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

    def start(self) -> Record:
        """The saved parameters and buffers by their names in the trained module (the updates' start)."""
        saved = {id(t): copy for t, copy in self.tensors}
        module = trained_module(self.step)
        named = [*module.named_parameters(), *module.named_buffers()]
        return {name: saved[id(t)] for name, t in named if id(t) in saved}

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
    """After a compiled cell finished: `accuracy` (pass | fail_accuracy | error), the worst tensor with
    its error, eager's own error and its limit, the reference (fp64 or eager) and the check's time."""

    def __init__(self, cfg: CellConfig):
        self.seed = cfg.seed
        precision = PRECISIONS[cfg.precision.name]
        self.tolerance = precision.accuracy_tolerance
        self.multiplier = noise_multiplier(precision.autocast_dtype)
        # fp8's Linear layers compute in fp8 by design: an fp64 copy would not be the same model.
        self.fp64_reference = not precision.float8_linears
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
        step, device = self.cell.step, self.cell.device
        stream = step.batches
        batches = [next(stream) for _ in range(CHECK_STEPS * step.grad_accum)]
        state = TrainingState(step)
        devices = [device] if device.type == "cuda" else []
        try:
            with dropout_off(step.model.module), torch.random.fork_rng(devices=devices):
                references = self.references(state, batches)
                compiled = self.run(state, batches, eager=False)
        finally:
            step.batches = stream
            state.restore()
        return self.row(references, compiled)

    def references(self, state: TrainingState, batches: list[Any]) -> References:
        """The fp64 run (where it fits), then eager's two, from `state` on `batches`."""
        fp64 = self._fp64_run(state.step, batches) if self.fp64_reference else None
        eager = self.run(state, batches, eager=True)
        return References(state.start(), eager, self.run(state, batches, eager=True), fp64)

    def row(self, references: References, compiled: Record) -> dict[str, Any]:
        """The check's columns: the result, and the worst (quantity, measure) with its numbers."""
        assert self.cell is not None
        device, start, fp64 = self.cell.device, references.start, references.fp64
        results = judge(
            tensor_errors(compiled, fp64 if fp64 is not None else references.eager, start, device),
            tensor_errors(references.rerun, references.eager, start, device),
            tensor_errors(references.eager, fp64, start, device) if fp64 is not None else None,
            self.tolerance,
            self.multiplier,
        )
        worst = max(results, key=lambda r: r.badness)
        return {
            "accuracy": ACCURACY_PASS if all(r.passed for r in results) else ACCURACY_FAIL,
            "accuracy_worst_tensor": worst.name,
            "accuracy_measure": worst.measure,
            "accuracy_rel_diff": worst.error,
            "accuracy_noise_floor": worst.floor,
            "accuracy_tolerance": worst.limit,
            "accuracy_reference": ACCURACY_FP64 if fp64 is not None else ACCURACY_EAGER,
        }

    def run(self, state: TrainingState, batches: list[Any], *, eager: bool) -> Record:
        """CHECK_STEPS steps from the saved state on `batches`, the RNG at the cell's seed."""
        step = state.step
        state.restore()
        torch.manual_seed(self.seed)
        step.batches = iter(batches)
        stance = torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext()
        with stance:
            return record_run(step, trained_module(step), CHECK_STEPS)

    def _fp64_run(self, step: TrainStep, batches: list[Any]) -> Record | None:
        """The fp64 reference run from the state as it is now; None where it cannot be made or run: it
        does not fit the device, or a custom model's own code mixes in other dtypes (as the harness,
        which then judges against eager alone)."""
        torch.manual_seed(self.seed)
        try:
            reference = fp64_step(step, trained_module(step), batches)
            with torch.compiler.set_stance("force_eager"):
                return record_run(reference, reference.model.module, CHECK_STEPS)
        except Exception:  # the check goes on against eager: accuracy_reference says so
            return None
        finally:
            reference = None  # its weights and optimizer state leave the device before the next runs
            if self.cell is not None and self.cell.device.type == "cuda":
                torch.cuda.empty_cache()
