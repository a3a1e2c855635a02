"""The per-cell table: every cell, one row each, with every column (`summary_table`: the report,
`analyze --full`) or compact, to fit a terminal (`compact_table`: what `analyze` prints by default).

`cells_markdown` is what `compilebench sweep` prints at its end.
"""

from __future__ import annotations

import pandas as pd

from analysis.cells.cost import NOTE as COST_NOTE
from analysis.cells.cost import cost_texts
from analysis.cells.device_texts import compact_columns, compact_why, device_note, full_columns, host_note
from analysis.cells.device_time import LAUNCH_BOUND
from analysis.cells.loaded import Loaded
from analysis.cells.metrics import ACCURACY_COLUMNS
from analysis.reading.axes import axis_text, backend_labels, cell_labels, varying_axes
from analysis.rendering.text import (
    Table,
    fmt_accuracy,
    fmt_break_even,
    fmt_count,
    fmt_number,
    fmt_percent,
    fmt_speedup,
    fmt_warm,
    is_null,
    render_markdown,
    wrap_note,
)
from analysis.statistics.verdicts import DATA_BOUND, EQUIVALENCE, decisive_speedup
from analysis.studies.sweep.speedup_texts import (
    DISAGREES,
    ONE_RUN_MARK,
    interval_note,
    interval_texts,
    method_texts,
    verdict_texts,
)
from workloads.contract.vocabulary import (
    ACCURACY_FAIL,
    AXIS,
    COMPLETED,
    HARDWARE,
    PROCESSES,
    WORKLOAD,
    names,
    short_error,
)

#: Name of the per-cell table (its file stem in report/tables/).
SUMMARY = "summary"
#: The width an error is cut to in the compact per-cell table (the full one has ERROR_WIDTH): with the
#: verdict `no difference†` the H100 seminar sweep's compact table is 160 characters wide.
COMPACT_ERROR_WIDTH = 26
#: What the memory columns are (workloads/cell/paired.py `SidePeaks`).
PEAK_NOTE = (
    "Peak GiB: the most device memory allocated, compile and warm-up included (on the CPU the process's "
    "peak resident memory); a paired cell's over its compiled blocks, and its mem vs eager against its "
    "eager blocks' peak, else against the eager cell's (none for a paired cell whose one peak covers "
    "both sides: the CPU, older sweeps)."
)
#: Where the full per-cell table is, below the compact one.
FULL_TABLE = "Every column: `compilebench analyze SWEEP_DIR --full`, and the report."


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
        "interval": interval_texts(metrics),
        **full_columns(metrics),
        "e2e speedup [95% CI]": [fmt_speedup(*v) for v in
                                 zip(metrics["e2e_speedup"], metrics["e2e_speedup_low"],
                                     metrics["e2e_speedup_high"])],
        "verdict": verdict_texts(metrics),
        **cost_texts(metrics),
        "compile s": compile_texts(metrics),
        "break-even steps": _cold_warm(metrics, "break_even_steps", whole=True),
        "break-even GPU-min": _cold_warm(metrics, "break_even_gpu_min"),
        "peak GiB": metrics["peak_mem_bytes"].map(_gib),
        "mem vs eager": metrics["peak_mem_ratio"].map(fmt_number),
        "graphs": metrics["graph_count"].map(fmt_count),
        "breaks": metrics["graph_break_count"].map(fmt_count),
        "recompiles": metrics["recompile_count"].map(fmt_count),
        "accuracy": [fmt_accuracy(*values, full=True) for values in
                     zip(*(metrics[column] for column in ACCURACY_COLUMNS))],
        "data wait": metrics["data_wait_share"].map(fmt_percent),
        "error": [short_error(e) if s != COMPLETED else "" for s, e in
                  zip(metrics["status"], metrics["error"])],
    })  # fmt: skip
    margin = _margin(equivalence)
    note = (
        "Measured steps only (warm-up excluded). Runs: replicates of the cell (one process each), ± the "
        "coefficient of variation of their median steps, `unstable` where they disagree beyond their own 95% "
        "intervals by more than 1%. Median ms: the geometric mean of the runs' median steps; mean, std, "
        "p5–p95, MFU and data wait over the steps of all runs. Items/s at the median step; e2e items/s over "
        "the measured span (items / the sum of step times, waits for data included: at the mean step), "
        "geometric mean over runs. Speedup, `vs eager` saying which: paired, the median of the cell's pair "
        "ratios (eager block / compiled block, measured alternately in one process), geometric mean over "
        "runs (its runs' spread and `unstable` are of the ratios); unpaired, eager median step / own median "
        f"step, against the eager cell of the same workload; `paired {DISAGREES} 0.96x [0.95, 0.97]`: the "
        "unpaired speedup, whose interval is disjoint from the paired one. E2e speedup: own e2e items/s / "
        "the eager cell's. Interval: with 2 runs or more (both cells, unpaired), the 95% Student-t "
        "interval over the runs on the log scale (Welch's for two cells): `across N runs`; with one run, "
        "a bootstrap of its steps (pairs): `within one process`, run-to-run noise not covered. "
        f"Verdict from the speedup's interval: faster or slower where it excludes 1, no difference where it "
        f"lies {margin}, else undecided; from the e2e interval for data-bound cells (more than "
        f"{fmt_percent(data_bound, digits=0)} of step time waiting for data) and against data-bound eager "
        "cells. Accuracy: a few training steps compiled against eager on the same batches and state, dropout "
        "off: pass or fail_accuracy, the losses, gradients (direction and norm) and every parameter's and "
        "buffer's update against an fp64 copy where it fits (the worst tensor, its measure, error and limit; "
        "eager's own error). Data wait: "
        f"share of step time spent waiting for batches. {device_note(launch_bound)} Break-even: steps (and "
        "GPU-minutes) after which compiling pays for itself, with the cold compile, and the warm one where "
        f"measured (see the break-even table). {PEAK_NOTE} {COST_NOTE}"
    )
    note = f"{note} {interval_note(metrics)}"
    return Table(SUMMARY, "Cells", metrics, text, note, compact=compact_table(metrics, equivalence))


def _margin(equivalence: float) -> str:
    return (
        f"within ±{fmt_percent(equivalence)} of 1" if equivalence else "exactly 1 (no margin: --equivalence)"
    )


def compact_table(metrics: pd.DataFrame, equivalence: float = EQUIVALENCE) -> Table:
    """The per-cell table in nine columns, to fit a terminal: the cell (its workload and backend), its
    median step, the speedup its verdict rests on (`e2e` where end to end) with its interval (HOST_MARK
    where host-dependent), `GPU alone` (the device-time speedup), the verdict (the status where the
    cell did not complete), compile s, break-even steps, the accuracy check's result, and why: data- or
    launch-bound, or the error of a cell that did not complete. A column no cell has a value in is
    left out."""
    speed, e2e = decisive_speedup(metrics)
    completed = metrics["status"] == COMPLETED
    verdicts = verdict_texts(metrics, reasons=False, one_run=ONE_RUN_MARK).where(completed, metrics["status"])
    text = pd.DataFrame({
        "cell": cell_labels(metrics),
        "median ms": metrics["median_step_ms"].map(fmt_number),
        **compact_columns(metrics, [fmt_speedup(*v) + (" e2e" if end else "") if not is_null(v[0]) else ""
                                    for v, end in zip(speed.to_numpy(), e2e)]),
        "verdict": verdicts,
        "compile s": compile_texts(metrics),
        "break-even steps": _cold_warm(metrics, "break_even_steps", whole=True),
        "accuracy": [_accuracy_result(result, worst) for result, worst in
                     zip(metrics["accuracy"], metrics["accuracy_worst_tensor"])],
        "why": [short_error(e, COMPACT_ERROR_WIDTH) if s != COMPLETED else bound for s, e, bound in
                zip(metrics["status"], metrics["error"], compact_why(metrics))],
    })  # fmt: skip
    used = [column for column in text.columns if column == "cell" or (text[column] != "").any()]
    verdict = (
        "Verdict from the speedup's 95% interval (e2e: of end-to-end throughput, for data-bound cells): "
        f"faster or slower where it excludes 1, no difference where it lies {_margin(equivalence)}, else "
        "undecided."
    )
    note = (
        " ".join(part for part in (verdict, interval_note(metrics, ONE_RUN_MARK), host_note(metrics)) if part)
        + f"\n{FULL_TABLE}"
    )
    return Table(SUMMARY, "Cells", metrics, text[used], note)


def _accuracy_result(result: object, worst: object) -> str:
    """The compact table's accuracy: the result, and on a fail the tensor that failed worst."""
    if is_null(result):
        return ""
    return f"{result} ({worst})" if result == ACCURACY_FAIL and not is_null(worst) else str(result)


def compile_texts(metrics: pd.DataFrame) -> list[str]:
    """The compile seconds break-even counts with (the cold compile where one was measured), `(warm)`
    after those of a compile that found an earlier one's cache entries (analysis/cells/breakeven.py)."""
    return [
        fmt_warm(fmt_number(seconds), warm)
        for seconds, warm in zip(metrics["break_even_compile_s"], metrics["break_even_compile_warm"])
    ]


def _cold_warm(metrics: pd.DataFrame, column: str, whole: bool = False) -> list[str]:
    """`1,750`, `never`, `1,750 (warm 120)` where the warm compile was measured too, or `120 (warm)`
    where the only compile found an earlier one's cache entries."""
    texts = []
    for pays_off, cold, warm, was_warm in zip(
        metrics["pays_off"], metrics[column], metrics[f"{column}_warm"], metrics["break_even_compile_warm"]
    ):
        text = fmt_warm(fmt_break_even(cold, pays_off, whole), was_warm if pays_off is True else None)
        texts.append(
            f"{text} (warm {fmt_break_even(warm, pays_off, whole)})"
            if pays_off is True and not is_null(warm)
            else text
        )
    return texts


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


def _mean_std_percent(mean: object, std: object) -> str:
    if is_null(mean):
        return ""
    return fmt_percent(mean) if is_null(std) else f"{fmt_percent(mean)} ± {fmt_percent(std)}"


def cells_markdown(loaded: Loaded) -> str:
    """The compact per-cell table of these cells as Markdown, its note (what a verdict rests on, with
    the sweep's margin; a one-run mark; where the full table is) below: what `compilebench sweep`
    prints of the cells it ran."""
    table = compact_table(loaded.metrics, loaded.equivalence)
    body = render_markdown(table.text.to_dict("records"), list(table.text.columns))
    return f"{body}\n\n{wrap_note(table.note)}"


def to_markdown(metrics: pd.DataFrame, full: bool = False) -> str:
    """The per-cell table as Markdown (without heading), compact unless `full`."""
    text = summary_table(metrics).text if full else compact_table(metrics).text
    return render_markdown(text.to_dict("records"), list(text.columns))
