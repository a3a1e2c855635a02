"""The executors by the name a cluster profile gives them (`executor`: local | slurm; its default is
in conf/cluster_base.yaml), and the one place that chooses between them: for a grid, and for the
jobs a sweep's manifest records (`status` asks their executor where they are)."""

from __future__ import annotations

from typing import Any

from orchestrator.executors.base import Executor, ExecutorError
from orchestrator.executors.local import LocalExecutor
from orchestrator.executors.slurm.executor import SlurmExecutor
from orchestrator.grid.cells import Grid

EXECUTORS: dict[str, type[Executor[Any]]] = {"local": LocalExecutor, "slurm": SlurmExecutor}


def executor_for(grid: Grid) -> Executor[Any]:
    """The executor the grid's cluster profile names."""
    return executor_named(grid.executor, f" (cluster={grid.cluster.get('name')})")


def executor_named(name: str, where: str = "") -> Executor[Any]:
    """The executor of this name (the manifest records each cell's), `where` in the error."""
    if name not in EXECUTORS:
        raise ExecutorError(f"unknown executor {name!r}{where}; use {' or '.join(EXECUTORS)}")
    return EXECUTORS[name]()
