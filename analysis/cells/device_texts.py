"""The per-cell table's texts of device time (analysis/cells/device_time.py): each side's GPU ms,
launches and µs per launch, which side is launch-bound, the device-time speedup or why a cell has
none, and where the host, not the GPU, sets a wall speedup: host-dependent, and what would close a gap
between the two speedups (by the model of `predicted_step_ms`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis.cells.device_time import predicted_step_ms
from analysis.cells.paired import PAIRED
from analysis.rendering.text import fmt_number, fmt_speedup, is_null

#: The device-time speedup's interval must clear the wall speedup's by this much, relative (its low
#: end above the wall interval's high end x 1.05), for the table to say what would close the gap:
#: a 5% gain is one compiling is used for, and a smaller gap is within what two hosts' paired wall
#: speedups differ by (gpt small inductor: 1.370x and 1.361x on two H100s).
GAP = 0.05
#: The backends and inductor modes that replay CUDA graphs already: their gap is launches outside them.
GRAPH_BACKENDS, GRAPH_MODES = ("cudagraphs",), ("reduce-overhead", "max-autotune")
#: The mark of a wall speedup that is the host's (one side launch-bound, the other not), in the
#: compact table, and what it means.
HOST_MARK = "‡"
HOST_NOTE = (
    f"{HOST_MARK}: host-dependent, one side launch-bound and the other not: the wall speedup is this "
    "host's (at its µs per launch)."
)
#: What the compact table's `GPU alone` is, under it where it has the column.
GPU_ALONE_NOTE = "GPU alone: eager GPU time per step / compiled, what the kernels give on any host."


def no_device_time(metrics: pd.DataFrame) -> list[str]:
    """Why a completed cell has no device time, plainly ('' where it has one or did not complete):
    the CPU, several processes (the profiled windows run in one-process cells), or not measured."""
    texts = []
    for status, gpu, device, world in zip(
        metrics["status"], metrics["gpu_ms"], metrics["device"], metrics["world_size"]
    ):
        if status != "completed" or not is_null(gpu):
            texts.append("")
        elif not is_null(device) and str(device).startswith("cpu"):
            texts.append("no device time (CPU)")
        elif not is_null(world) and int(world) > 1:
            texts.append(f"no device time ({int(world)} processes)")
        else:
            texts.append("no device time (not measured)")
    return texts


def device_speedup_texts(metrics: pd.DataFrame) -> list[str]:
    """`1.38x [1.37, 1.39]`, or why a completed cell has none (`no_device_time`)."""
    speedups = zip(metrics["device_speedup"], metrics["device_speedup_low"], metrics["device_speedup_high"])
    return [fmt_speedup(*v) or why for v, why in zip(speedups, no_device_time(metrics))]


def side_texts(metrics: pd.DataFrame, column: str, fmt=fmt_number) -> list[str]:
    """`7.40`, or `7.40 (eager 7.50)` for a paired cell: a per-side column of each side."""
    return _both_sides([fmt(v) for v in metrics[column]], [fmt(v) for v in metrics[f"eager_{column}"]])


def launch_us_texts(metrics: pd.DataFrame) -> list[str]:
    """`33.3`, or `≤75.1 (eager 33.3)` for a paired cell: each side's µs per launch, `≤` where the side
    is not launch-bound (its host ran ahead of the GPU and may have waited for the queue of launches
    to drain: an upper bound of the host's own)."""

    def texts(prefix: str) -> list[str]:
        values = zip(metrics[f"{prefix}host_us_per_launch"], metrics[f"{prefix}launch_bound"])
        return [
            "" if is_null(v) else f"{'' if not is_null(bound) and bool(bound) else '≤'}{float(v):.1f}"
            for v, bound in values
        ]

    return _both_sides(texts(""), texts("eager_"))


def _both_sides(own: list[str], eager: list[str]) -> list[str]:
    return [f"{mine} (eager {theirs})" if mine and theirs else mine for mine, theirs in zip(own, eager)]


def bound_texts(metrics: pd.DataFrame) -> list[str]:
    """`data-bound`, `launch-bound`, `eager launch-bound`, `both launch-bound`, or ''."""
    texts = []
    for data, own, eager in zip(
        metrics["data_bound"], metrics["launch_bound"], metrics["eager_launch_bound"]
    ):
        own, eager = not is_null(own) and bool(own), not is_null(eager) and bool(eager)
        if not is_null(data) and bool(data):
            texts.append("data-bound")
        else:
            texts.append({(True, True): "both launch-bound", (True, False): "launch-bound",
                          (False, True): "eager launch-bound"}.get((own, eager), ""))  # fmt: skip
    return texts


def _host_dependent(metrics: pd.DataFrame) -> np.ndarray:
    return metrics["host_dependent"].fillna(False).astype(bool).to_numpy()


def _bound_speeds(metrics: pd.DataFrame) -> list[str]:
    """Per host-dependent cell, its launch-bound side's host speed: ` at 7.6 µs/launch` (older sweeps:
    µs per tiny op before measuring); the eager cell's for an unpaired cell whose eager cell is the
    launch-bound one; '' for the other cells. By columns, not rows: a row of the per-cell table is a
    Series of ~300 values (on examples/benchmarks/analyze_scale.py's 1,000 cells, row by row this and
    `host_texts` took 3.3 s beside a 1.5 s 20M-step Python loop; by columns 0.07 s)."""
    own_bound = metrics["launch_bound"].to_numpy(bool)
    paired = (metrics["speedup_method"] == PAIRED).to_numpy()
    base = pd.Index(metrics["cell_id"]).get_indexer(metrics["baseline_cell_id"])
    source = np.where(~paired & ~own_bound & (base >= 0), base, np.arange(len(metrics)))
    column = lambda name: metrics[name].to_numpy(float)[source]  # noqa: E731
    launch = np.where(
        paired & ~own_bound, metrics["eager_host_us_per_launch"].to_numpy(float), column("host_us_per_launch")
    )
    tiny = column("host_op_us")
    return [
        "" if not dependent else f" at {us:.1f} µs/launch" if not np.isnan(us) else
        f" at {op:.1f} µs/tiny op" if not np.isnan(op) else ""
        for dependent, us, op in zip(_host_dependent(metrics), launch, tiny)
    ]  # fmt: skip


#: The columns `host_texts` reads of each cell (`gap_text` among them).
_HOST_COLUMNS = [
    "speedup", "speedup_high", "device_speedup", "device_speedup_low", "launch_bound", "launches_per_step",
    "host_us_per_launch", "gpu_ms", "backend", "compile_mode", "median_step_ms",
]  # fmt: skip


def host_texts(metrics: pd.DataFrame) -> list[str]:
    """Per cell, what the host does to its wall speedup: where host-dependent, `1.95x on this host at
    7.6 µs/launch; 1.01x on the GPU alone`; where the device-time speedup clears the wall one by more
    than GAP and the compiled side is launch-bound, what would close the gap (`gap_text`); else ''."""
    texts = []
    rows = metrics[_HOST_COLUMNS].to_dict("records")
    for row, dependent, at in zip(rows, _host_dependent(metrics), _bound_speeds(metrics)):
        host = (
            f"{fmt_speedup(row['speedup'])} on this host{at}; {fmt_speedup(row['device_speedup'])} on the GPU"
        )
        texts.append(
            "; ".join(part for part in (f"{host} alone" if dependent else "", gap_text(row)) if part)
        )
    return texts


def closes_gap(row: Mapping[str, Any]) -> bool:
    """Whether the device-time speedup lies well above the wall speedup (its interval's low end, or
    itself without one, above the wall interval's high end, or the wall speedup, by more than GAP)
    and the compiled side is launch-bound: the host eats what the kernels gained."""
    device = row["device_speedup_low"] if not is_null(row["device_speedup_low"]) else row["device_speedup"]
    wall = row["speedup_high"] if not is_null(row["speedup_high"]) else row["speedup"]
    bound = not is_null(row["launch_bound"]) and bool(row["launch_bound"])
    return bound and not is_null(device) and not is_null(wall) and float(device) > float(wall) * (1 + GAP)


def gap_text(row: Mapping[str, Any]) -> str:
    """What would close a cell's gap between its device-time and wall speedups (`closes_gap`): the
    launches a compiled step makes and their µs, and what CUDA graphs would make of it, by the model
    with one launch per step: `1,200 launches/step at 15.0 µs: 18.00 ms of host for 12.81 ms of GPU;
    CUDA graphs (mode=reduce-overhead) replay them as one launch: ~12.81 ms, 1.41x`. A cell that
    replays CUDA graphs already is told where its launches are: outside them."""
    if not closes_gap(row):
        return ""
    launches, us, gpu = row["launches_per_step"], row["host_us_per_launch"], row["gpu_ms"]
    if is_null(launches) or is_null(us):
        return f"the host eats the GPU's {fmt_speedup(row['device_speedup'])}: launches not measured"
    host = float(launches) * float(us) / 1e3
    spent = f"{float(launches):,.0f} launches/step at {float(us):.1f} µs: {fmt_number(host)} ms of host for "
    if row["backend"] in GRAPH_BACKENDS or row["compile_mode"] in GRAPH_MODES:
        return f"{spent}{fmt_number(gpu)} ms of GPU, outside its CUDA graphs"
    graphed = float(predicted_step_ms(gpu, 1, us))
    # The eager side stays as measured: the wall speedup scaled by the compiled step's change.
    predicted = fmt_speedup(float(row["speedup"]) * float(row["median_step_ms"]) / graphed)
    return (
        f"{spent}{fmt_number(gpu)} ms of GPU; CUDA graphs (mode=reduce-overhead) replay them as one "
        f"launch: ~{fmt_number(graphed)} ms, {predicted}"
    )


def full_columns(metrics: pd.DataFrame) -> dict[str, list[str]]:
    """The full per-cell table's device-time columns, beside the wall speedup: the device-time speedup,
    each side's GPU ms, launches and µs per launch, why a side is slow, what the host does to the wall
    speedup (`host_texts`)."""
    return {
        "device speedup [95% CI]": device_speedup_texts(metrics),
        "GPU ms/step": side_texts(metrics, "gpu_ms"),
        "launches/step": side_texts(
            metrics, "launches_per_step", lambda v: "" if is_null(v) else f"{v:,.0f}"
        ),
        "µs/launch": launch_us_texts(metrics),
        "bound": bound_texts(metrics),
        "host": host_texts(metrics),
    }


def compact_columns(metrics: pd.DataFrame, speedups: list[str]) -> dict[str, list[str]]:
    """The compact table's speedup column (`speedups`, its texts) with HOST_MARK after those of
    host-dependent cells, and `GPU alone` beside it (`gpu_alone_texts`)."""
    return {"speedup [95% CI]": host_marked(speedups, metrics), "GPU alone": gpu_alone_texts(metrics)}


def host_marked(texts: list[str], metrics: pd.DataFrame) -> list[str]:
    """The compact table's speedups, HOST_MARK after those of host-dependent cells."""
    return [
        f"{text}{HOST_MARK}" if text and mark else text for text, mark in zip(texts, _host_dependent(metrics))
    ]


def gpu_alone_texts(metrics: pd.DataFrame) -> list[str]:
    """The compact table's device-time speedup (`1.01x`), or why a cell has none where another has one
    (`no device time (CPU)`): a column only a sweep with device time has."""
    texts = [fmt_speedup(value) for value in metrics["device_speedup"]]
    if not any(texts):
        return texts
    compared = metrics["speedup"].notna().to_numpy()
    return [
        text or (why if shown else "") for text, why, shown in zip(texts, no_device_time(metrics), compared)
    ]


def compact_why(metrics: pd.DataFrame) -> list[str]:
    """The compact table's why of a completed cell: `data-bound`, which side is launch-bound, and for a
    host-dependent cell the launch-bound side's µs per launch (`eager launch-bound, 7.6 µs/launch`;
    `eager cell launch-bound, ...` where an unpaired cell's eager cell is)."""
    texts = []
    for bound, at, dependent in zip(bound_texts(metrics), _bound_speeds(metrics), _host_dependent(metrics)):
        side = bound or ("eager cell launch-bound" if dependent else "")
        texts.append(f"{side},{at.replace(' at ', ' ', 1)}" if at else side)
    return texts


def host_note(metrics: pd.DataFrame) -> str:
    """The compact table's note on its device time: GPU_ALONE_NOTE where a cell has a device-time
    speedup, HOST_NOTE where one is host-dependent; '' for neither."""
    notes = (GPU_ALONE_NOTE if metrics["device_speedup"].notna().any() else "",
             HOST_NOTE if _host_dependent(metrics).any() else "")  # fmt: skip
    return " ".join(note for note in notes if note)


def device_note(launch_bound: float) -> str:
    """The full table's note on its device-time columns."""
    return (
        "Device time, per side (a paired cell's eager side in parentheses), from short profiled windows "
        "after measuring, over the completed runs: GPU ms/step, the union of the device's kernel and copy "
        "intervals per step (the GPU's durations, the same on any host); launches/step, host calls that put "
        "work on the device (a CUDA-graph replay: one); µs/launch, the host's time per measured step (its "
        "call to its return) / its launches, `≤` where the side is not launch-bound (its host may have "
        "waited for the GPU's queue of launches). Device speedup: eager GPU ms / compiled GPU ms, its "
        "interval as the speedup's (over runs, or within one process over the profiled windows); `no "
        "device time` on the "
        f"CPU and for cells of several processes. Bound: a side is launch-bound where the GPU idles more "
        f"than {100 * launch_bound:.0f}% of its measured step (1 - GPU ms / step) and the cell is not "
        "data-bound. Host: where one side is launch-bound and the other not, the wall speedup is this "
        "host's, beside the GPU's; where the device speedup's interval clears the wall one's by more than "
        f"{100 * GAP:.0f}% and the compiled side is launch-bound, what would close the gap, by the model "
        "step = max(GPU ms, launches x µs/launch)."
    )
