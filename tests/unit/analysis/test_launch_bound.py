"""`launch-bound` (analysis/cells/device_time.py): a side whose GPU ms per step (geometric mean over its
completed replicates) leaves the GPU idle beyond the threshold (`--launch-bound`) of its measured step,
in a cell that is not data-bound; and a real CPU cell, which profiles nothing, in the table."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis.cells.device_time import LAUNCH_BOUND
from analysis.cells.loaded import open_sweep
from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.studies.sweep.table import cells_markdown, summary_table, to_markdown
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import write_cell, write_paired_replicates
from workloads.cell.config_io import cell_config_from_dict
from workloads.run import run_cell

STEPS = [10.0, 10.2, 9.9, 10.1, 10.0]
#: GPU ms per step on either side of the default threshold of the 10 ms median step.
IDLE_MS, BUSY_MS = 10.0 * (1 - 2 * LAUNCH_BOUND), 10.0 * (1 - LAUNCH_BOUND / 2)


def write_sweep(sweep: Path) -> None:
    """`e`: three replicates mostly idle (and a failed attempt of the second, fully busy); `i`: paired,
    busy, its eager side idle; `d`: idle but data-bound; `c`: no device time (a CPU cell)."""
    gpu, host = [IDLE_MS - 0.5, IDLE_MS, IDLE_MS + 1.0], [9.0, 7.5, 8.0]
    for repeat in range(3):
        if repeat == 1:
            write_cell(sweep, "e", step_ms=None, attempt=2, repeat=1, status="failed", gpu_ms_per_step=10.0)
        write_cell(
            sweep, "e", step_ms=STEPS, attempt=repeat + 2 if repeat else 1, repeat=repeat,
            gpu_ms_per_step=gpu[repeat], host_op_us=host[repeat],
        )  # fmt: skip
    write_paired_replicates(
        sweep, "i", "inductor", [[(STEPS, STEPS)] * 3], gpu_ms_per_step=BUSY_MS,
        eager_gpu_ms_per_step=IDLE_MS, host_op_us=8.0,
    )  # fmt: skip
    write_cell(
        sweep, "d", step_ms=STEPS, data_ms=[0.0, 0.0, *[s / 2 for s in STEPS]], precision="fp32",
        gpu_ms_per_step=IDLE_MS, host_op_us=8.0,
    )  # fmt: skip
    write_cell(sweep, "c", step_ms=STEPS, precision="fp16")


def test_launch_bound_cells_are_labelled_with_the_host_speed(tmp_path: Path) -> None:
    write_sweep(tmp_path)
    metrics = cell_metrics(load_sweep(tmp_path, warn=None)).set_index("cell_id")
    assert metrics.loc["e", "replicates"] == 3
    # The geometric mean of the completed runs' GPU ms: the failed attempt's 10 ms left out.
    assert metrics.loc["e", "gpu_ms"] == pytest.approx(
        ((IDLE_MS - 0.5) * IDLE_MS * (IDLE_MS + 1.0)) ** (1 / 3)
    )
    assert metrics.loc["e", "host_op_us"] == 8.0
    assert metrics.loc["i", "eager_gpu_ms"] == pytest.approx(IDLE_MS)
    assert metrics.loc["i", "eager_step_ms"] == pytest.approx(10.0)  # its eager blocks' median
    assert metrics.loc["d", "data_bound"] and pd.isna(metrics.loc["c", "gpu_ms"])
    assert metrics["launch_bound"].to_dict() == {"e": True, "i": False, "d": False, "c": False}
    assert metrics["eager_launch_bound"].to_dict() == {"e": False, "i": True, "d": False, "c": False}

    table = summary_table(metrics.reset_index())
    text = table.text.set_index("cell")
    assert text.loc["e", "bound"] == "launch-bound" and text.loc["i", "bound"] == "eager launch-bound"
    assert text.loc["d", "bound"] == "data-bound" and text.loc["c", "bound"] == ""
    assert text.loc["i", "GPU ms/step"] == f"{BUSY_MS:.2f} (eager {IDLE_MS:.2f})"
    assert (
        text.loc["c", "GPU ms/step"] == ""
        and text.loc["c", "device speedup [95% CI]"] == "no device time (CPU)"
    )
    assert f"idles more than {100 * LAUNCH_BOUND:.0f}% of its measured step" in table.note


def test_analyze_takes_the_launch_bound_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_sweep(tmp_path)

    def launch_bound(*flags: str) -> dict[str, bool]:
        assert main(["analyze", str(tmp_path), "--format", "csv", "--no-plots", *flags]) == 0
        cells = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("cell_id")
        return cells["launch_bound"].astype(bool).to_dict()

    assert launch_bound()["e"] and not launch_bound()["i"]
    # e's share is its runs' geometric mean's: below its idlest run's, above its busiest run's.
    assert not launch_bound("--launch-bound", f"{1 - (IDLE_MS - 0.5) / 10.0}")["e"]
    assert launch_bound("--launch-bound", f"{1 - (IDLE_MS + 1.0) / 10.0}")["e"]
    assert launch_bound("--launch-bound", "0")["i"]  # any idle time at all
    assert not launch_bound("--launch-bound", "0")["d"]  # data-bound comes first
    for bad in (["--launch-bound", "1.5"], ["--launch-bound", "x"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["analyze", str(tmp_path), *bad])
        assert exit_info.value.code == 2 and "not a" in capsys.readouterr().err
    with pytest.raises(ValueError, match="launch_bound"):
        cell_metrics(load_sweep(tmp_path, warn=None), launch_bound=-0.1)


def test_a_cpu_cell_records_empty_busy_columns_and_its_table_renders(tiny_config, tmp_path: Path) -> None:
    config = tiny_config("gpt", steps=3, warmup_steps=1, cell_id="c")
    directory = tmp_path / "cells" / "c"  # as a sweep lays its cells out
    status = run_cell(cell_config_from_dict(config), directory)
    (row,) = pq.read_table(directory / "run.parquet").to_pylist()
    assert status == "completed"
    assert all(row[f"{side}gpu_ms_per_step"] is None for side in ("", "eager_"))
    loaded = open_sweep(tmp_path, ["c"])
    header, _, line = cells_markdown(loaded).splitlines()[:3]  # what a local sweep prints
    assert "why" not in header and "| baseline " in line  # neither bound nor failed: no column for it
    assert "GPU alone" not in header  # no cell of the sweep has device time
    header, _, line = to_markdown(loaded.metrics, full=True).splitlines()[:3]
    names = [cell.strip() for cell in header.strip("|").split("|")]
    values = [cell.strip() for cell in line.strip("|").split("|")]
    assert values[names.index("GPU ms/step")] == "" and values[names.index("bound")] == ""
    assert values[names.index("device speedup [95% CI]")] == "no device time (CPU)"
    assert values[names.index("status")] == "completed"
