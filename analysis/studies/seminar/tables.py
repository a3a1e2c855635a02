"""The seminar report's tables in its own layout, filled with our cells, with the published values
beside them on request (`compilebench analyze --reference seminar`).

Report: "What's new with PyTorch?" (Dalinghaus, Göttingen, 2024); its numbers, with their source,
are package data: analysis/reference/seminar_2024.csv (facts about them in the README there).
Table 1: ms per step, μ and σ; Table 2: MFU %; Table 3: s per step. Columns are the report's
models, rows its backends — plus a row for every other backend, mode or setting in the sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources

import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.reading.axes import axis_rows, axis_text, representatives, varying_axes
from analysis.rendering.text import Table, fmt_change, is_null
from analysis.studies.base import Study
from workloads.contract.vocabulary import COMPLETED

#: The `--reference` of the seminar report.
SEMINAR = "seminar"
REFERENCES = {SEMINAR: "seminar_2024.csv"}


def load_reference(name: str = "seminar") -> pd.DataFrame:
    """The published tables: table, metric, unit, model, backend, mean, std, gpu, source."""
    path = resources.files("analysis") / "reference" / REFERENCES[name]
    with path.open() as fh:
        return pd.read_csv(fh)


@dataclass(frozen=True)
class SeminarModel:
    size: str
    """Our size preset that reproduces the report's model (resolution, batch, block size)."""
    arch: str
    """The architecture our run rows record for it (`arch`)."""
    model: str
    """Our model family, for cells that failed before recording their architecture."""


#: The report names nanoGPT configs and timm models; our cells name a family and a size preset.
#: Which preset is which comes from conf/experiment/seminar_llm.yaml (small = train_shakespeare_char,
#: medium = train_gpt2) and seminar_cnn.yaml with workloads/models/vision.py (small, medium =
#: resnet18, resnet34). analysis reads only files, so it cannot ask workloads.models; the pairs
#: are written here, and tests/unit/analysis/test_seminar.py checks them against the presets.
SEMINAR_MODELS = {
    "gpt2": SeminarModel(size="medium", arch="gpt-12x12x768", model="gpt"),
    "shakespeare_char": SeminarModel(size="small", arch="gpt-6x6x384", model="gpt"),
    "resnet18": SeminarModel(size="small", arch="resnet18", model="resnet"),
    "resnet34": SeminarModel(size="medium", arch="resnet34", model="resnet"),
}
#: Our columns for each published metric and unit: (mean column, std column, scale).
OUR_VALUES = {
    ("step_time", "ms"): ("mean_step_ms", "std_step_ms", 1.0),
    ("step_time", "s"): ("mean_step_ms", "std_step_ms", 1e-3),
    ("mfu", "percent"): ("mfu_mean", "mfu_std", 100.0),
}
UNIT_SYMBOLS = {"ms": "ms", "s": "s", "percent": "%"}
METRIC_NAMES = {"step_time": "time per step", "mfu": "MFU"}
#: How the report names a backend's row: the LLM tables say "Compiled (Inductor backend)",
#: Table 3 says "Inductor".
ROW_FORMATS = {1: "Compiled ({} backend)", 2: "Compiled ({} backend)", 3: "{}"}
BACKEND_NAMES = {
    "eager": "Eager",
    "cudagraphs": "Cudagraphs",
    "inductor": "Inductor",
    "torchscript": "TorchScript",
}
#: Published rows that did not measure what their name says (analysis/reference/README.md).
_MEASURED_EAGER = "the published row measured eager: the report's code never used torch.compile's result"
PUBLISHED_CAVEATS = {(1, "cudagraphs"): _MEASURED_EAGER, (2, "cudagraphs"): _MEASURED_EAGER}
#: Settings that split a backend's row when they differ between the table's cells.
VARIANT_AXES = ["precision", "batch_size", "grad_accum", "data_source", "gpu_name", "world_size", "nodes"]


def seminar_models(metrics: pd.DataFrame) -> pd.Series:
    """The report's name of each cell's model (None for cells the report has no column for)."""
    by_arch = {(m.size, m.arch): name for name, m in SEMINAR_MODELS.items()}
    by_preset = {(m.model, m.size): name for name, m in SEMINAR_MODELS.items()}
    names = [
        by_arch.get((size, arch)) if isinstance(arch, str) else by_preset.get((model, size))
        for model, size, arch in zip(metrics["model"], metrics["size"], metrics["arch"])
    ]
    return pd.Series(names, index=metrics.index, dtype=object)


def default_mode(mode: object) -> bool:
    """Whether a compile mode is the backend's default (what the report ran)."""
    return is_null(mode) or mode in ("", "default")


def row_label(table: int, backend: str, variant: str = "") -> str:
    """The row's name in the report's words, with [what the report did not have]: a mode, a setting."""
    name = BACKEND_NAMES.get(backend, backend)
    label = name if backend == "eager" else ROW_FORMATS.get(table, "{}").format(name)
    return f"{label} [{variant}]" if variant else label


def _rows(ours: pd.DataFrame, published: pd.DataFrame, table: int, with_reference: bool) -> list[dict]:
    """One dict per row of the layout: label, backend, mode, and the cells per model."""
    # A setting splits rows where one model's cells differ in it (models differ in batch anyway).
    varying = sorted(
        {axis for _, cells in ours.groupby("_seminar") for axis in varying_axes(cells, VARIANT_AXES)},
        key=VARIANT_AXES.index,
    )
    modes = ["" if default_mode(m) else m for m in ours["compile_mode"]]  # "": a null would not match itself
    keys = ours.assign(
        _mode=modes,
        _variant=[
            ", ".join(filter(None, [mode, *(f"{a}={axis_text(v)}" for a, v in zip(varying, values))]))
            for mode, values in zip(modes, axis_rows(ours, varying))
        ],
    )
    order = list(dict.fromkeys(published["backend"]))
    rows: dict[tuple, dict[str, pd.Series]] = {}
    for _, cell in representatives(keys, ["backend", "_mode", "_variant", "_seminar"]).iterrows():
        rows.setdefault((cell["backend"], cell["_mode"], cell["_variant"]), {})[cell["_seminar"]] = cell
    if with_reference:
        for backend in order:
            if not any(b == backend and m == "" for b, m, _ in rows):
                rows[(backend, "", "")] = {}
    rank = lambda key: (order.index(key[0]) if key[0] in order else len(order), *key)  # noqa: E731
    return [
        {"label": row_label(table, b, v), "backend": b, "mode": m, "cells": rows[(b, m, v)]}
        for b, m, v in sorted(rows, key=rank)
    ]


def seminar_table(metrics: pd.DataFrame, reference: pd.DataFrame, table: int, with_reference: bool) -> Table:
    """One of the report's tables filled with our cells (and the published values beside them)."""
    published = reference[reference["table"] == table]
    metric, unit = published["metric"].iloc[0], published["unit"].iloc[0]
    mean_column, std_column, scale = OUR_VALUES[(metric, unit)]
    models = list(dict.fromkeys(published["model"]))
    names = seminar_models(metrics)
    ours = metrics.assign(_seminar=names)[names.isin(models)]  # (assigning to an empty frame would add rows)
    symbol = UNIT_SYMBOLS[unit]
    by_place = {(row.model, row.backend): row for row in published.itertuples(index=False)}
    data, text = [], []
    for row in _rows(ours, published, table, with_reference):
        line = {"": row["label"]}
        for model in models:
            cell = row["cells"].get(model)
            done = cell is not None and cell["status"] == COMPLETED
            mean = float(cell[mean_column]) * scale if done and not is_null(cell[mean_column]) else None
            std = float(cell[std_column]) * scale if done and not is_null(cell[std_column]) else None
            status = "not in sweep" if cell is None else cell["status"]
            digits = _decimals(mean)  # σ with as many decimals as μ
            line[f"{model} μ ({symbol})"] = (
                f"{mean:.{digits}f}" if mean is not None else ("" if done else status)
            )
            line[f"{model} σ"] = f"{std:.{digits}f}" if std is not None else ""
            entry = {
                "table": table,
                "row": row["label"],
                "backend": row["backend"],
                "mode": row["mode"] or None,
                "model": model,
                "unit": unit,
                "cell_id": None if cell is None else cell["cell_id"],
                "status": status,
                "mean": mean,
                "std": std,
            }
            pub = by_place.get((model, row["backend"]))
            if with_reference and row["mode"] == "" and pub is not None:
                change = mean / pub.mean - 1 if mean is not None else None
                entry.update(
                    published_mean=pub.mean, published_std=pub.std, change=change, published_gpu=pub.gpu
                )
                line[f"{model} published μ"] = _fmt_published(pub.mean)
                line[f"{model} published σ"] = _fmt_published(pub.std)
                line[f"{model} change"] = fmt_change(change)
            elif with_reference:
                line.update({f"{model} published μ": "", f"{model} published σ": "", f"{model} change": ""})
            data.append(entry)
        text.append(line)
    title = f"Table {table}: {METRIC_NAMES[metric]} ({symbol}), μ and σ over measured steps"
    return Table(
        f"seminar_table{table}",
        title,
        pd.DataFrame(data),
        pd.DataFrame(text),
        _note(published, ours, table, with_reference),
    )


def _note(published: pd.DataFrame, ours: pd.DataFrame, table: int, with_reference: bool) -> str:
    devices = sorted(set(ours["gpu_name"].fillna(ours["device"]).dropna()))
    sources = sorted(set(ours["data_source"].dropna()))  # the report's Table 3 read ImageNet from disk
    note = f"Ours: {', '.join(devices)}; data: {', '.join(sources)}." if devices else "Ours: no cell."
    if with_reference:
        pub_gpu = ", ".join(dict.fromkeys(published["gpu"]))
        note += f" Published: {pub_gpu} (change = ours / published - 1)."
        note += "".join(
            f" {BACKEND_NAMES.get(b, b)}: {text}." for (t, b), text in PUBLISHED_CAVEATS.items() if t == table
        )
    return note


def _fmt_published(value: object) -> str:
    """Three decimals, as the report prints its numbers."""
    return "" if is_null(value) else f"{float(value):.3f}"


def _decimals(mean: float | None) -> int:
    """Three decimals as the report, or three significant digits for a mean below 0.1 (our ResNet
    steps, without the report's disk reads, take hundredths of a second)."""
    if mean is None or mean == 0 or abs(mean) >= 0.1:
        return 3
    return 2 - math.floor(math.log10(abs(mean)))


def seminar_tables(metrics: pd.DataFrame, with_reference: bool = False) -> list[Table]:
    """The report's tables that the sweep has cells for (all of them `with_reference`)."""
    reference = load_reference()
    names = set(seminar_models(metrics).dropna())
    return [
        seminar_table(metrics, reference, table, with_reference)
        for table in sorted(reference["table"].unique())
        if with_reference or names & set(reference.loc[reference["table"] == table, "model"])
    ]


class SeminarTables(Study):
    """The seminar report's tables for the models the sweep has cells of; with `--reference seminar`
    all of them, the published values beside ours (the claims: claims.py)."""

    def tables(self, loaded: Loaded) -> list[Table]:
        return seminar_tables(loaded.training, with_reference=loaded.reference == SEMINAR)
