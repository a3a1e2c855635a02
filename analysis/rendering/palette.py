"""The one mapping from backend label to colour that every figure uses.

The backends and modes compilebench knows get fixed colours, so `inductor` is the same blue in
every figure of every sweep and a reader learns the colours once; any other label (another
registered dynamo backend, a treatment flag such as `inductor (regional)`) gets one of the spare
colours, in the order of the sorted labels, the same in every figure of one sweep. Red is kept
for cells without a value.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Fixed colours (matplotlib's tab10 and greys; none of them red).
KNOWN: dict[str, str] = {
    "eager": "#4d4d4d",
    "inductor": "#1f77b4",
    "inductor (reduce-overhead)": "#17becf",
    "inductor (max-autotune)": "#9467bd",
    "inductor (max-autotune-no-cudagraphs)": "#e377c2",
    "cudagraphs": "#ff7f0e",
    "aot_eager": "#2ca02c",
    "torchscript": "#8c564b",
}
#: Colours of other labels, in turn (tab20's light shades and olive); they repeat past the tenth.
SPARE = (
    "#bcbd22",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#7f7f7f",
)
#: A cell that should have a value and has none (failed, not_compiled, no eager cell).
NO_VALUE = "#d62728"
#: The share of a step spent waiting for data (drawn hatched beside a backend's colour).
DATA_WAIT = "#d9d9d9"


def backend_colors(labels: Iterable[str]) -> dict[str, str]:
    """{label: colour} for these backend labels (workloads.contract.vocabulary.backend_label)."""
    others = sorted(set(labels) - set(KNOWN))
    return {**KNOWN, **{label: SPARE[i % len(SPARE)] for i, label in enumerate(others)}}
