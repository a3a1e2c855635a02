"""Read a sweep directory's files into two DataFrames, one bad file never stopping the rest.

`analysis` reads only files (the sweep directory contract); it imports nothing from the
orchestrator. All `run.parquet` files of a sweep are read in one `pyarrow.dataset` scan, and all
`steps.parquet` files in another (threads, one pass). A file that cannot be read — half-written
by a copy that bypassed the atomic rename, truncated, not Parquet at all — fails such a scan, so
then the files are read one by one and the bad ones reported with their path. A missing
manifest, a cell without a result and a completed cell without steps are reported too: on a
shared filesystem a half-finished sweep is normal, and one broken cell should not hide the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd
import pyarrow as pa

from analysis.reading.environment import ENVIRONMENT_READ
from workloads.contract.attempts import counting_attempts, replicate_attempts
from workloads.contract.schema import LAYER_FIELDS, MANIFEST_SCHEMA, RUN_SCHEMA, STEPS_SCHEMA
from workloads.contract.sweep_dir import (
    MANIFEST_FILE,
    RUN_FILE,
    STDERR,
    STEPS_FILE,
    cell_dir,
    cell_dirs,
    read_cell_config,
    read_files,
)
from workloads.contract.vocabulary import (
    AXES,
    COMPILED_SIDE,
    COMPLETED,
    CONFIG_AXES,
    EAGER_SIDE,
    NO_RESULT,
    UNREADABLE,
    axes_from_config,
)

#: A GEMM cell's own run.parquet columns that analysis/cells/gemm.py reads (its shape and recipe are axes).
#: The cold and warm compile times of `compile.measure=cold_warm` (analysis/cells/breakeven.py).
COMPILE_COLD, COMPILE_WARM = "compile_cold_s", "compile_warm_s"
#: Per side (a cell's own steps, a paired cell's eager side), its profiled windows' GPU ms per step
#: (their median, and each window's), launches and kernels per step and the host's unprofiled ms per
#: step; and the host's speed before measuring (analysis/cells/device_time.py).
_SIDE = ("gpu_ms_per_step", "gpu_ms_windows", "launches_per_step", "kernels_per_step", "host_ms_per_step")
DEVICE_READ = (*(f"{side}{name}" for side in ("", "eager_") for name in _SIDE), "host_op_us")
#: The host probes before and after measuring, each run's (analysis/compare/host_probe.py).
PROBE_READ = ("host_op_us_after", "host_py_us", "host_py_us_after")
GEMM_READ = (
    "gemm_bytes",
    "peak_gbps",
    "gemm_floor_us",
    "gemm_bound",
    "gemm_kernel",
    "gemm_autotune_us",
    "gemms_per_replay",
    "sm_clock_mhz",
    "clock_samples",
    "clock_limits",
)
#: The energy of a cell's measured and warm-up windows and of its compile, and its power
#: (analysis/cells/energy.py; the cost of an answer: analysis/cells/cost.py); null where not measured
#: (CPU cells, sweeps before energy).
ENERGY_READ = (
    "energy_j", "joules_per_step", "avg_power_w", "idle_power_w", "warmup_energy_j", "compile_energy_j",
    "energy_window_s", "energy_update_s", "idle_settled",  # a window too short, an idle board unsettled
    "energy_edge_share",  # a paired cell's blocks' time between their steps
)  # fmt: skip
#: The columns analysis reads of each file (a run row has over 170; the other provenance columns are not
#: decoded), the environment table's among them: the files are scanned once (a second scan of 1,000
#: files for the environment alone took as long as this one).
RUN_READ_SCHEMA = pa.schema([RUN_SCHEMA.field(name) for name in dict.fromkeys((
    "cell_id", "attempt", "repeat", "status", "error", *(axis.name for axis in AXES), "items_per_step",
    "measured_steps", "median_step_ms", "mean_step_ms", "std_step_ms", "items_per_s", "mfu",
    "e2e_items_per_s", "e2e_mfu", "compile_time_s", "fx_graph_cache_hits", "aot_autograd_cache_hits",
    "first_step_ms", "graph_count", "graph_break_count", "recompile_count", "peak_mem_bytes",
    "eager_peak_mem_bytes",  # a paired cell's eager side's peak (analysis/cells/metrics.py)
    "accuracy", "accuracy_rel_diff", "accuracy_noise_floor",  # the accuracy check (workloads/instruments/)
    "accuracy_worst_tensor", "accuracy_measure", "accuracy_tolerance",
    # fp8 cells' Linear layers swapped, and left in bf16 (analysis/studies/fp8.py)
    "fp8_linears", "fp8_skipped_head", "fp8_skipped_misaligned",
    *GEMM_READ,  # a GEMM cell's own columns (analysis/cells/gemm.py)
    *(field.name for field in LAYER_FIELDS),  # and a layer cell's (analysis/cells/gemm_layer.py)
    "ddp_graph_splits", "rank_median_step_ms", "graph_break_reasons", "recompile_reasons",
    "paired",  # measured paired: its pairs give its speedup (analysis/cells/paired.py)
    COMPILE_COLD, COMPILE_WARM,  # cold and warm compile times (analysis/cells/breakeven.py)
    *DEVICE_READ,  # device time per side and the host's speed (analysis/cells/device_time.py)
    *PROBE_READ,  # the host probes (analysis/compare/host_probe.py)
    *ENERGY_READ,
    "started_at", "finished_at",  # an attempt's process held its devices in between (analysis/cells/cost.py)
    *ENVIRONMENT_READ,  # the environment table (analysis/reading/environment.py)
))])  # fmt: skip
STEPS_READ_SCHEMA = pa.schema(
    [
        STEPS_SCHEMA.field(name)
        for name in ("cell_id", "attempt", "step", "phase", "step_time_ms", "data_time_ms", "loss", "mfu")
    ]
)
#: The column `load_cells` adds to the steps: the replicate of the attempt a step belongs to.
REPEAT = "repeat"
#: The columns of SweepData.steps.
STEPS_FRAME_SCHEMA = STEPS_READ_SCHEMA.append(pa.field(REPEAT, pa.int64()))
#: SweepData.pairs: per pair of blocks of a paired cell's replicate, the median step of its eager
#: block and of its compiled block (the block's value, as the workload's stop rule reads it), and
#: each block's joules per step (its energy over its steps; null where not measured).
PAIRS_SCHEMA = pa.schema(
    [
        ("cell_id", pa.string()),
        (REPEAT, pa.int64()),
        ("pair", pa.int64()),
        ("eager_ms", pa.float64()),
        ("compiled_ms", pa.float64()),
        ("eager_j_per_step", pa.float64()),
        ("compiled_j_per_step", pa.float64()),
    ]
)
#: The steps' column of a paired cell's block energy (split evenly over the block's steps).
STEP_ENERGY = "energy_j"
#: The manifest's axis columns, read for cells without a result.
MANIFEST_AXES = ("cell_id", *(axis.name for axis in CONFIG_AXES))


@dataclass(frozen=True)
class Problem:
    """Something in the sweep directory that could not be analysed, and where."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.message}: {self.path}"


class _Problems(list):
    """Problems as they are found, each also printed as a warning line on `warn`."""

    def __init__(self, warn: TextIO | None):
        super().__init__()
        self.warn = warn

    def add(self, path: Path, message: str) -> None:
        self.append(Problem(Path(path), message))
        if self.warn is not None:
            print(f"warning: {message}: {path}", file=self.warn)


@dataclass
class SweepData:
    """A sweep (or part of one) as frames.

    `cells`: one row per cell with RUN_READ_SCHEMA's columns, from the attempt that counts, and
    `replicates`, how many of its replicates completed; a cell without a readable result has its
    axes (from config.yaml, else the manifest) and status `no_result` or `unreadable`.
    `replicates`: RUN_READ_SCHEMA's rows of the attempt that counts for each replicate of each
    cell (workloads.contract.attempts.replicate_attempts). `steps`: STEPS_READ_SCHEMA's columns and
    `repeat`, of the attempts that count: every completed replicate's, and the cell's own; a paired
    cell's own steps only (its eager side is in `pairs`). `pairs`: PAIRS_SCHEMA's rows of the
    attempts that count and measured paired (run.parquet `paired`), each pair with both blocks.
    `attempts`: RUN_READ_SCHEMA's rows of every attempt, counting or not (what the sweep spent).
    """

    cells: pd.DataFrame
    steps: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    replicates: pd.DataFrame = field(default_factory=lambda: RUN_READ_SCHEMA.empty_table().to_pandas())
    pairs: pd.DataFrame = field(default_factory=lambda: PAIRS_SCHEMA.empty_table().to_pandas())
    attempts: pd.DataFrame = field(default_factory=lambda: RUN_READ_SCHEMA.empty_table().to_pandas())

    @classmethod
    def concat(cls, parts: Iterable[SweepData]) -> SweepData:
        """Several parts (e.g. one per cell) as one."""
        parts = list(parts)
        return cls(
            _concat([p.cells for p in parts], RUN_READ_SCHEMA),
            _concat([p.steps for p in parts], STEPS_FRAME_SCHEMA),
            [problem for part in parts for problem in part.problems],
            _concat([p.replicates for p in parts], RUN_READ_SCHEMA),
            _concat([p.pairs for p in parts], PAIRS_SCHEMA),
            _concat([p.attempts for p in parts], RUN_READ_SCHEMA),
        )


def _concat(frames: list[pd.DataFrame], schema: pa.Schema) -> pd.DataFrame:
    """The non-empty frames as one (concatenating empty frames would blur the column types)."""
    frames = [frame for frame in frames if not frame.empty]
    return pd.concat(frames, ignore_index=True) if frames else schema.empty_table().to_pandas()


def _read_manifest(path: Path, problems: _Problems) -> dict[str, dict[str, Any]]:
    """{cell_id: axes} of manifest.parquet; {} when it is unreadable."""
    table, bad = read_files([path], MANIFEST_SCHEMA, MANIFEST_AXES)
    for bad_path, exc in bad:
        problems.add(bad_path, f"cannot read ({exc})")
    return {row.pop("cell_id"): row for row in table.to_pylist()}


def _without_result(
    directories: Sequence[Path],
    runs: pd.DataFrame,
    unreadable: set[Path],
    manifest: Mapping[str, Mapping[str, Any]],
    problems: _Problems,
    warn: TextIO | None,
) -> pd.DataFrame:
    """Rows for the cells that have no readable run row: axes from config.yaml, else the manifest."""
    rows = []
    for directory in directories:
        if directory.name in runs.index:
            continue
        path = directory / RUN_FILE
        if not directory.is_dir():
            problems.add(directory, "in the manifest, no cell directory")
        elif path.is_file() and path not in unreadable:
            problems.add(path, "no rows")
        elif not path.is_file():
            problems.add(path, "no result yet")
        axes = axes_from_config(read_cell_config(directory, warn)) if directory.is_dir() else {}
        known = {**manifest.get(directory.name, {}), **{k: v for k, v in axes.items() if v is not None}}
        rows.append(
            {**known, "cell_id": directory.name, "status": UNREADABLE if path in unreadable else NO_RESULT}
        )
    return pd.DataFrame(rows, columns=RUN_READ_SCHEMA.names)


def _block_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """PAIRS_SCHEMA's rows of these measured rows of paired attempts: each block's median step and
    mean energy per step, per pair that has both blocks (an eager side that ran out of memory leaves
    its pair's compiled block alone)."""
    if rows.empty:
        return PAIRS_SCHEMA.empty_table().to_pandas()
    sides = [EAGER_SIDE, COMPILED_SIDE]
    blocks = (
        rows.groupby(["cell_id", "attempt", REPEAT, "pair", "side"], observed=True)
        .agg(ms=("step_time_ms", "median"), j=(STEP_ENERGY, "mean"))
        .unstack("side")
        .reindex(columns=pd.MultiIndex.from_product([["ms", "j"], sides]))
        .dropna(subset=[("ms", side) for side in sides])
        .reset_index()
    )
    return pd.DataFrame(
        {
            "cell_id": blocks["cell_id"].astype(object),
            REPEAT: blocks[REPEAT].to_numpy(np.int64),
            "pair": blocks["pair"].to_numpy(np.int64),
            "eager_ms": blocks[("ms", EAGER_SIDE)].to_numpy(float),
            "compiled_ms": blocks[("ms", COMPILED_SIDE)].to_numpy(float),
            "eager_j_per_step": blocks[("j", EAGER_SIDE)].to_numpy(float),
            "compiled_j_per_step": blocks[("j", COMPILED_SIDE)].to_numpy(float),
        },
        columns=PAIRS_SCHEMA.names,
    )


def _counting_steps(
    directories: Sequence[Path], runs: pd.DataFrame, replicates: pd.DataFrame, problems: _Problems
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The steps of the attempts that count: each completed replicate's and each cell's own (not
    those of other attempts), with the replicate they belong to; and the pairs of those that measured
    paired."""
    paths = []
    for directory in directories:
        path = directory / STEPS_FILE
        if path.is_file():
            paths.append(path)
        elif directory.name in runs.index and runs.at[directory.name, "status"] == COMPLETED:
            problems.add(path, "completed cell without steps")
    table, bad = read_files(paths, STEPS_SCHEMA, [*STEPS_READ_SCHEMA.names, "side", "pair", STEP_ENERGY])
    for path, exc in bad:
        problems.add(path, f"cannot read ({exc})")
    rows = table.to_pandas(strings_to_categorical=True)  # a million rows name a thousand cells
    done = replicates[replicates["status"] == COMPLETED]
    keys = ["cell_id", "attempt", "repeat", "paired"]
    counting = pd.concat([done[keys], runs[keys]], ignore_index=True)
    counting = counting.drop_duplicates(["cell_id", "attempt"])
    # (cell, attempt) as one integer per row, through the steps' category codes: a million rows
    # are looked up in the few thousand counting attempts without building tuples or strings.
    cells = pd.Index(rows["cell_id"].cat.categories) if len(rows) else pd.Index([], dtype=object)
    shift = (
        int(max(rows["attempt"].max() if len(rows) else 0, counting["attempt"].max() if len(counting) else 0))
        + 1
    )
    row_keys = (
        rows["cell_id"].cat.codes.to_numpy(np.int64) * shift + rows["attempt"].to_numpy(np.int64)
        if len(rows)
        else np.empty(0, np.int64)
    )
    codes = cells.get_indexer(counting["cell_id"])
    known = codes >= 0
    counting_keys = pd.Index(
        codes[known].astype(np.int64) * shift + counting["attempt"].to_numpy(np.int64)[known]
    )
    position = counting_keys.get_indexer(row_keys)
    found = position >= 0
    repeat, paired = np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
    repeat[found] = counting["repeat"].to_numpy(np.int64)[known][position[found]]
    paired[found] = counting["paired"].eq(True).to_numpy()[known][position[found]]
    rows[REPEAT] = repeat
    measured = (rows["phase"] == "measure").to_numpy() & rows["pair"].notna().to_numpy()
    pairs = _block_pairs(rows[paired & measured])
    # A paired cell's eager-side rows are its in-process baseline, not its steps: every statistic of
    # the cell is of its own steps (a null side: an unpaired cell's).
    own = found & (rows["side"] != EAGER_SIDE).to_numpy()
    return rows.loc[own, STEPS_FRAME_SCHEMA.names].reset_index(drop=True), pairs


def load_cells(
    directories: Sequence[Path],
    warn: TextIO | None = STDERR,
    manifest: Mapping[str, Mapping[str, Any]] | None = None,
    problems: _Problems | None = None,
) -> SweepData:
    """Read these cell directories (some may not exist yet: then `manifest` gives their axes)."""
    problems = problems if problems is not None else _Problems(warn)
    paths = [d / RUN_FILE for d in directories if (d / RUN_FILE).is_file()]
    table, bad = read_files(paths, RUN_SCHEMA, RUN_READ_SCHEMA.names)
    for path, exc in bad:
        problems.add(path, f"cannot read ({exc})")
    every = table.to_pandas()
    replicates = replicate_attempts(every)
    runs = counting_attempts(every).set_index("cell_id", drop=False)
    runs["replicates"] = (
        (replicates["status"] == COMPLETED)
        .groupby(replicates["cell_id"])
        .sum()
        .reindex(runs.index)
        .fillna(0)
        .astype("int64")
    )
    missing = _without_result(directories, runs, {path for path, _ in bad}, manifest or {}, problems, warn)
    cells = runs.reset_index(drop=True) if missing.empty else pd.concat([runs, missing], ignore_index=True)
    steps, pairs = _counting_steps(directories, runs, replicates, problems)
    return SweepData(cells, steps, list(problems), replicates.reset_index(drop=True), pairs, every)


def read_cell(cell_dir: Path, warn: TextIO | None = STDERR) -> SweepData:
    """One cell directory: its attempt that counts and that attempt's steps."""
    return load_cells([Path(cell_dir)], warn)


def load_sweep(sweep_dir: Path, warn: TextIO | None = STDERR) -> SweepData:
    """Every cell of a sweep directory: those on disk and those the manifest lists."""
    sweep_dir = Path(sweep_dir)
    problems = _Problems(warn)
    on_disk = [d.name for d in cell_dirs(sweep_dir)]
    manifest_path = sweep_dir / MANIFEST_FILE
    if manifest_path.exists():
        manifest = _read_manifest(manifest_path, problems)
    else:
        manifest = {}
        if on_disk:
            problems.add(manifest_path, "no manifest (cells found in cells/ only)")
    ids = sorted(set(on_disk) | set(manifest))
    return load_cells([cell_dir(sweep_dir, cell_id) for cell_id in ids], warn, manifest, problems)
