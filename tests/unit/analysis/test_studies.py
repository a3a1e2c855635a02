"""The study seam: every table and figure of a report comes from the one list of studies
(analysis/studies/registry.py), a reference's claims are a study asked for by name, and a new study
is one subclass in the list."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from analysis.cells.loaded import Loaded
from analysis.rendering.text import Table
from analysis.report import analyze, write_report
from analysis.studies import registry
from analysis.studies.base import Study
from analysis.studies.gemm.claims import Fp8TritonClaims
from analysis.studies.gemm.layer import Fp8TritonLayerClaims
from analysis.studies.seminar.claims import SeminarClaims
from tests.helpers.analysis_sweeps import TRAINING_FIGURES, write_cell


class Completed(Study):
    """A study of this test: the completed cells per backend, and a figure of them."""

    def tables(self, loaded: Loaded) -> list[Table]:
        counts = loaded.metrics[loaded.metrics["status"] == "completed"].groupby("backend").size()
        data = counts.rename("cells").reset_index()
        return [Table("completed", "Completed cells per backend", data, data.astype(str))]

    def figures(self, loaded: Loaded) -> Iterator[tuple[str, Figure]]:
        fig = Figure()
        fig.add_subplot().bar(["cells"], [len(loaded.metrics)])
        yield "completed", fig


def test_a_reference_is_a_study_asked_for_by_name() -> None:
    every = registry.studies_for(None)
    assert not any(isinstance(study, (SeminarClaims, Fp8TritonClaims)) for study in every)
    seminar = registry.studies_for("seminar")
    assert [type(s) for s in seminar if s not in every] == [SeminarClaims]
    assert [type(s) for s in registry.studies_for("fp8_triton") if s not in every] == [
        Fp8TritonClaims,
        Fp8TritonLayerClaims,
    ]


def test_a_new_study_is_one_subclass_in_the_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_cell(tmp_path, "e", "eager", step_ms=[10.0, 10.0, 10.0])
    write_cell(tmp_path, "i", "inductor", step_ms=[8.0, 8.0, 8.0])
    monkeypatch.setattr(registry, "STUDIES", [*registry.STUDIES, Completed()])
    analysis = analyze(tmp_path, warn=None)
    assert analysis.tables[-1].name == "completed"
    index = write_report(analysis)
    page = index.read_text()
    assert "### Completed cells per backend" in page and "![completed](plots/completed.png)" in page
    assert (index.parent / "tables" / "completed.csv").is_file()
    written = sorted(path.stem for path in (index.parent / "plots").glob("*.png"))
    assert written == sorted([*TRAINING_FIGURES, "completed"])
    # index.md and index.html show their sections in one order (the problem: a sweep without a manifest)
    html = (index.parent / "index.html").read_text()
    sections = [heading.lower() for heading in re.findall(r"^## (\w+)", page, re.M)]
    assert sections == re.findall(r'<h2 id="(\w+)"', html) == ["problems", "figures", "tables", "environment"]
    assert pd.read_csv(index.parent / "tables" / "completed.csv")["cells"].sum() == 2
