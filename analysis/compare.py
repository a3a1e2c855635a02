"""`compilebench compare SWEEP_A SWEEP_B`: the same cells in two sweeps, B against A.

Cells are matched by their axes (workloads/contract/vocabulary.py: model, size, backend, mode, flags,
precision, data, seed, batch, processes, ...) except the hardware ones (device, GPU): what differs
between two sweeps by design — torch version, cluster, GPU, date, commit, host — is not an axis or
is left out, so a module upgrade or another cluster finds its cells. Where one sweep has several
cells of one key (other step counts), the one that speaks for them is `axes.representatives`'.

For each cell completed in both, with measured steps:

    step ratio        B's median step / A's (above 1: B is slower)
    throughput ratio  B's end-to-end items/s / A's (below 1: B is slower)

each with a 95% interval as `analyze`'s speedups have: where both cells ran 2 replicates or more,
Welch's over their runs on the log scale (analysis/statistics/intervals.py; `interval`: `across 3+3
runs`), else the bootstrap of the steps (analysis/statistics/bootstrap.py; each sweep's cell draws
from its own generator), which sees one run only (`within one process`). With threshold t:

    regression        the step ratio's interval lies above 1 + t (B slower by more than t, at 95%)
    improvement       it lies below 1 - t
    within threshold  it lies within [1 - t, 1 + t]
    undecided         otherwise (too noisy to say: more steps or replicates)

And per compiled backend, the speedup over eager (analyze's `speedup`, the paired one where a cell
measured paired) of the cells that have one in both sweeps: its geometric mean in A and in B, and the
cell whose speedup changed most. A suite run twice is read there: a model's speedup may move with the
machine while the mean holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from analysis.cells.metrics import cell_metrics
from analysis.cells.uncertainty import RESAMPLES, SEED, WITHIN_ONE_PROCESS
from analysis.reading.axes import axis_rows, axis_text, backend_labels, cell_labels, representatives
from analysis.reading.collect import REPEAT, SweepData, load_sweep
from analysis.rendering.text import fmt_number, fmt_speedup, render_markdown
from analysis.statistics.bootstrap import (
    ReplicateSamples,
    geometric_mean,
    group_moments,
    hierarchical_means,
    ratio_interval,
    stable_hash,
)
from analysis.statistics.intervals import RunLogs, welch_interval
from workloads.contract.sweep_dir import STDERR
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED, HARDWARE, PROCESSES, WORKLOAD, names

#: The axes cells are matched by: all but where they ran.
MATCHED_AXES = [axis for axis in names() if axis not in names(HARDWARE)]
#: The default threshold of a regression (`--threshold`): B slower than A by more than 5%.
THRESHOLD = 0.05
REGRESSION, IMPROVEMENT, WITHIN, UNDECIDED = "regression", "improvement", "within threshold", "undecided"
#: The columns of the speedup summary (JSON's `speedups` records), one row per compiled backend.
SPEEDUP_COLUMNS = [
    "backend",
    "cells",
    "a_geomean_speedup",
    "b_geomean_speedup",
    "geomean_ratio",
    "most_changed",
    "most_changed_a",
    "most_changed_b",
]
#: What is said of a cell only one sweep has.
UNMATCHED = ["cell_id", "label", "status"]
#: The columns of a compared cell (JSON's `cells` records).
COLUMNS = [
    "label",
    "a_cell_id",
    "b_cell_id",
    *MATCHED_AXES,
    "a_gpu_name",
    "b_gpu_name",
    "a_median_step_ms",
    "b_median_step_ms",
    "step_ratio",
    "step_ratio_low",
    "step_ratio_high",
    "a_e2e_items_per_s",
    "b_e2e_items_per_s",
    "throughput_ratio",
    "throughput_ratio_low",
    "throughput_ratio_high",
    "interval",
    "verdict",
]


class CompareError(ValueError):
    """Two sweeps that cannot be compared; the message is one line."""


@dataclass
class Comparison:
    """Two sweeps' matched cells (`cells`, COLUMNS) and those that could not be compared."""

    threshold: float
    cells: pd.DataFrame
    only_in_a: pd.DataFrame
    only_in_b: pd.DataFrame
    not_compared: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Cells in both, not completed with measured steps in both: their key and both statuses."""
    speedups: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SPEEDUP_COLUMNS))
    """Per compiled backend, the speedups over eager of the cells with one in both (SPEEDUP_COLUMNS)."""

    @property
    def regressions(self) -> pd.DataFrame:
        return self.cells[self.cells["verdict"] == REGRESSION]


def verdicts(low: np.ndarray, high: np.ndarray, threshold: float) -> np.ndarray:
    """Each step ratio interval's verdict (module docstring); None where it is unknown."""
    low, high = np.asarray(low, float), np.asarray(high, float)
    verdict = np.full(low.shape, UNDECIDED, dtype=object)
    verdict[(low >= 1 - threshold) & (high <= 1 + threshold)] = WITHIN
    verdict[low > 1 + threshold] = REGRESSION
    verdict[high < 1 - threshold] = IMPROVEMENT
    verdict[np.isnan(low) | np.isnan(high)] = None
    return verdict


def _keyed(metrics: pd.DataFrame) -> pd.DataFrame:
    """One cell per key (the axes as text, null as ''), with the key in `_key`."""
    keys = ["\x1f".join(map(axis_text, values)) for values in axis_rows(metrics, MATCHED_AXES)]
    return representatives(metrics.assign(_key=keys), ["_key"]).sort_index().set_index("_key")


def _speedups(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """SPEEDUP_COLUMNS of the matched cells `a` and `b` (same keys, same order)."""
    both = (
        (a["backend"] != BASELINE_BACKEND).to_numpy()
        & (a["speedup"].to_numpy(float) > 0)
        & (b["speedup"].to_numpy(float) > 0)
    )  # NaN: no speedup (no eager cell, or not completed)
    a, b = a[both], b[both]
    rows = []
    for backend, keys in a.groupby(backend_labels(a), sort=False).groups.items():
        a_speedup, b_speedup = a.loc[keys, "speedup"].to_numpy(float), b.loc[keys, "speedup"].to_numpy(float)
        a_mean, b_mean = geometric_mean(a_speedup)[0], geometric_mean(b_speedup)[0]
        most = int(np.argmax(np.abs(np.log(b_speedup / a_speedup))))
        rows.append(
            {
                "backend": backend,
                "cells": len(keys),
                "a_geomean_speedup": a_mean,
                "b_geomean_speedup": b_mean,
                "geomean_ratio": b_mean / a_mean,
                "most_changed": a.loc[keys, "label"].iloc[most],
                "most_changed_a": a_speedup[most],
                "most_changed_b": b_speedup[most],
            }
        )
    return pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)


def _draws(data: SweepData, cell_ids: list[str], side: int) -> tuple[np.ndarray, np.ndarray, list[RunLogs]]:
    """(median step draws, steps-per-ms draws, their runs' logs) of these completed cells' measured
    steps, one row per cell, each cell's draws from a generator of its id and the sweep's side (A and B
    independent); the runs' logs (median step, steps per ms) for the intervals over runs."""
    steps = data.steps[data.steps["phase"] == "measure"]
    code = pd.Index(cell_ids).get_indexer(steps["cell_id"].astype(object)).astype(np.int64)
    keep = code >= 0
    samples = ReplicateSamples.from_steps(
        code[keep],
        steps[REPEAT].to_numpy(np.int64)[keep],
        steps["step_time_ms"].to_numpy(float)[keep],
        len(cell_ids),
    )

    def rngs(stream: int) -> list[np.random.Generator]:
        return [np.random.default_rng([SEED, stable_hash(c), side, stream]) for c in cell_ids]

    replicate_mean, _ = group_moments(samples.steps)
    with np.errstate(divide="ignore"):
        runs = [RunLogs.of(samples, samples.replicate_medians()), RunLogs.of(samples, 1 / replicate_mean)]
    return (
        samples.hierarchical_medians(RESAMPLES, rngs(0)),
        hierarchical_means(samples, RESAMPLES, rngs(1), reciprocal=True),
        runs,
    )


def _intervals(a: tuple, b: tuple) -> tuple[np.ndarray, ...]:
    """(step low, step high, rate low, rate high, interval text) of B against A (`_draws` of each):
    Welch's over runs where both have 2 runs or more, else the bootstrap draws' (module doc)."""
    across = (a[2][0].count >= 2) & (b[2][0].count >= 2)
    ends = []
    for kind in (0, 1):
        low, high = ratio_interval(b[kind], a[kind])
        welch_low, welch_high = welch_interval(b[2][kind], a[2][kind])
        ends += [np.where(across, welch_low, low), np.where(across, welch_high, high)]
    counts = [f"across {m}+{n} runs" for m, n in zip(a[2][0].count, b[2][0].count)]
    return (*ends, np.where(across, np.array(counts, dtype=object), WITHIN_ONE_PROCESS))


def compare(
    sweep_a: Path, sweep_b: Path, threshold: float = THRESHOLD, warn: TextIO | None = STDERR
) -> Comparison:
    """Match the cells of two sweep directories and compare B with A; CompareError where there is
    nothing to compare."""
    data = [load_sweep(Path(sweep), warn) for sweep in (sweep_a, sweep_b)]
    for sweep, part in zip((sweep_a, sweep_b), data):
        if part.cells.empty:
            raise CompareError(f"no cells in {sweep}")
    every_a, every_b = (_keyed(cell_metrics(part)) for part in data)
    # Labelled together: the settings that vary across both sweeps tell unmatched cells apart.
    labels = cell_labels(pd.concat([every_a, every_b]), names(WORKLOAD, PROCESSES))
    every_a["label"], every_b["label"] = (
        labels.iloc[: len(every_a)].to_numpy(),
        labels.iloc[len(every_a) :].to_numpy(),
    )
    common = every_a.index.intersection(every_b.index, sort=False)
    if not len(common):
        raise CompareError(f"no cell of {sweep_a} has the axes of a cell of {sweep_b}: nothing to compare")
    a, b = every_a.loc[common], every_b.loc[common]
    speedups = _speedups(a, b)
    done = (
        (a["status"] == COMPLETED)
        & (b["status"] == COMPLETED)
        & a["median_step_ms"].notna()
        & b["median_step_ms"].notna()
    ).to_numpy()
    a_draws, b_draws = (
        _draws(part, side["cell_id"][done].tolist(), number)
        for number, (part, side) in enumerate(zip(data, (a, b)))
    )
    a, b, rest = a[done], b[done], (a[~done], b[~done])
    items = b["items_per_step"].to_numpy(float) / a["items_per_step"].to_numpy(float)
    step_low, step_high, rate_low, rate_high, interval = _intervals(a_draws, b_draws)
    value = lambda frame, column: frame[column].to_numpy(float)  # noqa: E731
    cells = pd.DataFrame({
        "label": a["label"].to_numpy(),
        "a_cell_id": a["cell_id"].to_numpy(), "b_cell_id": b["cell_id"].to_numpy(),
        **{axis: a[axis].to_numpy() for axis in MATCHED_AXES},
        "a_gpu_name": a["gpu_name"].to_numpy(), "b_gpu_name": b["gpu_name"].to_numpy(),
        "a_median_step_ms": value(a, "median_step_ms"), "b_median_step_ms": value(b, "median_step_ms"),
        "step_ratio": value(b, "median_step_ms") / value(a, "median_step_ms"),
        "step_ratio_low": step_low, "step_ratio_high": step_high,
        "a_e2e_items_per_s": value(a, "e2e_items_per_s"), "b_e2e_items_per_s": value(b, "e2e_items_per_s"),
        "throughput_ratio": value(b, "e2e_items_per_s") / value(a, "e2e_items_per_s"),
        "throughput_ratio_low": rate_low * items, "throughput_ratio_high": rate_high * items,
        "interval": interval,
        "verdict": verdicts(step_low, step_high, threshold),
    })  # fmt: skip
    not_compared = pd.DataFrame(
        {
            "label": rest[0]["label"].to_numpy(),
            "a_cell_id": rest[0]["cell_id"].to_numpy(),
            "b_cell_id": rest[1]["cell_id"].to_numpy(),
            "a_status": rest[0]["status"].to_numpy(),
            "b_status": rest[1]["status"].to_numpy(),
        }
    )

    def alone(own: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
        return own.loc[~own.index.isin(other.index), UNMATCHED].reset_index(drop=True)

    return Comparison(
        threshold, cells[COLUMNS], alone(every_a, every_b), alone(every_b, every_a), not_compared, speedups
    )


def to_json(comparison: Comparison) -> str:
    """The comparison as one JSON object: threshold, cells (COLUMNS), only_in_a, only_in_b (cell
    id, label, status), not_compared, speedups (SPEEDUP_COLUMNS), regressions (how many)."""
    records = lambda frame: json.loads(frame.to_json(orient="records", double_precision=15))  # noqa: E731
    return json.dumps(
        {
            "threshold": comparison.threshold,
            "cells": records(comparison.cells),
            "only_in_a": records(comparison.only_in_a),
            "only_in_b": records(comparison.only_in_b),
            "not_compared": records(comparison.not_compared),
            "speedups": records(comparison.speedups),
            "regressions": len(comparison.regressions),
        },
        indent=1,
    )


def to_markdown(comparison: Comparison, sweep_a: Path, sweep_b: Path) -> str:
    """The compared cells as a table, then the cells not compared and those only in one sweep, then
    a line that counts the regressions and names their cells."""
    cells, t = comparison.cells, comparison.threshold
    rows = [
        {
            "cell": label,
            "A ms": fmt_number(a_ms),
            "B ms": fmt_number(b_ms),
            "B/A step time [95% CI]": fmt_speedup(ratio, low, high, digits=3),
            "B/A items/s [95% CI]": fmt_speedup(*throughput, digits=3),
            "interval": interval,
            "verdict": verdict or "",
        }
        for label, a_ms, b_ms, ratio, low, high, verdict, interval, *throughput in zip(
            cells["label"],
            cells["a_median_step_ms"],
            cells["b_median_step_ms"],
            cells["step_ratio"],
            cells["step_ratio_low"],
            cells["step_ratio_high"],
            cells["verdict"],
            cells["interval"],
            cells["throughput_ratio"],
            cells["throughput_ratio_low"],
            cells["throughput_ratio_high"],
        )
    ]
    if (cells["a_gpu_name"].map(axis_text) != cells["b_gpu_name"].map(axis_text)).any():  # another cluster
        for row, a_gpu, b_gpu in zip(rows, cells["a_gpu_name"], cells["b_gpu_name"]):
            row.update({"A GPU": axis_text(a_gpu), "B GPU": axis_text(b_gpu)})
    lines = [f"### B = {sweep_b} against A = {sweep_a}", ""]
    if rows:
        lines += [render_markdown(rows, list(rows[0])), ""]
    lines.append(
        f"Median step time and end-to-end throughput, B / A, 95% intervals: where both ran 2 runs or "
        f"more, Welch's over the runs (`across A+B runs`), else a bootstrap of the steps that cannot see "
        f"run-to-run spread (`within one process`). Regression: the step time interval lies above "
        f"{1 + t:g} (B slower by more than {100 * t:g}%); improvement: below {1 - t:g}; within threshold: "
        f"inside [{1 - t:g}, {1 + t:g}]."
    )
    if len(comparison.speedups):
        speedups = [
            {
                "backend": row["backend"],
                "cells": str(row["cells"]),
                "A geomean speedup": fmt_speedup(row["a_geomean_speedup"], digits=3),
                "B geomean speedup": fmt_speedup(row["b_geomean_speedup"], digits=3),
                "B/A": f"{row['geomean_ratio']:.3f}",
                "changed most": f"{row['most_changed']}: {fmt_speedup(row['most_changed_a'], digits=2)} → "
                f"{fmt_speedup(row['most_changed_b'], digits=2)}",
            }
            for row in comparison.speedups.to_dict("records")
        ]
        lines += [
            "",
            render_markdown(speedups, list(speedups[0])),
            "",
            "Speedup over eager (as `analyze` gives it: paired where the cell measured paired, else eager "
            "median step / own) of the cells with one in both sweeps, geometric mean per backend, and the "
            "cell whose speedup changed most.",
        ]
    for title, frame, status in (
        ("Not compared (not completed in both)", comparison.not_compared, None),
        (f"Only in A ({sweep_a})", comparison.only_in_a, "status"),
        (f"Only in B ({sweep_b})", comparison.only_in_b, "status"),
    ):
        if len(frame):
            lines += ["", f"{title}:"]
            lines += [f"- {row['label']} ({_cell_text(row, status)})" for row in frame.to_dict("records")]
    regressions = comparison.regressions
    named = "; ".join(
        f"{label} {ratio:.3f}x" for label, ratio in zip(regressions["label"], regressions["step_ratio"])
    )
    lines += [
        "",
        f"{len(cells)} cell(s) compared, {len(regressions)} regression(s)" + (f": {named}" if named else ""),
    ]
    return "\n".join(lines)


def _cell_text(row: dict, status: str | None) -> str:
    if status:
        return f"{row['cell_id']}, {row['status']}"
    return f"A {row['a_cell_id']} {row['a_status']}, B {row['b_cell_id']} {row['b_status']}"
