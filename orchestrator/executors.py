"""The executors by the name a cluster profile gives them (`executor`: local | slurm; its default is
in conf/cluster_base.yaml), and the one place that chooses between them."""

from __future__ import annotations

from typing import Any

from orchestrator.cells import Grid
from orchestrator.executor import Executor, ExecutorError
from orchestrator.local import LocalExecutor
from orchestrator.slurm import SlurmExecutor

EXECUTORS: dict[str, type[Executor[Any]]] = {"local": LocalExecutor, "slurm": SlurmExecutor}


def executor_for(grid: Grid) -> Executor[Any]:
    """The executor the grid's cluster profile names."""
    name = grid.executor
    if name not in EXECUTORS:
        raise ExecutorError(
            f"unknown executor {name!r} (cluster={grid.cluster.get('name')}); use {' or '.join(EXECUTORS)}"
        )
    return EXECUTORS[name]()
