"""Two sweeps writing into one sweep directory at once, and `analyze` while cells are still writing.

Real local sweeps of tiny cells in separate processes (as two users' shells, or a shell and a
job, would run them); the manifest is merged under a lock, results are written atomically, and
the analysis reads whatever is complete at each moment without failing.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
from pathlib import Path

import pandas as pd

from tests.helpers import MEASURING, cli, cli_popen, wait_until

TINY = ["model=gpt", "size=tiny", "backend=eager", "precision=fp32", "device=cpu", "warmup_steps=1"]


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return cli_popen(cwd, *args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def test_two_sweeps_into_one_directory_at_once(tmp_path: Path) -> None:
    first = start("sweep", *TINY, "steps=3", "seed=1,2", "hydra.sweep.dir=sw", cwd=tmp_path)
    second = start("sweep", *TINY, "steps=3", "seed=3,4", "hydra.sweep.dir=sw", cwd=tmp_path)
    for process in (first, second):
        code, out, err = finish(process)
        assert code == 0, err
    manifest = pd.read_parquet(tmp_path / "sw" / "manifest.parquet")
    runs = pd.concat(pd.read_parquet(p) for p in (tmp_path / "sw").glob("cells/*/run.parquet"))
    assert sorted(runs["seed"]) == [1, 2, 3, 4]
    assert len(manifest) == 4 and manifest["cell_id"].is_unique  # neither sweep dropped the other's rows
    assert sorted(runs["cell_id"]) == sorted(manifest["cell_id"]) and set(runs["status"]) == {"completed"}
    assert len(runs) == 4  # one attempt each: no cell ran twice
    status = cli(tmp_path, "status", "sw")
    assert status.returncode == 0 and status.stdout.rstrip().endswith("4 cell(s): 4 completed"), status.stdout


def test_analyze_while_cells_are_writing(tmp_path: Path) -> None:
    """A sweep of two cells, stopped (SIGSTOP, the sweep and its cell) while the second cell
    trains: `analyze` then sees the first cell completed and the second without a result; the
    sweep goes on (SIGCONT) and the analysis at its end sees both."""
    sweep = cli_popen(
        tmp_path,
        "sweep",
        *TINY,
        "steps=3",
        "seed=1,2",
        "measure.max_steps=null",
        "measure.min_seconds=4",  # both cells: the sweep is stopped within a 0.1 s poll of the second's line
        "hydra.sweep.dir=sw",
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:

        def measuring() -> list[Path]:  # the cells whose log says they train (ran in order: seed 1 first)
            return [
                log
                for log in (tmp_path / "sw").glob("cells/*/logs/stdout.log")
                if MEASURING in log.read_text()
            ]

        wait_until(
            lambda: sweep.poll() is not None or len(measuring()) == 2,
            600,
            lambda _: "the second cell never trained",
            interval=0.1,
        )
        os.killpg(sweep.pid, signal.SIGSTOP)
        try:
            runs = sorted((tmp_path / "sw").glob("cells/*/run.parquet"))
            assert len(runs) == 1, f"not stopped while the second cell trained: {runs}"
            analysis = cli(tmp_path, "analyze", "sw", "--format", "csv", "--no-plots")
        finally:
            os.killpg(sweep.pid, signal.SIGCONT)
        assert analysis.returncode == 0 and "Traceback" not in analysis.stderr, analysis.stderr
        statuses = pd.read_csv(io.StringIO(analysis.stdout)).set_index("cell_id")["status"]
        assert statuses[runs[0].parent.name] == "completed" and (statuses == "completed").sum() == 1, statuses
        code, _, err = finish(sweep)
        assert code == 0, err
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.communicate()
    final = cli(tmp_path, "analyze", "sw", "--format", "csv", "--no-plots")
    assert final.returncode == 0, final.stderr
    assert (
        pd.read_csv(io.StringIO(final.stdout))["status"] == "completed"
    ).sum() == 2  # what was complete stays so
