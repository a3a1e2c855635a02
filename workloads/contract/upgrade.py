"""Old sweep directories read as the current schema: the one place that knows how files used to look.

Every reader of a sweep's Parquet files goes through workloads/contract/sweep_dir.py, which scans a file
with its kind's current columns (a column the file lacks comes back null) and the columns the lift reads
(LIFT_INPUTS), then hands the table to `lift`. Within a version columns were only added, so a row is
told by what it holds: `schema_version` (null: version 1) for what changed with a bump, a null in a
column its writer always fills for what was added within a version. No column was renamed and no
encoding changed so far; such a change would be one more step here. The history, a line each:

- version 1 (fa8cdeb): one process per cell; `cudagraph_skips` added within it (990d346).
- version 2 (723a086): distributed cells; a steps row's time is the slowest rank's, `items` all
  ranks', the `rank_*` lists one entry per rank; run.parquet's `world_size`, `nodes`, `dist_backend`,
  `ddp_graph_splits`: `_one_process`.
- within 2 (696c87d): `repeat` (`_replicate_zero`), the end-to-end columns (`_end_to_end`), the
  provenance columns and the manifest's other axes; (8446e4d) `graph_break_reasons`,
  `recompile_reasons`; (6582ece) the compile cache columns; (681e623) `slurm_cpus`; (96465f2) the
  host-load columns; steps' `side` and `pair`, run's `paired` and `paired_fallback` (paired
  measurement, issue 25): null in older files, nothing to lift; the profiled window's columns
  (`gpu_busy_share` ...: workloads/instruments/profiled_window.py) and the `accuracy` columns (the
  accuracy check, issue 25): null in older files, nothing to lift; the GPU energy columns
  (`energy_j` ... in run.parquet, `energy_j` in steps.parquet: workloads/instruments/gpu_energy.py,
  issue 27): null in older files, as where no counter was read, nothing to lift; run's
  `eager_peak_mem_bytes` (issue 38): null in older files, whose paired cells' `peak_mem_bytes` is
  their process's, both sides' (analysis reads no memory ratio from it), nothing to lift; run's
  `idle_settled`, `energy_update_s` and `energy_edge_share` (issue 38): null in older files, nothing to lift;
  the device time per side (issue 39: `gpu_ms_per_step`, launches, kernels, the host's time per step):
  `_gpu_time` from the one window's busy share and span, the others null; steps' `host_time_ms`: null
  in older files (the packs of e8d5239/cf99355 have run rows' `host_ms_per_step` from 5 steps timed on
  an idle device after measuring, not from their steps), nothing to lift; the GEMM cell's timing mode
  (issue 40: the axis `gemm_timing`), `_sustained_gemms`: every GEMM cell before it was timed
  sustained; its clocks (`sm_clock_mhz`, `clock_samples`, `clock_limits`): null, not measured.
- within 2, the host probes before and after measuring and the CPU's frequency governor (issue 50:
  `host_op_us_after`, `host_py_us`, `host_py_us_after`, `cpu_governor`): null in older files, as
  where not readable; `compare` then has no probe of the host apart from torch and keeps each
  cell's step verdict, nothing to lift. The accuracy check's `accuracy_measure` (issue 50): null in
  older files, whose check judged every tensor but the losses by 1 - cos and parameters by their
  value; nothing to lift.

A cell's config.yaml has one step too (`lift_config`, read by `sweep_dir.read_cell_config` and
`workloads.cell.config_io.load_cell_config`), the keys that moved (MOVED_CONFIG_KEYS):
`measure.max_repeats` and `measure.equivalence` beside `repeats` as the sweep's own settings
(`max_repeats`, `equivalence`; issue 37); model=gemm's `model.m`, `model.n`, `model.k`,
`model.kernel`, `model.timing`, `model.layer` into the GEMM cell's own section, `gemm.m` ... (issue
49). An override or a config file of the user's naming an old key is refused with the new one
(`workloads.cell.config_io.moved_key`), and the cell id digests each key where it was first written
(`as_first_written`): a cell keeps its id when its keys move.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from workloads.contract.schema import RUN_SCHEMA
from workloads.contract.vocabulary import SUSTAINED

#: Config keys that moved: the old dotted key -> the new one (a section's key or a top-level one).
MOVED_CONFIG_KEYS = {
    "measure.max_repeats": "max_repeats",
    "measure.equivalence": "equivalence",
    **{f"model.{key}": f"gemm.{key}" for key in ("m", "n", "k", "kernel", "timing", "layer")},
}

#: The run columns the lift steps read, scanned whatever columns a reader asked for.
LIFT_INPUTS = (
    "schema_version",
    "world_size",
    "nodes",
    "repeat",
    "items_per_step",
    "mean_step_ms",
    "measured_s",
    "e2e_items_per_s",
    "model",
    "gemm_timing",
    *(
        f"{side}{name}"
        for side in ("", "eager_")
        for name in ("gpu_ms_per_step", "gpu_busy_share", "profiled_step_ms")
    ),
)


def _replace(table: pa.Table, name: str, values: pa.ChunkedArray) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, values.cast(table.schema.field(name).type))


def _one_process(runs: pa.Table) -> pa.Table:
    """Version 1 (before 723a086, distributed cells): every cell ran one process on one node."""
    version = runs.column("schema_version")
    old = pc.fill_null(pc.less(version, 2), True)
    for name in ("world_size", "nodes"):
        runs = _replace(runs, name, pc.if_else(old, pc.fill_null(runs.column(name), 1), runs.column(name)))
    return runs


def _replicate_zero(runs: pa.Table) -> pa.Table:
    """Within version 2, before replicates (696c87d): a row without `repeat` ran replicate 0."""
    return _replace(runs, "repeat", pc.fill_null(runs.column("repeat"), 0))


def _end_to_end(runs: pa.Table) -> pa.Table:
    """Within version 2, before the end-to-end columns (696c87d): a row without `measured_s` has its
    end-to-end items/s at its mean step (measured steps tile the measured span)."""
    items = pc.cast(runs.column("items_per_step"), pa.float64())
    at_mean = pc.divide(items, pc.divide(runs.column("mean_step_ms"), 1e3))
    before = pc.is_null(runs.column("measured_s"))
    e2e = runs.column("e2e_items_per_s")
    return _replace(runs, "e2e_items_per_s", pc.if_else(before, pc.coalesce(e2e, at_mean), e2e))


def _gpu_time(runs: pa.Table) -> pa.Table:
    """Within version 2, before the GPU time per step (issue 39): a row with a profiled window's busy
    share has it as the share times the window's span per step, over its one window."""
    for side in ("", "eager_"):
        name = f"{side}gpu_ms_per_step"
        product = pc.multiply(runs.column(f"{side}gpu_busy_share"), runs.column(f"{side}profiled_step_ms"))
        runs = _replace(runs, name, pc.coalesce(runs.column(name), product))
    return runs


def _sustained_gemms(runs: pa.Table) -> pa.Table:
    """Within version 2, before GEMM timing modes (issue 40): a GEMM cell's row without `gemm_timing`
    was timed sustained, the only mode there was."""
    before = pc.and_(pc.equal(runs.column("model"), "gemm"), pc.is_null(runs.column("gemm_timing")))
    lifted = pc.if_else(pc.fill_null(before, False), SUSTAINED, runs.column("gemm_timing"))
    return _replace(runs, "gemm_timing", lifted)


def lift(table: pa.Table, kind: pa.Schema) -> pa.Table:
    """Rows scanned from files of `kind` (RUN_SCHEMA, STEPS_SCHEMA or MANIFEST_SCHEMA; a run table with
    LIFT_INPUTS among its columns) as the current schema has them. Steps and manifest files only
    gained columns: theirs read as null, nothing to lift."""
    if kind is not RUN_SCHEMA:
        return table
    for step in (_one_process, _replicate_zero, _end_to_end, _gpu_time, _sustained_gemms):
        table = step(table)
    return table


def _moved(values: dict[str, Any], source: str, target: str) -> dict[str, Any]:
    """`values` with the dotted key `source` moved to `target` (a section emptied by it dropped); a
    value already at `target` is kept."""
    (from_section, _, from_key), (to_section, _, to_key) = source.rpartition("."), target.rpartition(".")
    part = values.get(from_section) if from_section else values
    if not isinstance(part, Mapping) or from_key not in part:
        return values
    value, rest = part[from_key], {k: v for k, v in part.items() if k != from_key}
    if not from_section:
        values = rest
    elif rest:
        values[from_section] = rest
    else:
        del values[from_section]
    if to_section:
        values[to_section] = {to_key: value, **(values.get(to_section) or {})}
    else:
        values.setdefault(to_key, value)
    return values


def lift_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's config as written before its keys moved (MOVED_CONFIG_KEYS), with the current keys;
    a config that names both keeps the new one's value."""
    values = dict(values)
    for old, new in MOVED_CONFIG_KEYS.items():
        values = _moved(values, old, new)
    return values


def as_first_written(values: Mapping[str, Any]) -> dict[str, Any]:
    """A config with the current keys as it was written before they moved: what the cell id digests."""
    values = dict(values)
    for old, new in MOVED_CONFIG_KEYS.items():
        values = _moved(values, new, old)
    return values
