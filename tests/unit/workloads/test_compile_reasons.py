"""Why a cell's graphs broke or recompiled, from dynamo's own records
(workloads/instruments/dynamo_records.py): a real model that breaks its graph and recompiles, trained
under a real dynamo backend on the CPU, its reasons in run.parquet, and `analyze` listing them with the
cell."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.studies.reasons import reasons_table
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import write_cell
from workloads.cell.catalog import FAMILY_KINDS
from workloads.cell.config import CellConfig
from workloads.cell.config_io import cell_config_from_dict
from workloads.models import MODEL_FAMILIES, ModelFamily, ModelSpec
from workloads.run import run_cell

VOCAB, BLOCK = 32, 8


class BreaksAndRecompiles(nn.Module):
    """Tokens to logits, with a graph break (`.item()` of a value computed in the graph: dynamo
    cannot trace it without capturing scalars) and a recompile (a bool attribute flipped on each
    call: dynamo guards on its value, so the second call compiles again, the third hits the cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head, self.odd = nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB), False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.odd = not self.odd
        h = self.embed(x) * (2.0 if self.odd else 1.0)
        if h.abs().mean().item() > 1e6:  # never: the branch is here for the .item()
            h = h / 2
        return self.head(h)


def build(cfg: CellConfig, vocab_size: int | None) -> ModelSpec:
    module = BreaksAndRecompiles()
    return ModelSpec(
        module,
        "breaks-and-recompiles",
        "tokens",
        batch_size=2,
        grad_accum=1,
        sample_shape=(BLOCK,),
        num_classes=VOCAB,
        items_per_sample=BLOCK,
        params=sum(p.numel() for p in module.parameters()),
        flops_per_item=1.0,
        loss=lambda m, x, y: F.cross_entropy(m(x).flatten(0, 1), y.flatten()),
        make_optimizer=lambda m, fused: torch.optim.SGD(m.parameters(), lr=0.1),
        default_grad_clip=0.0,
    )


def test_graph_break_and_recompile_reasons_are_recorded_and_reported(
    tmp_path: Path, tiny_config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(FAMILY_KINDS, "breaks", "tokens")
    monkeypatch.setitem(MODEL_FAMILIES, "breaks", ModelFamily(build, {"tiny": None}))
    cell = tmp_path / "sweep" / "cells" / "breaky"
    assert (
        run_cell(cell_config_from_dict(tiny_config("breaks", "aot_eager", steps=3, warmup_steps=2)), cell)
        == "completed"
    )
    (run,) = pq.read_table(cell / "run.parquet").to_pylist()
    (graph_break,) = run["graph_break_reasons"]
    assert "item()" in graph_break["reason"] and graph_break["count"] == run["graph_break_count"] >= 1
    # The flipped attribute's guard; and the resume function after the break guards the .item() value.
    recompiles = {r["reason"].split()[0]: r for r in run["recompile_reasons"]}
    assert (
        recompiles["self.odd"]["reason"].startswith("self.odd == False ")
        and "in forward" in recompiles["self.odd"]["reason"]
    )
    assert sum(r["count"] for r in recompiles.values()) == run["recompile_count"] >= 1

    assert main(["analyze", str(tmp_path / "sweep"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("### Why graphs broke or recompiled") :].split("\n\n")[1].splitlines()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]
    assert rows[0][:4] == [
        "graph break",
        "Unsupported Tensor.item() call with capture_scalar_outputs=False: Dynamo "
        "does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.",
        str(graph_break["count"]),
        "1",
    ]
    assert rows[0][4] == f"{run['cell_id']} (breaks tiny · aot_eager)"
    odd = next(row for row in rows if row[1].startswith("self.odd == False # self.odd = not self.odd # "))
    assert odd[0] == "recompile" and "HINT" not in odd[1] and odd[4] == rows[0][4]


def test_the_top_reasons_across_a_sweep_name_the_cells_they_hit(tmp_path: Path) -> None:
    """Reasons written through the workloads' writer, as dynamo words them: one graph break in three
    cells (its hint differs, the short form does not), another in one; one recompile reason at two
    sizes (as a ResNet's stages give it) and another; a sweep's other cells have none."""
    item = (
        "Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: Dynamo does not "
        "support tracing `Tensor.item()`.\n  Hint: {hint}"
    )
    for cell, hint in (("a", "one"), ("b", "two"), ("c", "three")):
        write_cell(
            tmp_path,
            cell,
            "inductor",
            step_ms=[5.0],
            seed=ord(cell),
            graph_break_reasons=[{"reason": item.format(hint=hint), "count": 2}],
            recompile_reasons=[
                {"reason": "x.size()[0] == 8  # return x  # m.py:3 in f (HINT: mark it dynamic)", "count": 1}
            ]
            if cell == "c"
            else None,
        )
    size = "tensor 'x' size mismatch at index 1. expected {}, actual {}"
    write_cell(
        tmp_path,
        "r",
        "inductor",
        step_ms=[5.0],
        seed=7,
        recompile_reasons=[
            {"reason": size.format(64, 256), "count": 1},
            {"reason": size.format(256, 512), "count": 1},
        ],
    )
    write_cell(
        tmp_path, "d", "aot_eager", step_ms=[5.0], graph_break_reasons=[{"reason": "print", "count": 9}]
    )
    write_cell(tmp_path, "e", "eager", step_ms=[6.0])
    data = load_sweep(tmp_path, warn=None)
    table = reasons_table(data.cells, cell_metrics(data))
    rows = table.text.to_dict("records")
    assert [(r["kind"], r["times"], r["cells"]) for r in rows] == [
        ("graph break", "6", "3"),
        ("graph break", "9", "1"),
        ("recompile", "2", "1"),
        ("recompile", "1", "1"),
    ]
    assert rows[0]["reason"] == (
        "Unsupported Tensor.item() call with capture_scalar_outputs=False: Dynamo does not "
        "support tracing `Tensor.item()`."
    )
    assert (
        rows[0]["which"]
        == "a (gpt tiny seed 97 · inductor), b (gpt tiny seed 98 · inductor), c (gpt tiny seed 99 · inductor)"
    )
    assert rows[2]["reason"] == "tensor 'x' size mismatch at index 1. expected N, actual N"
    assert rows[3]["reason"] == "x.size()[0] == N # return x # m.py:3 in f"
    write_cell(tmp_path / "none", "e", "eager", step_ms=[6.0])
    plain = load_sweep(tmp_path / "none", warn=None)
    assert reasons_table(plain.cells, cell_metrics(plain)) is None
