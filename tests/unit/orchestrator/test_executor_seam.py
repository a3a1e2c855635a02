"""The executor seam: the command line, the sweep driver and `status` speak to `Executor` alone,
chosen once from the profile (for `status`: the executor the manifest records); where the jobs
are is the executor's `poll`, in the project's words."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestrator.cli.main import main
from orchestrator.executors import choice
from orchestrator.executors.base import EXIT_FAILED, EXIT_OK, GONE, Executor, ExecutorError, JobState, Ran
from orchestrator.executors.local import LocalExecutor
from orchestrator.executors.slurm.executor import SlurmExecutor
from orchestrator.grid.cells import Cell, Grid
from orchestrator.grid.expand import expand
from orchestrator.grid.files import record_grid
from tests.helpers import REPO_ROOT, TINY, table
from workloads.contract.vocabulary import PENDING, RUNNING, UNKNOWN


class RecordingExecutor(Executor[Grid]):
    """A third executor the command line has never heard of: it records what it is asked, "submits"
    each cell as job `r<n>` (into the manifest, as a scheduler's executor does), and its queue answers
    each look with the next of `answers` (the last one again once they are used up)."""

    name = "recording"
    queue_name = "the recorder"
    calls: ClassVar[list[tuple[str, Any]]] = []
    answers: ClassVar[list[dict[str, JobState]]] = []

    def plan(
        self,
        grid: Grid,
        only: Collection[str] | None = None,
        replicates: Sequence[tuple[Cell, int]] | None = None,
    ) -> Grid:
        planned = [c for c in grid.cells if only is None or c.cell_id in only]
        self.calls.append(("plan", tuple(c.cell_id for c in planned)))
        return dataclasses.replace(grid, cells=planned)

    def rows(self, plan: Grid) -> list[dict[str, Any]]:
        return [{"cell_id": cell.cell_id, "where": "recorded"} for cell in plan.cells]

    def dry_run(self, plan: Grid) -> str:
        return f"{len(plan.cells)} cell(s) recorded, nothing run"

    def run(self, plan: Grid) -> Ran:
        self.calls.append(("run", tuple(c.cell_id for c in plan.cells)))
        record_grid(plan, {cell.cell_id: f"r{n}" for n, cell in enumerate(plan.cells)})
        return Ran()

    def poll(self, sweep_dir: Path, job_ids: Sequence[str]) -> dict[str, JobState]:
        self.calls.append(("poll", tuple(job_ids)))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {job: answer[job] for job in job_ids}


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    monkeypatch.setitem(choice.EXECUTORS, "recording", RecordingExecutor)
    RecordingExecutor.calls = []
    RecordingExecutor.answers = [dict.fromkeys(("r0", "r1"), JobState(PENDING))]
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
    assert main(["sweep", *sweep]) == EXIT_OK  # submitted, not waited for
    assert recording == [("plan", cells), ("plan", cells), ("run", cells)]
    # The driver prepared the sweep directory once, before the executor ran the plan.
    assert sorted(d.name for d in (tmp_path / "sw" / "cells").iterdir()) == sorted(cells)
    assert (tmp_path / "sw" / "manifest.parquet").exists()


def test_the_executors_poll_drives_wait_and_status(
    recording: list[tuple[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`sweep --wait` and `status` learn where the jobs are from the executor's `poll` alone, in the
    project's words: its answers make the state line at each look, the cells' states and errors,
    and the exit code, with no scheduler anywhere."""
    sweep = [*TINY, "seed=1,2", "cluster.executor=recording", f"hydra.sweep.dir={tmp_path / 'sw'}"]
    first, second = (c.cell_id for c in expand(sweep).cells)
    RecordingExecutor.answers = [
        {"r0": JobState(PENDING), "r1": JobState(PENDING)},
        {"r0": JobState(RUNNING), "r1": JobState(PENDING)},
        {
            "r0": JobState("oom", "the recorder's job ran out of memory"),
            "r1": JobState(GONE, "never heard of r1"),
        },
    ]
    assert main(["sweep", *sweep, "--wait", "--poll", "0.01"]) == EXIT_FAILED
    out = capsys.readouterr().out
    looks = re.findall(r"^\[\d+s\] (.*)$", out, re.MULTILINE)
    assert looks == ["2 pending", "1 pending, 1 running", "1 oom, 1 lost"], out
    assert [call for call in recording if call[0] == "poll"] == [("poll", ("r0", "r1"))] * 3
    rows = table(out)
    assert (rows[first]["job_id"], rows[first]["state"], rows[first]["error"]) == (
        "r0",
        "oom",
        "the recorder's job ran out of memory",
    )
    assert (rows[second]["state"], rows[second]["error"]) == ("lost", "never heard of r1")

    # `status` asks the executor the manifest records: the same answers, the same table.
    RecordingExecutor.answers = [{"r0": JobState(RUNNING), "r1": JobState(UNKNOWN, "the recorder is out")}]
    assert main(["status", str(tmp_path / "sw")]) == EXIT_FAILED
    rows = table(capsys.readouterr().out)
    assert (rows[first]["state"], rows[second]["state"], rows[second]["error"]) == (
        "running",
        "unknown",
        "the recorder is out",
    )


def test_wait_gives_up_on_the_executors_queue_in_its_name(
    recording: list[tuple[str, Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A queue that does not answer ends `--wait` after --give-up, the error naming the executor's
    queue: the driver has no name of its own for it."""
    sweep = [*TINY, "seed=1,2", "cluster.executor=recording", f"hydra.sweep.dir={tmp_path / 'sw'}"]
    RecordingExecutor.answers = [dict.fromkeys(("r0", "r1"), JobState(UNKNOWN, "no answer"))]
    assert main(["sweep", *sweep, "--wait", "--poll", "0.01", "--give-up", "0.05"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert (
        f"error: the recorder has not answered for 0.05 s: stopped waiting; the jobs may still run. "
        f"Check them with: compilebench status {tmp_path / 'sw'}" in err
    ), err


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
