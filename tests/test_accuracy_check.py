"""The accuracy check of compiled cells (workloads/instruments/accuracy.py): a correct compile passes
with a small difference, a miscompiling one fails without losing the cell, eager is not checked, and
a model with dropout is checked with it off and left as it was."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import torch.nn as nn

from workloads.cell.config import cell_config_from_dict
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import PreparedCell
from workloads.contract.vocabulary import ACCURACY_ERROR, ACCURACY_FAIL, ACCURACY_PASS, COMPLETED
from workloads.instruments.accuracy import AccuracyCheck, max_rel_diff
from workloads.instruments.dynamo_records import compile_stats
from workloads.run import run_cell
from workloads.train_cell import prepare_cell

FP32_TOLERANCE = PRECISIONS["fp32"].accuracy_tolerance


def test_a_compiled_cell_passes_with_a_small_difference_and_eager_agrees_with_itself(tiny_cells) -> None:
    cell = tiny_cells.get("gpt", "inductor")
    run = cell.run
    cell.assert_exact_schemas()
    assert run["status"] == COMPLETED and run["accuracy"] == ACCURACY_PASS
    assert run["accuracy_noise_floor"] == 0.0  # eager on the CPU, same batches and state: bit for bit
    assert run["accuracy_tolerance"] == FP32_TOLERANCE  # a floor of 0 leaves the precision's tolerance
    assert 0 <= run["accuracy_rel_diff"] < FP32_TOLERANCE and run["accuracy_s"] > 0
    assert run["accuracy_error"] is None


def test_a_miscompiling_backend_fails_accuracy_and_the_cell_keeps_its_measurement(tiny_cells) -> None:
    """Inductor's own fault injection for accuracy tooling: relu(x) computes relu(x) + 1."""
    bug = {"options": {"cpp.inject_relu_bug_TESTING_ONLY": "accuracy"}}
    run = tiny_cells.get("resnet", "inductor", backend=bug).run
    assert run["status"] == COMPLETED and run["median_step_ms"] > 0
    assert run["accuracy"] == ACCURACY_FAIL
    assert run["accuracy_rel_diff"] > run["accuracy_tolerance"] >= FP32_TOLERANCE
    assert run["accuracy_noise_floor"] == 0.0


def test_the_eager_cell_is_not_checked(tiny_cells) -> None:
    run = tiny_cells.get("gpt", "eager").run
    assert run["accuracy"] is None and run["accuracy_rel_diff"] is None and run["accuracy_s"] is None


def test_a_failure_inside_the_check_is_recorded_and_the_cell_completes(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: AccuracyCheck) -> dict:
        raise RuntimeError("the check broke")

    monkeypatch.setattr(AccuracyCheck, "_check", broken)
    status = run_cell(cell_config_from_dict(tiny_config("gpt", "aot_eager")), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    assert status == COMPLETED and run["status"] == COMPLETED and run["measured_steps"] == 6
    assert run["accuracy"] == ACCURACY_ERROR and run["accuracy_error"] == "RuntimeError: the check broke"


def checked_cell(tiny_config, dropout: float) -> tuple[PreparedCell, AccuracyCheck]:
    """A tiny inductor GPT trained a few steps, as the loop leaves it, with its check."""
    cfg = cell_config_from_dict(tiny_config("gpt", "inductor", model={"dropout": dropout}))
    cell = prepare_cell(cfg, CellRecorder("c", 1))
    for _ in range(3):
        cell.step()
    check = AccuracyCheck.for_cell(cfg, world_size=1)
    check.before_loop(cell)
    return cell, check


def test_a_model_with_dropout_is_checked_without_it_and_left_as_it_was(tiny_config) -> None:
    """Dropout off: eager agrees with itself bit for bit and the compile passes; afterwards every
    module trains again with its dropout, the weights are those before the check, and the compiled
    module recompiled once (for dropout off), as docs/measurement.md says."""
    cell, check = checked_cell(tiny_config, dropout=0.2)
    module = cell.step.model.module
    dropouts = [m for m in module.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(m.p == 0.2 for m in dropouts)
    weights = {name: p.detach().clone() for name, p in module.named_parameters()}
    before = compile_stats()
    row = check.after_finished()
    assert row["accuracy"] == ACCURACY_PASS and row["accuracy_noise_floor"] == 0.0
    assert row["accuracy_rel_diff"] < FP32_TOLERANCE
    assert all(m.training for m in module.modules()) and all(m.p == 0.2 for m in dropouts)
    assert all(torch.equal(p, weights[name]) for name, p in module.named_parameters())
    assert compile_stats().recompile_count == before.recompile_count + 1


def test_a_model_without_dropout_does_not_recompile_for_the_check(tiny_config) -> None:
    cell, check = checked_cell(tiny_config, dropout=0.0)
    before = compile_stats()
    assert check.after_finished()["accuracy"] == ACCURACY_PASS
    after = compile_stats()
    assert (after.graph_count, after.recompile_count) == (before.graph_count, before.recompile_count)


def test_the_relative_difference_is_the_worst_step_and_a_nan_anywhere_is_nan() -> None:
    assert max_rel_diff([1.0, 2.2, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(0.1)
    assert max_rel_diff([0.0], [0.0]) == 0.0 and max_rel_diff([1e-9], [0.0]) == math.inf
    assert math.isnan(max_rel_diff([1.0, math.nan, 3.0], [1.0, 2.0, 9.0]))  # max() alone would say 0.67
