"""The sweep's own tables: every cell, cells counted by status, geometric-mean speedups, the
break-even of compiling, and scaling over processes (analysis/scaling.py) where the sweep has
multi-process cells.

`summarize` and `to_markdown` are what `compilebench sweep` prints at its end; `sweep_tables` is the
set `compilebench analyze` renders.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.axes import axis_text, backend_labels, cell_labels, varying_axes, workload_labels
from analysis.breakeven import BREAK_EVEN_COLUMNS, baseline_step_ms
from analysis.busy import LAUNCH_BOUND, bound_texts, busy_texts
from analysis.collect import SweepData, read_cell
from analysis.cost import NOTE as COST_NOTE
from analysis.cost import cost_texts
from analysis.metrics import cell_metrics
from analysis.render import (
    Table,
    fmt_accuracy,
    fmt_break_even,
    fmt_count,
    fmt_number,
    fmt_percent,
    fmt_speedup,
    is_null,
    render_markdown,
)
from analysis.scaling import multi_process, scaling_table
from analysis.stats import geometric_mean
from analysis.verdicts import DATA_BOUND, E2E_BASIS, EQUIVALENCE, decisive_speedup, verdict_reasons
from workloads.contract.vocabulary import (
    AXIS,
    BASELINE_BACKEND,
    CELL_STATES,
    COMPLETED,
    HARDWARE,
    PROCESSES,
    WORKLOAD,
    names,
    short_error,
)

#: Name of the per-cell table (its file stem in report/tables/), and of the break-even table.
SUMMARY, BREAK_EVEN = "summary", "break_even"
#: The mark of a paired speedup whose interval is disjoint from the unpaired one's.
DISAGREES = "≠ unpaired"
#: The width an error is cut to in the compact per-cell table (the full one has ERROR_WIDTH).
COMPACT_ERROR_WIDTH = 32
#: Where the full per-cell table is, below the compact one.
FULL_TABLE = "Every column: `compilebench analyze SWEEP_DIR --full`, and the report."


def ordered_statuses(statuses: Iterable[str]) -> list[str]:
    """The distinct statuses in the vocabulary's order (CELL_STATES), unknown ones after them by name."""
    distinct = set(statuses)
    return [s for s in CELL_STATES if s in distinct] + sorted(distinct - set(CELL_STATES))


def summarize(parts: Iterable[SweepData]) -> pd.DataFrame:
    """Per-cell metrics (analysis.metrics.CELL_COLUMNS) of these cells, e.g. `read_cell` of each."""
    return cell_metrics(SweepData.concat(parts))


def _gib(value: object) -> str:
    return "" if is_null(value) else f"{float(value) / 2**30:.2f}"


def _range(low: object, high: object) -> str:
    return "" if is_null(low) else f"{fmt_number(low)}–{fmt_number(high)}"


#: The axes the per-cell table always has a column for (treatments are in the backend label).
_NAMED = ("model", "arch", "size", "precision", "batch_size", "world_size", "nodes")


def summary_table(
    metrics: pd.DataFrame,
    equivalence: float = EQUIVALENCE,
    data_bound: float = DATA_BOUND,
    launch_bound: float = LAUNCH_BOUND,
) -> Table:
    """Every cell, one row each; failed, not_compiled and result-less cells marked by status. Besides
    the columns below, every other axis whose value differs between the cells (seed, data, GPU, ...).
    `equivalence`, `data_bound` and `launch_bound` are what the metrics were computed with (for the
    note)."""
    others = [
        axis for axis in varying_axes(metrics, names(WORKLOAD, HARDWARE, PROCESSES)) if axis not in _NAMED
    ]
    text = pd.DataFrame({
        "cell": metrics["cell_id"],
        "model": metrics["model"].fillna(""),
        "arch": metrics["arch"].fillna(""),
        "size": metrics["size"].fillna(""),
        "backend": backend_labels(metrics),
        "precision": metrics["precision"].fillna(""),
        "batch": metrics["batch_size"].map(fmt_count),
        "procs": metrics["world_size"].map(fmt_count),
        "nodes": metrics["nodes"].map(fmt_count),
        **{AXIS[axis].header: metrics[axis].map(axis_text) for axis in others},
        "status": metrics["status"],
        "runs": [_runs(*v) for v in zip(metrics["status"], metrics["replicates"], metrics["replicate_spread"],
                                        metrics["unstable"])],
        "steps": metrics["measured_steps"].map(fmt_count),
        "median ms": metrics["median_step_ms"].map(fmt_number),
        "mean ms": metrics["mean_step_ms"].map(fmt_number),
        "std ms": metrics["std_step_ms"].map(fmt_number),
        "p5–p95 ms": [_range(lo, hi) for lo, hi in zip(metrics["p5_step_ms"], metrics["p95_step_ms"])],
        "items/s": metrics["items_per_s"].map(fmt_number),
        "e2e items/s": metrics["e2e_items_per_s"].map(fmt_number),
        "MFU": [_mean_std_percent(m, s) for m, s in zip(metrics["mfu_mean"], metrics["mfu_std"])],
        "speedup [95% CI]": [fmt_speedup(*v) for v in
                             zip(metrics["speedup"], metrics["speedup_low"], metrics["speedup_high"])],
        "vs eager": method_texts(metrics),
        "e2e speedup [95% CI]": [fmt_speedup(*v) for v in
                                 zip(metrics["e2e_speedup"], metrics["e2e_speedup_low"],
                                     metrics["e2e_speedup_high"])],
        "verdict": verdict_texts(metrics),
        **cost_texts(metrics),
        "compile s": metrics["compile_time_s"].map(fmt_number),
        "break-even steps": _cold_warm(metrics, "break_even_steps", whole=True),
        "break-even GPU-min": _cold_warm(metrics, "break_even_gpu_min"),
        "peak GiB": metrics["peak_mem_bytes"].map(_gib),
        "mem vs eager": metrics["peak_mem_ratio"].map(fmt_number),
        "graphs": metrics["graph_count"].map(fmt_count),
        "breaks": metrics["graph_break_count"].map(fmt_count),
        "recompiles": metrics["recompile_count"].map(fmt_count),
        "accuracy": [fmt_accuracy(*v) for v in zip(metrics["accuracy"], metrics["accuracy_rel_diff"],
                                                     metrics["accuracy_noise_floor"])],
        "data wait": metrics["data_wait_share"].map(fmt_percent),
        "GPU busy": busy_texts(metrics),
        "bound": bound_texts(metrics),
        "error": [short_error(e) if s != COMPLETED else "" for s, e in
                  zip(metrics["status"], metrics["error"])],
    })  # fmt: skip
    margin = _margin(equivalence)
    note = (
        "Measured steps only (warm-up excluded). Runs: replicates of the cell (one process each), ± the "
        "coefficient of variation of their median steps, `unstable` where they disagree beyond their own 95% "
        "intervals by more than 1%. Median ms: median of the runs' median steps; mean, std, p5–p95, MFU "
        "and data wait over the steps of all runs. Items/s at the median step; e2e items/s over the "
        "measured span (items / the sum "
        "of step times, waits for data included: at the mean step), median over runs. Speedup, `vs eager` "
        "saying which: paired, the median of the cell's pair ratios (eager block / compiled block, measured "
        "alternately in one process), median over runs, 95% bootstrap interval over runs, then pairs (its "
        "runs' spread and `unstable` are of the ratios); unpaired, eager median step / own median step, "
        f"against the eager cell of the same workload; `paired {DISAGREES} 0.96x [0.95, 0.97]`: the "
        "unpaired speedup, whose interval is disjoint from the paired one. E2e speedup: own e2e items/s / "
        "the eager cell's; 95% bootstrap "
        "intervals over runs, then steps (with one run, over its steps only: run-to-run noise not covered). "
        f"Verdict from the speedup's interval: faster or slower where it excludes 1, no difference where it "
        f"lies {margin}, else undecided; from the e2e interval for data-bound cells (more than "
        f"{fmt_percent(data_bound, digits=0)} of step time waiting for data) and against data-bound eager "
        "cells. Accuracy: a few training steps compiled against eager on the same batches and state, dropout "
        "off: pass or fail_accuracy (the largest relative loss difference; eager against itself). Data wait: "
        "share of step time spent waiting for batches. GPU busy: share of a short profiled window after "
        "measuring that the GPU worked (median over runs; a paired cell's eager side in parentheses); "
        f"launch-bound where it idled more than {fmt_percent(launch_bound, digits=0)} of it and the cell "
        "is not data-bound, with the host's µs per tiny op before measuring. Break-even: steps (and "
        "GPU-minutes) after which compiling pays for itself, with the cold compile, and the warm one where "
        f"measured (see the break-even table). {COST_NOTE}"
    )
    return Table(SUMMARY, "Cells", metrics, text, note, compact=compact_table(metrics, equivalence))


def _margin(equivalence: float) -> str:
    return (
        f"within ±{fmt_percent(equivalence)} of 1" if equivalence else "exactly 1 (no margin: --equivalence)"
    )


def compact_table(metrics: pd.DataFrame, equivalence: float = EQUIVALENCE) -> Table:
    """The per-cell table in eight columns, to fit a terminal: the cell (its workload and backend), its
    median step, the speedup its verdict rests on (`e2e` where end to end) with its interval, the
    verdict (the status where the cell did not complete), compile s, break-even steps, the accuracy
    check's result, and why: data- or launch-bound, or the error of a cell that did not complete. A
    column no cell has a value in is left out."""
    speed, e2e = decisive_speedup(metrics)
    completed = metrics["status"] == COMPLETED
    verdicts = verdict_texts(metrics, reasons=False).where(completed, metrics["status"])
    text = pd.DataFrame({
        "cell": cell_labels(metrics),
        "median ms": metrics["median_step_ms"].map(fmt_number),
        "speedup [95% CI]": [fmt_speedup(*v) + (" e2e" if end else "") if not is_null(v[0]) else ""
                             for v, end in zip(speed.to_numpy(), e2e)],
        "verdict": verdicts,
        "compile s": metrics["compile_time_s"].map(fmt_number),
        "break-even steps": _cold_warm(metrics, "break_even_steps", whole=True),
        "accuracy": metrics["accuracy"].map(lambda value: "" if is_null(value) else str(value)),
        "why": [short_error(e, COMPACT_ERROR_WIDTH) if s != COMPLETED else bound for s, e, bound in
                zip(metrics["status"], metrics["error"], bound_texts(metrics, host_speed=False))],
    })  # fmt: skip
    used = [column for column in text.columns if column == "cell" or (text[column] != "").any()]
    note = (
        "Verdict from the speedup's 95% interval (e2e: of end-to-end throughput, for data-bound cells): "
        f"faster or slower where it excludes 1,\nno difference where it lies {_margin(equivalence)}, else "
        f"undecided. {FULL_TABLE}"
    )
    return Table(SUMMARY, "Cells", metrics, text[used], note)


def method_texts(metrics: pd.DataFrame) -> list[str]:
    """What each speedup is against: `paired`, `unpaired`, and where the two disagree `paired ≠
    unpaired 1.10x [1.05, 1.15]`; '' without a speedup method (the eager cell itself)."""
    texts = []
    for method, disagrees, *unpaired in zip(
        metrics["speedup_method"],
        metrics["paired_disagrees"],
        metrics["unpaired_speedup"],
        metrics["unpaired_speedup_low"],
        metrics["unpaired_speedup_high"],
    ):
        text = "" if is_null(method) else str(method)
        texts.append(
            f"{text} {DISAGREES} {fmt_speedup(*unpaired)}" if not is_null(disagrees) and disagrees else text
        )
    return texts


def _cold_warm(metrics: pd.DataFrame, column: str, whole: bool = False) -> list[str]:
    """`1,750`, `never`, or `1,750 (warm 120)` where the warm compile was measured too."""
    texts = []
    for pays_off, cold, warm in zip(metrics["pays_off"], metrics[column], metrics[f"{column}_warm"]):
        text = fmt_break_even(cold, pays_off, whole)
        texts.append(
            f"{text} (warm {fmt_break_even(warm, pays_off, whole)})"
            if pays_off is True and not is_null(warm)
            else text
        )
    return texts


def _texts(data: pd.DataFrame, column: str, whole: bool = False) -> list[str]:
    return [fmt_break_even(value, pays_off, whole) for value, pays_off in zip(data[column], data["pays_off"])]


def break_even_table(metrics: pd.DataFrame) -> Table:
    """Per compiled cell with a compile time and a speedup: the steps and GPU-minutes after which
    compiling pays for itself (analysis/breakeven.py), with the cold compile and the warm one."""
    cells = metrics[metrics["pays_off"].notna()]
    e2e = cells["verdict_basis"] == E2E_BASIS
    eager = baseline_step_ms(metrics, cells, e2e)
    speedup = np.where(e2e, cells["e2e_speedup"], cells["speedup"]).astype(float)
    data = pd.DataFrame({
        "cell_id": cells["cell_id"], "backend": backend_labels(cells), "basis": cells["verdict_basis"],
        "eager_step_ms": eager, "compiled_step_ms": eager / speedup,
        **{column: cells[column] for column in BREAK_EVEN_COLUMNS},
    })  # fmt: skip
    text = pd.DataFrame({
        "cell": data["cell_id"],
        "workload": workload_labels(cells).str.replace("\n", " "),
        "backend": data["backend"],
        "eager ms": data["eager_step_ms"].map(fmt_number),
        "compiled ms": data["compiled_step_ms"].map(fmt_number),
        "step basis": np.where(e2e, "mean (end to end)", "median"),
        "compile s": data["break_even_compile_s"].map(fmt_number),
        "steps": _texts(data, "break_even_steps", whole=True),
        "GPU-min": _texts(data, "break_even_gpu_min"),
    })  # fmt: skip
    if data["compile_warm_s"].notna().any():
        text["warm compile s"] = data["compile_warm_s"].map(fmt_number)
        text["steps (warm)"] = _texts(data, "break_even_steps_warm", whole=True)
        text["GPU-min (warm)"] = _texts(data, "break_even_gpu_min_warm")
    note = (
        "Compiling pays for itself after compile s / (eager step - compiled step) steps, never where the "
        "compiled step is not faster; GPU-minutes: those steps at the eager step, times the processes (one "
        "GPU each). Steps as the verdict's: median steps, or mean steps where the speedup is end to end "
        "(data-bound); a paired cell's eager step is its own median step x its paired speedup (its eager "
        "side, measured in its process). Compile s: the cold compile where measured, else the workload's "
        "compile time "
        "(whatever the compile caches held); warm: compiled again with the caches the first left."
    )
    return Table(BREAK_EVEN, "Break-even: steps until compiling pays off", data, text, note)


def _runs(status: object, replicates: object, spread: object, unstable: object) -> str:
    """`1`, `3 ±4.1%`, `3 ±4.1% unstable`: a completed cell's replicates, their spread, whether they
    disagree."""
    if status != COMPLETED or is_null(replicates):
        return ""
    parts = [fmt_count(replicates)]
    if not is_null(spread):
        parts.append(f"±{fmt_percent(spread)}")
    if not is_null(unstable) and bool(unstable):
        parts.append("unstable")
    return " ".join(parts)


def verdict_texts(metrics: pd.DataFrame, reasons: bool = True) -> pd.Series:
    """Each cell's verdict as the per-cell table shows it: `faster`, `baseline` for the eager cell the
    others are compared with, and (`reasons`) for a verdict on end-to-end throughput why: `undecided —
    data-bound (94% waiting for data): end-to-end 1.03x [0.62, 1.71]`."""
    reasons = verdict_reasons(metrics) if reasons else [""] * len(metrics)
    texts = []
    for verdict, reason, cell, baseline in zip(
        metrics["verdict"], reasons, metrics["cell_id"], metrics["baseline_cell_id"]
    ):
        if is_null(verdict):
            texts.append("baseline" if cell == baseline else "")
        else:
            texts.append(f"{verdict} — {reason}" if reason else str(verdict))
    return pd.Series(texts, index=metrics.index, dtype=object)


def _mean_std_percent(mean: object, std: object) -> str:
    if is_null(mean):
        return ""
    return fmt_percent(mean) if is_null(std) else f"{fmt_percent(mean)} ± {fmt_percent(std)}"


def status_table(metrics: pd.DataFrame) -> Table:
    """Cells counted by status, per backend and in all."""
    counts = pd.crosstab(backend_labels(metrics), metrics["status"])
    counts = counts[ordered_statuses(counts.columns)]
    counts = pd.concat([counts, counts.sum().to_frame("all").T])  # (.loc["all"] fails on pandas 2 when empty)
    counts["cells"] = counts.sum(axis=1)
    data = counts.rename_axis(index="backend", columns=None).reset_index()
    return Table("status", "Cells by status", data, data.astype(str))


def geomean_table(metrics: pd.DataFrame) -> Table:
    """Geometric-mean speedup per compiled backend, saying how many of its cells it covers."""
    rows = []
    for label, cells in metrics[metrics["backend"] != BASELINE_BACKEND].groupby(
        backend_labels(metrics), sort=True
    ):
        value, covered = geometric_mean(cells["speedup"].to_numpy(float))
        left_out = cells[cells["speedup"].isna()]["status"].value_counts()
        rows.append(
            {
                "backend": label,
                "geomean_speedup": value,
                "cells_covered": covered,
                "cells": len(cells),
                "not_covered": ", ".join(f"{n} {s}" for s, n in left_out.items()),
            }
        )
    data = pd.DataFrame(rows, columns=["backend", "geomean_speedup", "cells_covered", "cells", "not_covered"])
    text = pd.DataFrame({
        "backend": data["backend"],
        "geomean speedup": data["geomean_speedup"].map(fmt_speedup),
        "covers": [f"{k} of {n} cells" for k, n in zip(data["cells_covered"], data["cells"])],
        "not covered": data["not_covered"],
    })  # fmt: skip
    note = (
        "Over the cells with a speedup (completed, and paired or with an eager cell of the same workload), "
        "each the paired one where the cell measured paired."
    )
    return Table("geomean", "Geometric-mean speedup over eager", data, text, note)


def sweep_tables(
    metrics: pd.DataFrame,
    equivalence: float = EQUIVALENCE,
    data_bound: float = DATA_BOUND,
    launch_bound: float = LAUNCH_BOUND,
) -> list[Table]:
    """The tables of every sweep: cells, status counts, geometric means; scaling over processes
    where the sweep has multi-process cells. `equivalence`, `data_bound` and `launch_bound`: what the
    metrics were computed with."""
    tables = [
        summary_table(metrics, equivalence, data_bound, launch_bound),
        status_table(metrics),
        geomean_table(metrics),
        break_even_table(metrics),
    ]
    if multi_process(metrics).any():
        tables.append(scaling_table(metrics))
    return tables


def cells_markdown(cell_dirs: Iterable[Path]) -> str:
    """The compact per-cell table of these cell directories as Markdown, and where the full one is:
    what `compilebench sweep` prints of the cells it ran."""
    return f"{to_markdown(summarize(read_cell(directory) for directory in cell_dirs))}\n\n{FULL_TABLE}"


def to_markdown(metrics: pd.DataFrame, full: bool = False) -> str:
    """The per-cell table as Markdown (without heading), compact unless `full`."""
    text = summary_table(metrics).text if full else compact_table(metrics).text
    return render_markdown(text.to_dict("records"), list(text.columns))
