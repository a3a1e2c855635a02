"""The version table (analysis/studies/versions.py): a sweep over software environments, each cell per
environment and what changed from one to the next, with the per-cell table's intervals and verdicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells.paired import PAIRED, UNPAIRED
from analysis.report import analyze, write_report
from analysis.studies.versions import CHANGES_TABLE, NEWLY_FAILING, VERSIONS_TABLE
from tests.helpers.analysis_sweeps import (
    write_cell,
    write_manifest,
    write_paired_replicates,
    write_replicates,
)

#: Listed in this order by the sweep (the manifest), not by name.
ORDER = ["zeta", "alpha", "mid"]
#: Median step (ms) of each environment's eager and inductor cell, and cold compile seconds: alpha's
#: eager step is 1.25x quicker than zeta's, its compiled step the same (its speedup smaller) and its
#: compile twice as long;
#: mid's inductor cell fails.
EAGER_MS = {"zeta": 100.0, "alpha": 80.0, "mid": 80.0}
COMPILED_MS = {"zeta": 50.0, "alpha": 50.0}
COMPILE_S = {"zeta": 3.5, "alpha": 7.0}


def _steps(rng: np.random.Generator, ms: float) -> list[list[float]]:
    """Three replicates of 20 steps: 1% noise per step, 0.3% per replicate."""
    return [list(ms * rng.normal(1, 0.003) * rng.normal(1, 0.01, 20)) for _ in range(3)]


def write_version_sweep(sweep: Path) -> Path:
    rng = np.random.default_rng(41)
    listed = []
    for environment in ORDER:
        eager, compiled = f"gpt_eager_{environment}", f"gpt_inductor_{environment}"
        write_replicates(sweep, eager, "eager", _steps(rng, EAGER_MS[environment]), environment=environment)
        if environment in COMPILED_MS:
            seconds = COMPILE_S[environment] * rng.normal(1, 0.02, 3)
            write_replicates(
                sweep, compiled, "inductor", _steps(rng, COMPILED_MS[environment]),
                replicate_run=[{"compile_time_s": s} for s in seconds], environment=environment,
            )  # fmt: skip
        else:
            write_cell(sweep, compiled, "inductor", status="failed", environment=environment)
        listed += [
            {"cell_id": cell, "backend": backend, "environment": environment}
            for cell, backend in ((eager, "eager"), (compiled, "inductor"))
        ]
    write_manifest(sweep, listed)
    return sweep


def test_the_version_table_reads_each_change_as_the_per_cell_table_does(tmp_path: Path) -> None:
    """Neighbours in the sweep's order; alpha's quicker eager step reads faster, its compiled step (the
    same by construction) no difference, its doubled compile dearer; mid's failing cell newly failing.
    The report page shows both tables."""
    analysis = analyze(write_version_sweep(tmp_path / "sweep"), warn=None)
    tables = {table.name: table for table in analysis.tables}
    versions = tables[VERSIONS_TABLE].data
    assert versions["environment"].tolist() == ORDER
    assert versions["status"].tolist() == ["completed", "completed", "failed"]
    np.testing.assert_allclose(versions["eager_ms"], list(EAGER_MS.values()), rtol=0.02)
    changes = tables[CHANGES_TABLE].data
    assert list(zip(changes["old"], changes["new"])) == [("zeta", "alpha"), ("alpha", "mid")]
    first, second = changes.to_dict("records")
    quicker = EAGER_MS["zeta"] / EAGER_MS["alpha"]
    assert quicker / 1.02 < first["eager_low"] < quicker < first["eager_high"] < quicker * 1.02
    assert (first["eager_verdict"], first["compiled_verdict"]) == ("faster", "no difference")
    assert first["compile_verdict"] == "dearer" and first["compile_high"] < 0.55
    smaller = quicker**-1  # the compiled step held: the speedup shrinks as eager got quicker
    assert first["speedup_low"] < smaller < first["speedup_high"] < 1 / 1.02
    assert first["speedup_verdict"] == "smaller"
    assert pd.isna(first["status_change"])
    assert second["status_change"] == NEWLY_FAILING and second["eager_verdict"] == "no difference"
    assert (
        np.isnan(second["compiled"]) and pd.isna(second["compiled_verdict"]) and np.isnan(second["compile"])
    )
    verdicts = tables[CHANGES_TABLE].text["verdict"].tolist()
    assert verdicts == ["eager faster, compile dearer, speedup smaller", "newly failing (completed → failed)"]
    page = (write_report(analysis, with_plots=False).parent / "index.html").read_text()
    assert (
        "what changed from one to the next" in page
        and "eager faster, compile dearer, speedup smaller" in page
    )


def test_a_sweep_without_environments_has_no_version_table(tmp_path: Path) -> None:
    """One environment, or none named: nothing to compare across versions."""
    rng = np.random.default_rng(7)
    for sweep, environment in ((tmp_path / "none", None), (tmp_path / "one", "zeta")):
        write_replicates(sweep, "gpt_eager", "eager", _steps(rng, 100.0), environment=environment)
        write_replicates(sweep, "gpt_inductor", "inductor", _steps(rng, 50.0), environment=environment)
        names = [table.name for table in analyze(sweep, warn=None).tables]
        assert VERSIONS_TABLE not in names and CHANGES_TABLE not in names


#: Each replicate's host speed (a process on a slower or quicker host: both sides of its steps alike),
#: and the paired speedup of each environment: `new`'s is 6% larger than `old`'s.
HOSTS = (0.85, 1.15, 1.0, 0.9)
PAIRED_SPEEDUP = {"old": 1.10, "new": 1.10 * 1.06}


def _paired_blocks(rng: np.random.Generator, speedup: float, hosts: tuple[float, ...]):
    """Per replicate, 6 pairs of 5-step blocks: eager 10 ms, compiled 10 / speedup, both times the
    replicate's host speed; 0.3% noise per step."""
    return [
        [(list(10 * host * rng.normal(1, 0.003, 5)), list(10 / speedup * host * rng.normal(1, 0.003, 5)))
         for _ in range(6)]
        for host in hosts
    ]  # fmt: skip


def test_a_change_of_speedup_between_paired_cells_rests_on_their_pair_ratios(tmp_path: Path) -> None:
    """old and new: paired compiled cells whose processes ran on hosts 15% apart, new's speedup 1.06x
    old's. The pair ratios cancel the hosts: paired, 1.06x read `larger` within 2% of it. The four cells'
    median steps (eager cells on the hosts in another order) cannot tell it (Welch's over their runs
    spans ±20% here): a test that the change rests on the pairs. `last`'s compiled cell is unpaired:
    old → new ... → last falls back to the four cells, and says so."""
    rng = np.random.default_rng(5)
    sweep, listed = tmp_path / "sweep", []
    for environment, hosts in (("old", HOSTS), ("new", HOSTS[::-1]), ("last", HOSTS)):
        eager, compiled = f"gpt_eager_{environment}", f"gpt_inductor_{environment}"
        eager_hosts = hosts[1:] + hosts[:1]
        write_replicates(
            sweep, eager, "eager", [list(10 * h * rng.normal(1, 0.003, 20)) for h in eager_hosts],
            environment=environment,
        )  # fmt: skip
        if environment == "last":
            steps = [list(10 / PAIRED_SPEEDUP["new"] * h * rng.normal(1, 0.003, 20)) for h in hosts]
            write_replicates(sweep, compiled, "inductor", steps, environment=environment)
        else:
            blocks = _paired_blocks(rng, PAIRED_SPEEDUP[environment], hosts)
            write_paired_replicates(sweep, compiled, "inductor", blocks, environment=environment)
        listed += [
            {"cell_id": cell, "backend": backend, "environment": environment}
            for cell, backend in ((eager, "eager"), (compiled, "inductor"))
        ]
    write_manifest(sweep, listed)
    table = {t.name: t for t in analyze(sweep, warn=None).tables}[CHANGES_TABLE]
    first, second = table.data.to_dict("records")
    assert 1.06 / 1.02 < first["speedup_low"] < 1.06 < first["speedup_high"] < 1.06 * 1.02
    assert first["speedup_verdict"] == "larger"
    assert (first["speedup_method"], second["speedup_method"]) == (PAIRED, UNPAIRED)
    assert second["speedup_high"] / second["speedup_low"] > 1.2  # the hosts, unseen by the pairs
    assert table.text["speedup new/old [95% CI]"].str.split().str[-1].tolist() == ["paired", "cells"]
