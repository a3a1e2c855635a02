"""The post's layer (`gemm.layer`): the table of layer cells, launched one by one against one CUDA
graph, and the post's claims about its layer judged on them (`--reference fp8_triton`).

The claims, as published, are the `layer_*` rows of analysis/reference/fp8_triton_2024.csv; a row's
kind is the run column it is judged on (workloads/contract/schema.py LAYER_FIELDS). The post's point
is that launching costs much (large gaps, an idle GPU) and a graph removes it (small gaps, a speedup):
a claim is reproduced where our cell furthest in its direction reaches it. Its matmul time is of a layer
whose GEMMs it does not name, so ours stands beside it, not judged.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.rendering.text import Table, fmt_interval, fmt_number, fmt_percent, fmt_speedup, is_null
from analysis.studies.base import Study
from analysis.studies.gemm.claims import (
    FP8_TRITON,
    NOT_MEASURED,
    NOT_REPRODUCED,
    REPRODUCED,
    Judged,
    judged,
    load_claims,
)
from workloads.contract.schema import LAYER_WAYS
from workloads.contract.vocabulary import COMPLETED

LAYER_TABLE, LAYER_CLAIMS = "gemm_layer", "fp8_triton_layer_claims"
AT_LEAST, AT_MOST = "at least", "at most"
#: Each claim's direction (module docstring); None: shown, not judged.
DIRECTIONS = {
    "layer_launched_gap_us": AT_LEAST,
    "layer_launched_idle_share": AT_LEAST,
    "layer_graph_gap_us": AT_MOST,
    "layer_graph_speedup": AT_LEAST,
    "layer_launched_matmul_us": None,
}
NOT_JUDGED = "not judged"
NOTHING_TO_JUDGE = "nothing to judge: the sweep has no layer cells (model=gemm gemm.layer=...)"


def fmt_value(value: object, unit: str) -> str:
    """`165 µs`, `92%`, `6.40x`."""
    if is_null(value):
        return ""
    if unit == "share":
        return fmt_percent(value, 0)
    return fmt_speedup(value) if unit == "x" else f"{fmt_number(value)} {unit}"


def _posted(claims: pd.DataFrame) -> str:
    """The post's numbers, as the note of the layer table gives them."""
    return "; ".join(
        f"{claim['claim']}: {fmt_value(claim['value'], claim['unit'])}" for _, claim in claims.iterrows()
    )


def _ways(cells: pd.DataFrame, name: str, fmt: Callable[[object], str]) -> dict[str, pd.Series]:
    """Each way's `layer_<way>_<name>` column, formatted."""
    return {way: cells[f"layer_{way}_{name}"].map(fmt) for way in LAYER_WAYS}


def layer_table(cells: pd.DataFrame) -> Table:
    """The layer cells as a table: one row per (layer, M, implementation)."""
    done = cells["status"] == COMPLETED
    us, gap, host = (_ways(cells, name, fmt_number) for name in ("us", "gap_us", "launch_us"))
    idle = _ways(cells, "idle_share", lambda v: fmt_percent(v, 0))
    text = pd.DataFrame({
        "layer": cells["gemm_layer"], "M": cells["gemm_m"].map(lambda v: "" if is_null(v) else str(int(v))),
        "implementation": cells["implementation"],
        "launched µs": us["launched"], "graph µs": us["graph"],
        "graph speedup": cells["layer_graph_speedup"].map(fmt_speedup),
        "idle launched": idle["launched"], "idle graph": idle["graph"],
        "gap launched µs": gap["launched"], "gap graph µs": gap["graph"],
        "matmul µs": cells["layer_launched_matmul_us"].map(fmt_number),
        "kernels": cells["layer_launched_kernels"].map(fmt_number),
        "host launch µs launched": host["launched"], "host launch µs graph": host["graph"],
        "replayed µs [95%]": [fmt_interval(*v) if ok else s for v, ok, s in
                              zip(cells[["us", "us_low", "us_high"]].values, done, cells["status"])],
        "floor µs": cells["gemm_floor_us"].map(fmt_number), "kernel": cells["gemm_kernel"].fillna(""),
        "cell": cells["cell_id"],
    })  # fmt: skip
    note = (
        "One layer at a time on an idle GPU, profiled (torch.profiler, CUDA activity): launched = its GEMMs "
        "called one by one from Python, graph = one CUDA graph of them; µs = the first kernel's start to the "
        "last one's end, idle = the share of that span with no kernel running, gap = the median time between "
        "consecutive kernels, matmul = the kernels' union (medians over the windows); host launch = the "
        "host's time to launch a layer, unprofiled. Replayed: the measured loop's µs per layer, layers back "
        "to back in a CUDA graph; floor: the sum of the GEMMs' roofline floors. The post (section 5): "
        f"{_posted(load_claims(layer=True))}."
    )
    return Table(
        LAYER_TABLE, "The post's layer: launched one by one against one CUDA graph", cells, text, note
    )


def judge(cells: pd.DataFrame, claim: pd.Series) -> Judged:
    """Our side of one layer claim on the layer table's rows."""
    column, unit = claim["kind"], claim["unit"]
    measured = cells[(cells["status"] == COMPLETED) & cells[column].notna()]
    if measured.empty:
        return Judged("", "", NOT_MEASURED, "no completed layer cell measured it")
    label = lambda row: f"{row['implementation']}, M = {int(row['gemm_m'])}"  # noqa: E731
    ours = "; ".join(f"{label(row)}: {fmt_value(row[column], unit)}" for _, row in measured.iterrows())
    direction = DIRECTIONS[column]
    if direction is None:
        return Judged(
            ours, "", NOT_JUDGED, "the post does not name its layer's GEMMs; ours: Llama3-70B's q, k, v and o"
        )
    best = measured.loc[measured[column].idxmax() if direction == AT_LEAST else measured[column].idxmin()]
    reached = best[column] >= claim["value"] if direction == AT_LEAST else best[column] <= claim["value"]
    extreme = "largest" if direction == AT_LEAST else "smallest"
    outcome = "reached" if reached else "not reached"
    reason = f"{extreme}: {fmt_value(best[column], unit)} ({label(best)}); {direction} "
    reason += f"{fmt_value(claim['value'], unit)} {outcome}"
    return Judged(ours, "", REPRODUCED if reached else NOT_REPRODUCED, reason)


def layer_claims_table(cells: pd.DataFrame) -> Table:
    """The post's layer claims with our verdicts; without layer cells, a table that says so."""
    title = "The FP8 GEMM post's layer claims against our layer cells"
    if cells.empty:
        return Table(LAYER_CLAIMS, title, pd.DataFrame(), pd.DataFrame(), NOTHING_TO_JUDGE)
    data = judged(load_claims(layer=True), cells, judge)
    text = pd.DataFrame({
        "claim (post)": data["claim"],
        "published": [fmt_value(v, u) for v, u in zip(data["value"], data["unit"])],
        "compared with": data["compared_with"], "ours": data["ours"], "verdict": data["verdict"],
        "reason": data["reason"],
    })  # fmt: skip
    note = (
        "Published: PyTorch blog, 'Accelerating Llama3 FP8 Inference with Triton Kernels' (2024), section 5, "
        "Nsight Systems. Ours: the layer table's profiled windows (one layer at a time, torch.profiler); a "
        "claim is reproduced where our cell furthest in its direction reaches it."
    )
    return Table(LAYER_CLAIMS, title, data, text, note)


class GemmLayer(Study):
    """The layer cells (`gemm.layer`): their table, where the sweep has any."""

    def tables(self, loaded: Loaded) -> list[Table]:
        return [layer_table(loaded.gemm_layers)] if len(loaded.gemm_layers) else []


class Fp8TritonLayerClaims(Study):
    """`--reference fp8_triton`: the post's layer claims judged on the sweep's layer cells."""

    reference = FP8_TRITON

    def tables(self, loaded: Loaded) -> list[Table]:
        return [layer_claims_table(loaded.gemm_layers)]
