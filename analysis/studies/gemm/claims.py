"""The FP8 GEMM post's claims judged against our GEMM cells (`compilebench analyze --reference fp8_triton`).

The claims, as published, are package data: analysis/reference/fp8_triton_2024.csv (README there).
Each is a claim about TK-GEMM, the post's SplitK kernel, and is judged at equal settings on our SplitK
cells (`gemm.kernel=triton_splitk`) of its shapes, against the cells of the same shape and GPU that
it names (the GEMM table's speedups: analysis/cells/gemm.py), each with our 95% interval and what the
roofline's floor allows. A value is read against the published one with the per-cell table's own rule
(`equivalence_verdict` of ours / published, at `--equivalence`); the verdict words and the logic that
gives each: docs/gemm.md ("The post's claims judged").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import numpy as np
import pandas as pd

from analysis.cells.gemm import FP8, TRITON_SPLITK
from analysis.cells.loaded import Loaded
from analysis.rendering.text import Table, fmt_interval, fmt_number, fmt_percent, fmt_speedup, is_null
from analysis.statistics.verdicts import equivalence_verdict
from analysis.studies.base import Study
from workloads.contract.vocabulary import COMPLETED

#: The `--reference` of the FP8 GEMM post, and its claims' file.
FP8_TRITON, REFERENCE_FILE = "fp8_triton", "fp8_triton_2024.csv"
REPRODUCED, EXCEEDED, NOT_REPRODUCED = "reproduced", "exceeded", "not reproduced"
BEYOND_FLOOR, INCONCLUSIVE, NOT_MEASURED = "beyond the bandwidth floor", "inconclusive", "not measured"
#: What the equivalence verdict of ours / published says of a claim.
_WORDS = {
    "no difference": REPRODUCED,
    "faster": EXCEEDED,
    "slower": NOT_REPRODUCED,
    "undecided": INCONCLUSIVE,
}
NOTHING_TO_JUDGE = "nothing to judge: the sweep has no GEMM cells (model=gemm)"
#: A speedup claim's column of our SplitK rows (analysis/cells/gemm.py) and what it is over.
SPEEDUPS = {
    "over_triton_base": ("vs_triton_base", "base Triton fp8"),
    "over_fp8_cublas": ("vs_fp8_cublas", "fp8 cuBLAS"),
    "over_bf16_cublas": ("vs_bf16_cublas", "bf16 cuBLAS"),
}
NO_SPLITK = "no cell runs the SplitK kernel (gemm.kernel=triton_splitk)"
FP16 = "the post's baseline was cuBLAS FP16, ours is bf16 (the same tensor-core rate on an H100)"


@dataclass(frozen=True)
class Judged:
    """Our side of one claim: our value with its interval, what the floor allows, the verdict, why."""

    ours: str
    floor: str
    verdict: str
    reason: str


#: The kinds of the claims about the post's layer, judged on layer cells (analysis/studies/gemm/layer.py).
LAYER_KINDS = "layer_"


def load_claims(layer: bool = False) -> pd.DataFrame:
    """The published claims of one GEMM, or with `layer` those of the post's layer: claim, kind, value,
    unit, m_min, m_max, n, k, compared_with, source."""
    with (resources.files("analysis") / "reference" / REFERENCE_FILE).open() as fh:
        claims = pd.read_csv(fh)
    return claims[claims["kind"].str.startswith(LAYER_KINDS) == layer].reset_index(drop=True)


def _shapes(claim: pd.Series) -> str:
    low, high = int(claim["m_min"]), claim["m_max"]
    m = f"M ≥ {low}" if is_null(high) else f"M = {low}" if high == low else f"M = {low}–{int(high)}"
    return f"N = {int(claim['n'])}, K = {int(claim['k'])}, {m}"


def _published(value: float, unit: str) -> str:
    """`1.87x`, `from M = 32`, `1,650 GB/s`."""
    return f"{value:g}x" if unit == "x" else f"from M = {value:g}" if unit == "M" else f"{value:,g} {unit}"


def _splitk(cells: pd.DataFrame, claim: pd.Series) -> pd.DataFrame:
    """Our completed SplitK cells of the claim's shapes, by M."""
    m = cells["gemm_m"].astype(float)
    keep = (
        (cells["status"] == COMPLETED)
        & (cells["backend"] == TRITON_SPLITK)
        & (cells["precision"] == FP8)
        & (cells["gemm_n"] == claim["n"])
        & (cells["gemm_k"] == claim["k"])
        & (m >= claim["m_min"])
        & (is_null(claim["m_max"]) or m <= claim["m_max"])
    )
    return cells[keep.to_numpy(bool)].sort_values("gemm_m")


def _against(value: float, low: float, high: float, claimed: float, margin: float) -> tuple[str, str]:
    """(verdict, why) of our value and its 95% interval against the published value: the equivalence
    verdict of ours / published (a point without an interval: that point)."""
    low, high = (value, value) if is_null(low) or is_null(high) else (low, high)
    ratio = np.array([low, high]) / claimed
    verdict = _WORDS[equivalence_verdict(ratio[:1], ratio[1:], margin)[0]]
    within = f"±{fmt_percent(margin, 0)}"
    said = {
        REPRODUCED: f"within {within} of it",
        EXCEEDED: f"above it by more than {within}",
        NOT_REPRODUCED: f"below it by more than {within}",
        INCONCLUSIVE: f"holds it but is wider than {within}: measure more",
    }[verdict]
    return verdict, f"ours / published {fmt_speedup(value / claimed, *ratio)}: {said}"


def _speedup(splitk: pd.DataFrame, claim: pd.Series, margin: float) -> Judged:
    """An "up to Nx over X" claim: our SplitK's best speedup over X at the claim's M, against the claim
    and against the most the floor allows (X's µs / the floor's, at the best M for it)."""
    column, over = SPEEDUPS[claim["kind"]]
    if splitk.empty:
        return Judged("", "", NOT_MEASURED, f"{NO_SPLITK} at {_shapes(claim)}")
    rows = splitk.dropna(subset=[column])
    if rows.empty:
        return Judged("", "", NOT_MEASURED, f"no {over} cell at the M of our SplitK cells")
    best = rows.loc[rows[column].idxmax()]
    value, low, high = best[[column, f"{column}_low", f"{column}_high"]]
    ours = f"{_interval(best, column)} at M = {int(best['gemm_m'])}"
    # The other kernel's µs is SplitK's times the speedup over it; no kernel is faster than the floor.
    allowed = (rows["us"] * rows[column] / rows["gemm_floor_us"]).dropna()
    floor = ""
    if len(allowed):
        at = rows.loc[allowed.idxmax()]
        floor = (
            f"≤ {fmt_speedup(allowed.max())} (M = {int(at['gemm_m'])}: {over} "
            f"{fmt_number(at['us'] * at[column])} µs / the {fmt_number(at['gemm_floor_us'])} µs floor)"
        )
    verdict, reason = _against(value, low, high, claim["value"], margin)
    if verdict == NOT_REPRODUCED and len(allowed) and allowed.max() < claim["value"]:
        verdict = BEYOND_FLOOR
        reason = (
            f"{_published(claim['value'], 'x')} over our {over} would be faster than the floor at every M "
            f"measured: no kernel can be"
        )
    if claim["kind"] == "over_bf16_cublas":
        reason = f"{reason}; {FP16}"
    return Judged(ours, floor, verdict, reason)


def _listed(ms) -> str:
    return ", ".join(str(int(m)) for m in ms)


def _crossover(splitk: pd.DataFrame, claim: pd.Series, margin: float) -> Judged:
    """Where fp8 cuBLAS overtakes SplitK for good, on our grid of M: the smallest M from which cuBLAS
    is faster (SplitK's speedup over it `slower`) at every M measured, and the last M below it where
    SplitK is faster; the published M must lie between the two."""
    if splitk.empty:
        return Judged("", "", NOT_MEASURED, f"{NO_SPLITK} at {_shapes(claim)}")
    rows = splitk.dropna(subset=["vs_fp8_cublas_low", "vs_fp8_cublas_high"]).drop_duplicates("gemm_m")
    if rows.empty:
        return Judged("", "", NOT_MEASURED, "no fp8 cuBLAS cell at the M of our SplitK cells")
    ms = rows["gemm_m"].astype(int).to_numpy()
    if not ms[0] < claim["value"] <= ms[-1]:
        return Judged(
            "", "", NOT_MEASURED, f"our M = {_listed(ms)} do not reach both sides of M = {claim['value']:g}"
        )
    said = equivalence_verdict(rows["vs_fp8_cublas_low"], rows["vs_fp8_cublas_high"], margin)
    splitk_ahead, cublas_ahead = ms[said == "faster"], ms[said == "slower"]
    sides = (
        f"SplitK faster at M = {_listed(splitk_ahead) or 'none'}, "
        f"fp8 cuBLAS at M = {_listed(cublas_ahead) or 'none'}"
    )
    behind = np.flatnonzero(said != "slower")
    start = 0 if not len(behind) else behind[-1] + 1  # cuBLAS faster from ms[start] on
    at = rows.iloc[min(start, len(ms) - 1)]
    there = f"SplitK {_interval(at, 'vs_fp8_cublas')} at M = {int(at['gemm_m'])}"
    if start == len(ms):
        return Judged(
            f"no crossover in the measured range ({there})",
            "",
            NOT_REPRODUCED,
            f"{sides}: fp8 cuBLAS is not faster at the largest M",
        )
    share = at["floor_share"]  # the floor / SplitK's µs; cuBLAS's µs is SplitK's x the speedup over it
    floor = (
        ""
        if is_null(share)  # a GPU without a peak in the project's tables
        else f"{fmt_number(at['gemm_floor_us'])} µs at M = {ms[start]}: SplitK at {fmt_percent(share, 0)} "
        f"of it, fp8 cuBLAS at {fmt_percent(share / at['vs_fp8_cublas'], 0)}"
    )
    won = splitk_ahead[splitk_ahead < ms[start]]
    if not len(won):
        return Judged(f"from M = {ms[start]} ({there})", floor, NOT_REPRODUCED, f"{sides}: none below")
    ours = f"from M = {ms[start]} ({there}); SplitK faster up to M = {won[-1]}"
    if won[-1] < claim["value"] <= ms[start]:
        return Judged(ours, floor, REPRODUCED, sides)
    when = "earlier" if ms[start] < claim["value"] else "later"
    return Judged(
        ours, floor, NOT_REPRODUCED, f"{sides}: cuBLAS overtakes {when} than M = {claim['value']:g}"
    )


def _interval(row: pd.Series, column: str) -> str:
    """`1.05x [1.04, 1.06]`: a row's speedup with its interval."""
    return fmt_speedup(*row[[column, f"{column}_low", f"{column}_high"]])


def _throughput(splitk: pd.DataFrame, claim: pd.Series, margin: float) -> Judged:
    """Our SplitK's GB/s at the claim's shape (bytes a GEMM must move / its µs), with the interval of
    its µs, against the published DRAM throughput; the floor is the GPU's peak bandwidth."""
    rows = splitk.dropna(subset=["gbps"])
    if rows.empty:
        return Judged("", "", NOT_MEASURED, f"{NO_SPLITK} at {_shapes(claim)}")
    best = rows.loc[rows["gbps"].idxmax()]
    low, high = (best["gemm_bytes"] / (best[end] * 1e3) for end in ("us_high", "us_low"))
    ours = f"{fmt_interval(best['gbps'], low, high)} GB/s"
    floor = "" if is_null(best["peak_gbps"]) else f"{fmt_number(best['peak_gbps'])} GB/s peak"
    if floor:
        ours += f" ({fmt_percent(best['gbps'] / best['peak_gbps'], 0)} of peak)"
    verdict, reason = _against(best["gbps"], low, high, claim["value"], margin)
    reason += "; ours: the bytes the GEMM must move / its time; the post's: Nsight Compute's DRAM bytes"
    return Judged(ours, floor, verdict, reason)


def judge(cells: pd.DataFrame, claim: pd.Series, margin: float) -> Judged:
    """Our side of one claim on the GEMM table's rows, `margin` the equivalence margin."""
    splitk = _splitk(cells, claim)
    if claim["kind"] in SPEEDUPS:
        return _speedup(splitk, claim, margin)
    if claim["kind"] == "crossover":
        return _crossover(splitk, claim, margin)
    if claim["kind"] == "dram_throughput":
        return _throughput(splitk, claim, margin)
    return Judged("", "", NOT_MEASURED, f"no cell runs the {claim['compared_with']}")


def judged(
    claims: pd.DataFrame, cells: pd.DataFrame, judge_one: Callable[[pd.DataFrame, pd.Series], Judged]
) -> pd.DataFrame:
    """The claims with `judge_one`'s Judged of each on `cells` as columns (ours, floor, verdict, reason)."""
    verdicts = [dataclasses.asdict(judge_one(cells, claim)) for _, claim in claims.iterrows()]
    return pd.concat(
        [claims, pd.DataFrame(verdicts, columns=[f.name for f in dataclasses.fields(Judged)])], axis=1
    )


def claims_table(cells: pd.DataFrame, margin: float) -> Table:
    """The post's claims with our verdicts; without GEMM cells, a table that says there is nothing to
    judge."""
    title = "The FP8 GEMM post's claims against our GEMMs"
    if cells.empty:
        return Table("fp8_triton_claims", title, pd.DataFrame(), pd.DataFrame(), NOTHING_TO_JUDGE)
    claims = load_claims()
    data = judged(claims, cells, lambda rows, claim: judge(rows, claim, margin))
    text = pd.DataFrame({
        "claim (post)": data["claim"],
        "published": [_published(v, u) for v, u in zip(data["value"], data["unit"])],
        "shapes": [_shapes(claim) for _, claim in claims.iterrows()],
        "compared with": data["compared_with"], "ours [95%] (SplitK)": data["ours"],
        "floor allows": data["floor"], "verdict": data["verdict"], "reason": data["reason"],
    })  # fmt: skip
    note = (
        "Published: PyTorch blog, 'Accelerating Llama3 FP8 Inference with Triton Kernels' (2024), one H100, "
        "Nsight Compute kernel times. Ours: our SplitK Triton kernel's µs per GEMM of CUDA-graph replays, "
        "against the cells of the same shape and GPU. Each value is read against the published one as ours "
        f"/ published, with the per-cell table's rule at ±{fmt_percent(margin, 0)}: reproduced within it, "
        "exceeded or not reproduced beyond it, inconclusive where the interval holds it but is wider; "
        "'beyond the bandwidth floor': the claim would make a kernel faster than bytes / peak bandwidth at "
        "every M measured (docs/gemm.md)."
    )
    return Table("fp8_triton_claims", title, data, text, note)


class Fp8TritonClaims(Study):
    """`--reference fp8_triton`: the FP8 GEMM post's claims judged on the sweep's GEMM cells."""

    reference = FP8_TRITON

    def tables(self, loaded: Loaded) -> list[Table]:
        return [claims_table(loaded.gemm, loaded.equivalence)]
