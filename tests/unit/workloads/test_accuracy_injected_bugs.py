"""Bugs of the compiled side alone fail the accuracy check (workloads/instruments/accuracy.py): gradients
scaled (x1.1, x0.5, x2, one matrix's x2), an optimizer step skipped, a batch norm's running variance
never updated, the optimizer's momentum changed, gradients scaled under clipping that scales them
back; and gradients zeroed or negated, the controls that the direction measure caught before
(issue 50). One tiny CPU cell per model and precision computes
the fp64 reference and eager's two runs once; each bug is one more run of the cell's own module (the
"compiled" side: the run without the eager stance), the bug injected into that run only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch.nn as nn

from tests.conftest import tiny_config
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import TrainStep
from workloads.contract.vocabulary import ACCURACY_FAIL, ACCURACY_FP64, ACCURACY_PASS
from workloads.instruments.accuracy import CHECK_STEPS, AccuracyCheck, References, TrainingState
from workloads.instruments.accuracy_runs import NORM_RATIO, trained_module
from workloads.train_cell import prepare_cell

#: A bug: a context manager around the compiled run of a cell's training step.
Bug = Callable[[TrainStep], contextlib.AbstractContextManager[None]]


@dataclass
class CheckedCell:
    """A tiny cell trained 3 steps, its check, the batches and saved state of the check's runs, and
    the references computed once."""

    model: str
    precision: str
    check: AccuracyCheck
    state: TrainingState
    batches: list[Any]
    references: References

    def row(self, bug: Bug) -> dict[str, Any]:
        """The check's row with `bug` injected into the compiled run alone."""
        step = self.state.step
        try:
            with bug(step):
                compiled = self.check.run(self.state, self.batches, eager=False)
        finally:
            self.state.restore()
        return self.check.row(self.references, compiled)


#: Each model's cheapest settings: resnet10t on 32-pixel images (its stages end at 1 x 1) runs a
#: step in a quarter of the tiny size's time.
CHEAPEST = {"gpt": {}, "resnet": {"model": {"image_size": 32}}}
#: A global gradient norm that every step's gradients exceed: clipping scales them to it.
CLIPPED = {"optim": {"grad_clip": 1e-4}}


def checked_cell(model: str, precision: str, clipped: str = "") -> CheckedCell:
    """The cell of `model` in `precision` (its gradients clipped with `clipped`) trained 3 steps, its
    fp64 and eager runs made."""
    overrides = {**CHEAPEST[model], **(CLIPPED if clipped else {})}
    cfg = cell_config_from_dict(tiny_config(model, "eager", precision={"name": precision}, **overrides))
    cell = prepare_cell(cfg, CellRecorder("c", 1))
    for _ in range(3):
        cell.step()
    check = AccuracyCheck(cfg)
    check.before_loop(cell)
    batches = [next(cell.step.batches) for _ in range(CHECK_STEPS * cell.step.grad_accum)]
    state = TrainingState(cell.step)
    references = check.references(state, batches)
    state.restore()
    return CheckedCell(model, precision, check, state, batches, references)


class CheckedCells(dict[str, CheckedCell]):
    """The checked cell of each `model-precision[-clipped]`, made when first asked for."""

    def __missing__(self, key: str) -> CheckedCell:
        self[key] = checked_cell(*key.split("-"))
        return self[key]


@pytest.fixture(scope="module")
def cells() -> CheckedCells:
    return CheckedCells()


# --- the bugs --------------------------------------------------------------------------------------


def gradients_times(factor: float, which: Callable[[nn.Module], list[str]] | None = None) -> Bug:
    """Each parameter's gradient (or those `which` names) times `factor` as the backward makes it."""

    @contextlib.contextmanager
    def bug(step: TrainStep) -> Iterator[None]:
        module = trained_module(step)
        names = which(module) if which else [name for name, _ in module.named_parameters()]
        params = dict(module.named_parameters())
        hooks = [params[name].register_hook(lambda g: g * factor) for name in names]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    return bug


def one_matrix(module: nn.Module) -> list[str]:
    """The middle one of the parameters with two or more dimensions (a Linear's or a conv's weight)."""
    matrices = [name for name, p in module.named_parameters() if p.ndim >= 2]
    return [matrices[len(matrices) // 2]]


def optimizer_step_skipped(which: int) -> Bug:
    """The optimizer step of the run's step `which` (0: the first) not taken."""

    @contextlib.contextmanager
    def bug(step: TrainStep) -> Iterator[None]:
        optimizer_step, calls = step.optimizer_step, iter(range(CHECK_STEPS))
        step.optimizer_step = lambda: None if next(calls) == which else optimizer_step()
        try:
            yield
        finally:
            step.optimizer_step = optimizer_step

    return bug


@contextlib.contextmanager
def running_var_never_updated(step: TrainStep) -> Iterator[None]:
    """Every batch norm's running variance put back to its start after each step's forward."""
    norms = [m for m in trained_module(step).modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert norms, "a model with batch norms"
    start = [m.running_var.clone() for m in norms]
    optimizer_step = step.optimizer_step

    def step_with_variances_reset() -> None:
        for m, var in zip(norms, start):
            m.running_var.copy_(var)
        optimizer_step()

    step.optimizer_step = step_with_variances_reset
    try:
        yield
    finally:
        step.optimizer_step = optimizer_step


def momentum_changed(momentum: float, beta1: float) -> Bug:
    """SGD's momentum (resnet) or Adam's first beta (gpt) changed in every parameter group."""

    @contextlib.contextmanager
    def bug(step: TrainStep) -> Iterator[None]:
        groups = step.update.optimizer.param_groups
        saved = [dict(group) for group in groups]
        for group in groups:
            if "betas" in group:
                group["betas"] = (beta1, group["betas"][1])
            else:
                group["momentum"] = momentum
        try:
            yield
        finally:
            for group, values in zip(groups, saved):
                group.update(values)

    return bug


BUGS: dict[str, Bug] = {
    "gradients-x1.1": gradients_times(1.1),
    "gradients-x0.5": gradients_times(0.5),
    "gradients-x2": gradients_times(2.0),
    "one-matrix-gradient-x2": gradients_times(2.0, one_matrix),
    "first-step-skipped": optimizer_step_skipped(0),
    "last-step-skipped": optimizer_step_skipped(CHECK_STEPS - 1),
    "momentum-0.9-to-0.8": momentum_changed(momentum=0.8, beta1=0.8),
    "running-var-never-updated": running_var_never_updated,
    "gradients-zeroed": gradients_times(0.0),
    "gradients-negated": gradients_times(-1.0),
}
#: The bugs each cell is tried with: every one that applies to its model.
CELL_BUGS = {
    f"{model}-{precision}": [bug for bug in BUGS if model == "resnet" or bug != "running-var-never-updated"]
    for model in ("gpt", "resnet")
    for precision in ("fp32", "bf16")
}


@contextlib.contextmanager
def no_bug(step: TrainStep) -> Iterator[None]:
    yield


# --- the tests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", list(CELL_BUGS))
def test_the_uninjected_run_passes_against_fp64(cells: CheckedCells, cell: str) -> None:
    """The control: the same run without a bug is within every limit, against fp64."""
    row = cells[cell].row(no_bug)
    assert row["accuracy"] == ACCURACY_PASS and row["accuracy_reference"] == ACCURACY_FP64, row


@pytest.mark.parametrize(("cell", "bug"), [(cell, bug) for cell, bugs in CELL_BUGS.items() for bug in bugs])
def test_a_bug_of_the_compiled_side_fails_accuracy(cells: CheckedCells, cell: str, bug: str) -> None:
    row = cells[cell].row(BUGS[bug])
    assert row["accuracy"] == ACCURACY_FAIL, row
    least = PRECISIONS[cells[cell].precision].accuracy_tolerance
    assert row["accuracy_rel_diff"] > row["accuracy_tolerance"] >= least


def test_a_scaled_gradient_is_seen_before_clipping_scales_it_back(cells: CheckedCells) -> None:
    """Gradients are recorded as the backward made them: with every step clipped, x2 gradients are
    the same after clipping, and so is AdamW's update; the recorded gradients' norms are 2x."""
    row = cells["gpt-fp32-clipped"].row(gradients_times(2.0))
    assert row["accuracy"] == ACCURACY_FAIL and row["accuracy_measure"] == NORM_RATIO, row
    assert row["accuracy_rel_diff"] == pytest.approx(1.0)
