"""The cell's vocabulary (workloads/contract/vocabulary.py) is the one definition of the axes: the Parquet
columns, the manifest, `status`, the dry-run grid and analysis' comparisons all follow from it, and
an axis flows from an override to the manifest, `status` and the per-cell table."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from analysis.reading.axes import SAME_WORKLOAD, SCALING_WORKLOAD, backend_labels
from tests.helpers import TINY, cli, table
from workloads.contract.schema import MANIFEST_SCHEMA, RUN_SCHEMA
from workloads.contract.vocabulary import (
    AXES,
    CONFIG_AXES,
    TREATMENT,
    axes_from_config,
    backend_label,
    shown_axes,
)


def test_every_axis_is_a_column_of_the_run_rows_and_every_config_axis_of_the_manifest() -> None:
    for axis in AXES:
        assert RUN_SCHEMA.field(axis.name).type == axis.type, axis.name
    assert [f.name for f in MANIFEST_SCHEMA][1 : 1 + len(CONFIG_AXES)] == [a.name for a in CONFIG_AXES]
    # Cells compared with eager differ only in treatments; a scaling series only in processes.
    treatments = {a.name for a in AXES if a.role == TREATMENT}
    assert not treatments & set(SAME_WORKLOAD) and treatments <= set(SCALING_WORKLOAD)
    assert {"world_size", "nodes"} & set(SCALING_WORKLOAD) == set()


def test_axes_from_a_config_and_the_backend_label() -> None:
    config = {
        "model": {"name": "gpt"},
        "size": "small",
        "backend": {"name": "inductor", "mode": None, "compile_optimizer": True},
        "precision": {"name": "bf16"},
        "distributed": {"nodes": 2, "tasks_per_node": 4},
    }
    axes = axes_from_config(config)
    assert (axes["compile_mode"], axes["world_size"], axes["nodes"]) == (
        "default",
        8,
        2,
    )  # one rule for the mode
    assert axes_from_config({"backend": {"name": "eager"}})["compile_mode"] is None
    assert backend_label(axes) == "inductor (compiled optimizer)"
    assert (
        backend_label({**axes, "compile_mode": "max-autotune", "regional": True})
        == "inductor (max-autotune, regional, compiled optimizer)"
    )
    # Listings show the headline axes, and others only where they differ between cells.
    assert "seed" not in shown_axes([{"seed": 1}, {"seed": 1}]) and "seed" in shown_axes(
        [{"seed": 1}, {"seed": 2}]
    )


def test_a_new_axis_flows_from_an_override_to_manifest_status_and_table(tmp_path: Path) -> None:
    """`backend.compile_optimizer` became an axis by one line in the vocabulary: swept, it is a
    manifest column, a column of `status`, and tells two rows of the per-cell table apart."""
    sweep = tmp_path / "sweep"
    result = cli(
        tmp_path,
        "sweep",
        *TINY,
        "backend=aot_eager",
        "backend.compile_optimizer=false,true",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr

    manifest = pq.read_table(sweep / "manifest.parquet").to_pandas()
    assert sorted(manifest["compile_optimizer"]) == [False, True]

    status = cli(tmp_path, "status", str(sweep))
    assert status.returncode == 0, status.stderr
    rows = table(status.stdout)
    assert sorted(row["compile_optimizer"] for row in rows.values()) == ["False", "True"]
    assert {row["state"] for row in rows.values()} == {"completed"}

    analysed = cli(tmp_path, "analyze", str(sweep), "--format", "csv", "--no-plots")
    assert analysed.returncode == 0, analysed.stderr
    cells = pd.read_csv(io.StringIO(analysed.stdout))
    assert len(cells) == 2 and sorted(cells["compile_optimizer"]) == [False, True]
    assert sorted(backend_labels(cells)) == ["aot_eager", "aot_eager (compiled optimizer)"]
    assert set(cells["status"]) == {"completed"}
