"""Why a cell is fast or slow: the GPU's busy share of its profiled window, and `launch-bound`.

Each CUDA cell of one process profiles a short window after measuring (workloads/instruments/
profiled_window.py): the share of the window some stream of the GPU worked. Per cell, the median
over its completed replicates, of its own steps and, where it measured paired, of its eager side;
and the host's speed beside them (`host_op_us`, workloads/instruments/host_load.py), which a
launch-bound step follows. A cell is launch-bound where the GPU idled more than a stated share of
its window and it is not data-bound (a wait for batches idles the GPU too, for another reason).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.reading.collect import BUSY_READ
from analysis.rendering.text import fmt_number, fmt_percent, is_null
from workloads.contract.vocabulary import COMPLETED

#: Above this idle share of the GPU (1 - busy share) a cell is launch-bound (`--launch-bound`). A step
#: the GPU idles a fifth of could run 1.25x faster with the host out of the way: a gain the size of
#: those compiling brings (1.1x-1.4x), so the label says where the host, not the kernels, sets the
#: pace. The GPU's own gaps between queued kernels (about a µs each) stay below it while the kernels
#: last 5 µs or more on average, as a GPU-bound cell's should (tests/benchmarks/busy_share_gpu.py).
LAUNCH_BOUND = 0.2
#: The columns `busy_columns` gives.
BUSY_COLUMNS = [*BUSY_READ, "launch_bound"]


def busy_columns(cells: pd.DataFrame, replicates: pd.DataFrame, launch_bound: float) -> pd.DataFrame:
    """BUSY_COLUMNS of each cell (in `cells`' order, with its `data_bound`): the median of BUSY_READ over the
    cell's completed replicates (NaN where none recorded it), and whether it is launch-bound."""
    done = replicates[replicates["status"] == COMPLETED]
    medians = done.groupby("cell_id")[list(BUSY_READ)].median().reindex(cells["cell_id"])
    columns = pd.DataFrame(medians.to_numpy(float), columns=list(BUSY_READ), index=cells.index)
    idle = 1 - columns["gpu_busy_share"].to_numpy(float)
    completed = (cells["status"] == COMPLETED).to_numpy()
    data_bound = cells["data_bound"].to_numpy(bool)
    columns["launch_bound"] = completed & (np.nan_to_num(idle, nan=0.0) > launch_bound) & ~data_bound
    return columns


def busy_texts(metrics: pd.DataFrame) -> list[str]:
    """`38%`, or `38% (eager 20%)` for a paired cell: the GPU's busy share of each side."""
    texts = []
    for own, eager in zip(metrics["gpu_busy_share"], metrics["eager_gpu_busy_share"]):
        text = "" if is_null(own) else fmt_percent(own, digits=0)
        texts.append(
            f"{text} (eager {fmt_percent(eager, digits=0)})" if text and not is_null(eager) else text
        )
    return texts


def bound_texts(metrics: pd.DataFrame, host_speed: bool = True) -> list[str]:
    """`data-bound`, `launch-bound, host 7.5 µs/op` (`host_speed`: the host's µs per tiny op), or ''."""
    texts = []
    for data, launch, host in zip(metrics["data_bound"], metrics["launch_bound"], metrics["host_op_us"]):
        if not is_null(data) and bool(data):
            texts.append("data-bound")
        elif not is_null(launch) and bool(launch):
            texts.append(
                "launch-bound"
                + ("" if is_null(host) or not host_speed else f", host {fmt_number(host)} µs/op")
            )
        else:
            texts.append("")
    return texts
