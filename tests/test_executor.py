"""The executor seam: the command line and the sweep driver speak to `Executor` alone, chosen once
from the profile."""

from __future__ import annotations

import ast
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.executors import choice
from orchestrator.executors.base import EXIT_OK, Executor, ExecutorError, Follow, Ran
from orchestrator.executors.local import LocalExecutor
from orchestrator.executors.slurm.executor import SlurmExecutor
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.expand import expand
from tests.helpers import REPO_ROOT, TINY


class RecordingExecutor(Executor[tuple[str, ...]]):
    """A third executor the command line has never heard of: it records what it is asked."""

    name = "recording"
    calls: list[tuple[str, Any]] = []

    def plan(
        self,
        grid: Grid,
        only: Collection[str] | None = None,
        replicates: Sequence[tuple[Cell, int]] | None = None,
    ) -> tuple[str, ...]:
        planned = tuple(c.cell_id for c in grid.cells if only is None or c.cell_id in only)
        self.calls.append(("plan", planned))
        return planned

    def rows(self, plan: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{"cell_id": cell_id, "where": "recorded"} for cell_id in plan]

    def dry_run(self, plan: tuple[str, ...]) -> str:
        return f"{len(plan)} cell(s) recorded, nothing run"

    def run(self, plan: tuple[str, ...], wait: Follow | None = None) -> Ran:
        self.calls.append(("run", (plan, wait)))
        return Ran()


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    monkeypatch.setitem(choice.EXECUTORS, "recording", RecordingExecutor)
    RecordingExecutor.calls = []
    return RecordingExecutor.calls


def test_the_profile_chooses_the_executor_once() -> None:
    local = expand([*TINY, "seed=1,2"])
    assert isinstance(choice.executor_for(local), LocalExecutor)
    slurm = expand([*TINY, "cluster=grete"])
    assert isinstance(choice.executor_for(slurm), SlurmExecutor)
    with pytest.raises(ExecutorError, match="unknown executor 'pbs' .*use local or slurm"):
        choice.executor_for(expand([*TINY, "cluster.executor=pbs"]))


def test_a_new_executor_needs_no_change_to_the_command_line(
    recording: list[tuple[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sweep = [*TINY, "seed=1,2", "cluster.executor=recording", f"hydra.sweep.dir={tmp_path / 'sw'}"]
    cells = tuple(c.cell_id for c in expand(sweep).cells)
    assert main(["sweep", *sweep, "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "| recorded |" in out and "2 cell(s) recorded, nothing run" in out
    assert main(["sweep", *sweep, "--wait", "--poll", "5"]) == EXIT_OK
    assert recording == [("plan", cells), ("plan", cells), ("run", (cells, Follow(poll_s=5.0)))]
    # The driver prepared the sweep directory once, before the executor ran the plan.
    assert sorted(d.name for d in (tmp_path / "sw" / "cells").iterdir()) == sorted(cells)
    assert (tmp_path / "sw" / "manifest.parquet").exists()


@pytest.mark.parametrize("module", ["cli/main.py", "sweep/driver.py"])
def test_the_command_line_and_the_driver_name_no_executor(module: str) -> None:
    """The command line and the sweep driver branch on no executor name: every string constant in
    their code (docstrings aside)."""
    tree = ast.parse((REPO_ROOT / "orchestrator" / module).read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef) and node.body and isinstance(node.body[0], ast.Expr)
    }
    constants = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]
    assert not [text for text in constants if text in choice.EXECUTORS], constants
