"""Which cells of two sweeps are the same cell: matched by their axes (workloads/contract/vocabulary.py:
model, size, backend, mode, flags, precision, data, seed, batch, processes, ...) except the hardware
ones (device, GPU). What differs between two sweeps by design — torch version, cluster, GPU, date,
commit, host — is not an axis or is left out, so a module upgrade or another cluster finds its cells.
Where one sweep has several cells of one key (other step counts), the one that speaks for them is
`axes.representatives`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.reading.axes import axis_rows, axis_text, cell_labels, representatives
from workloads.contract.vocabulary import HARDWARE, PROCESSES, WORKLOAD, names

#: The axes cells are matched by: all but where they ran.
MATCHED_AXES = [axis for axis in names() if axis not in names(HARDWARE)]
#: What is said of a cell only one sweep has.
UNMATCHED = ["cell_id", "label", "status"]


class CompareError(ValueError):
    """Two sweeps that cannot be compared; the message is one line."""


@dataclass
class Matched:
    """The per-cell metrics of the cells in both sweeps (`a`, `b`: same keys, same order), with a
    `label` each, and UNMATCHED of the cells only one sweep has."""

    a: pd.DataFrame
    b: pd.DataFrame
    only_in_a: pd.DataFrame
    only_in_b: pd.DataFrame


def keyed(metrics: pd.DataFrame) -> pd.DataFrame:
    """One cell per key (the matched axes as text, null as ''), with the key as the index."""
    keys = ["\x1f".join(map(axis_text, values)) for values in axis_rows(metrics, MATCHED_AXES)]
    return representatives(metrics.assign(_key=keys), ["_key"]).sort_index().set_index("_key")


def match(metrics_a: pd.DataFrame, metrics_b: pd.DataFrame, sweep_a: Path, sweep_b: Path) -> Matched:
    """The cells of two sweeps' per-cell metrics matched by key; CompareError where a sweep has no
    cells or no cell of A has the key of one of B."""
    for sweep, metrics in ((sweep_a, metrics_a), (sweep_b, metrics_b)):
        if metrics.empty:
            raise CompareError(f"no cells in {sweep}")
    every_a, every_b = keyed(metrics_a), keyed(metrics_b)
    # Labelled together: the settings that vary across both sweeps tell unmatched cells apart.
    labels = cell_labels(pd.concat([every_a, every_b]), names(WORKLOAD, PROCESSES))
    every_a["label"] = labels.iloc[: len(every_a)].to_numpy()
    every_b["label"] = labels.iloc[len(every_a) :].to_numpy()
    common = every_a.index.intersection(every_b.index, sort=False)
    if not len(common):
        raise CompareError(f"no cell of {sweep_a} has the axes of a cell of {sweep_b}: nothing to compare")

    def alone(own: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
        return own.loc[~own.index.isin(other.index), UNMATCHED].reset_index(drop=True)

    return Matched(every_a.loc[common], every_b.loc[common], alone(every_a, every_b), alone(every_b, every_a))
