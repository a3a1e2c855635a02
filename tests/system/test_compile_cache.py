"""The compile cache: cold and warm compiles measured in separate processes
(`compile.measure=cold_warm`), and the cache directory keyed by what its entries are valid for.
That the next job of a sweep starts warm from the shared cache is shown on the real Slurm
(tests/system/test_slurm_executor.py::test_shared_compile_cache_makes_the_next_job_start_warm)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.studies.sweep.summaries import break_even_table
from analysis.studies.sweep.table import summary_table
from tests.helpers import TINY, cli
from workloads.cell.config import ConfigError
from workloads.cell.config_io import cell_config_from_dict
from workloads.contract.schema import CACHE_COUNT_COLUMNS
from workloads.instruments.compile_cache import (
    BASE_ENV,
    INDUCTOR_ENV,
    KEY_FILE,
    TRITON_ENV,
    cache_key,
    key_inputs,
    use,
)
from workloads.instruments.dynamo_records import CACHE_COUNTERS, cache_state

#: The cell compiled here: a custom MLP of one hidden layer (tests/helpers/custom_targets.py), whose few
#: kernels inductor builds in C++ quicker than gpt tiny's; what the caches count is the same.
CELL = [
    "model=custom",
    "model.target=tests.helpers.custom_targets:mlp_of_environment",
    *(o for o in TINY if not o.startswith("model=")),
]
#: The environment columns of a run row on an H100 (workloads/environment.describe_environment).
H100 = {
    "torch_version": "2.11.0+cu130",
    "triton_version": "3.6.0",
    "cuda_version": "13.0",
    "gpu_name": "NVIDIA H100 80GB HBM3",
}


def test_cold_and_warm_compiles_are_separate_processes(tmp_path: Path) -> None:
    """A local sweep of one inductor cell with compile.measure=cold_warm: a process of its own
    compiles with empty caches (all misses), then the cell compiles again with what that one left
    (dynamo's counters: all hits) and measures; the run row has both compile times, and the
    private cache is gone afterwards, the sweep's shared one untouched."""
    sweep = tmp_path / "sw"
    result = cli(
        tmp_path, "sweep", *CELL, "backend=inductor", "compile.measure=cold_warm", f"hydra.sweep.dir={sweep}"
    )
    assert result.returncode == 0, result.stderr
    (cell_dir,) = (sweep / "cells").iterdir()
    run = pd.read_parquet(cell_dir / "run.parquet").iloc[-1]
    assert run["status"] == "completed", run["error"]
    # Both compile times recorded (how long each took is no proof: the cache counters below are).
    assert pd.notna(run["compile_cold_s"]) and run["compile_warm_s"] == run["compile_time_s"] >= 0
    assert run["compile_cache_warm"], "the warm compile found no cache entries of the cold one"
    assert run["fx_graph_cache_hits"] > 0 and run["fx_graph_cache_misses"] == 0
    assert run["aot_autograd_cache_hits"] > 0 and run["aot_autograd_cache_misses"] == 0
    log = (cell_dir / "logs" / "stderr.log").read_text()
    cold = json.loads(re.search(r"cold compile done: .* caches (\{.*\})", log).group(1).replace("'", '"'))
    assert cold["fx_graph_cache_hits"] == 0 and cold["fx_graph_cache_misses"] > 0, log
    assert cold["aot_autograd_cache_hits"] == 0 and cold["aot_autograd_cache_misses"] > 0
    assert not Path(run["compile_cache_dir"]).exists() and not (sweep / "compile_cache").exists()


def test_a_compile_from_another_compiles_cache_is_marked_warm(tmp_path: Path) -> None:
    """A local sweep shares its compile cache (as a packed task's cells do): two inductor cells of
    the same graphs (seeds 1 and 2), two replicates each, paired (each times its own eager side, so
    no eager cell is needed for a speedup). The first compile is cold (dynamo's counters: misses
    only), every later one hits its entries. Analysis breaks each cell even on a cold compile where
    it had one, although the replicate that speaks for it compiled warm, and marks the other cell's
    compile (warm) in the cell table and the break-even table."""
    sweep = tmp_path / "sw"
    result = cli(
        tmp_path,
        "sweep",
        *CELL,
        "backend=inductor",
        "seed=1,2",
        "repeats=2",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr
    runs = pd.concat(pd.read_parquet(path) for path in sweep.glob("cells/*/run.parquet"))
    runs = runs.sort_values("started_at")
    assert (runs["status"] == "completed").all() and runs["paired"].all(), runs["error"].tolist()
    first, later = runs.iloc[0], runs.iloc[1:]
    assert first["fx_graph_cache_hits"] == 0 and first["fx_graph_cache_misses"] > 0
    assert (later["fx_graph_cache_hits"] > 0).all() and (later["fx_graph_cache_misses"] == 0).all()

    metrics = cell_metrics(load_sweep(sweep, warn=None))
    cells = metrics.set_index("cell_id")
    cold_cell = first["cell_id"]
    (warm_cell,) = set(runs["cell_id"]) - {cold_cell}
    speaks = later[later["cell_id"] == cold_cell].iloc[-1]  # its counting attempt: the warm replicate
    assert cells.at[cold_cell, "compile_time_s"] == speaks["compile_time_s"] != first["compile_time_s"]
    assert cells.at[cold_cell, "break_even_compile_s"] == first["compile_time_s"]
    assert cells.at[cold_cell, "break_even_compile_warm"] is False
    assert cells.at[warm_cell, "break_even_compile_warm"] is True
    assert cells.at[warm_cell, "break_even_compile_s"] == cells.at[warm_cell, "compile_time_s"]

    table = summary_table(metrics).text.set_index("cell")
    assert not table.at[cold_cell, "compile s"].endswith("(warm)")
    assert table.at[warm_cell, "compile s"].endswith(" (warm)")
    rows = break_even_table(metrics).text.set_index("cell")
    assert rows.at[warm_cell, "compile s"].endswith(" (warm)")
    assert not rows.at[cold_cell, "compile s"].endswith("(warm)")


def test_a_different_machine_or_version_gets_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what matches (Python, torch, triton, CUDA, GPU or CPU model) shares a directory: each
    differing input gives another one, under the same base, with its inputs in key.json."""
    monkeypatch.setenv(BASE_ENV, str(tmp_path))
    for name in (INDUCTOR_ENV, TRITON_ENV):  # use() sets them for this process: restored afterwards
        monkeypatch.delenv(name, raising=False)
    same = key_inputs(H100, "AMD EPYC")
    assert key_inputs(dict(H100), "Intel Xeon") == same  # a GPU cell is keyed by its GPU, not the host
    others = [
        key_inputs({**H100, **change}, "AMD EPYC")
        for change in (
            {"gpu_name": "NVIDIA A100-SXM4-80GB"},
            {"torch_version": "2.12.0+cu130"},
            {"triton_version": "3.7.0"},
            {"cuda_version": "12.8"},
        )
    ]
    cpus = [key_inputs({**H100, "gpu_name": None}, model) for model in ("AMD EPYC", "Intel Xeon")]
    keys = [cache_key(inputs) for inputs in (same, *others, *cpus)]
    assert len(set(keys)) == len(keys) and cache_key(dict(same)) == keys[0]

    dirs = []
    for inputs in (same, others[0], same):
        use(inputs)
        dirs.append(cache_state()["compile_cache_dir"])
    assert dirs[0] == dirs[2] != dirs[1]
    assert dirs[0] == str(tmp_path / keys[0] / "inductor") and dirs[1] == str(tmp_path / keys[1] / "inductor")
    assert json.loads((tmp_path / keys[1] / KEY_FILE).read_text())["device"] == "NVIDIA A100-SXM4-80GB"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keys[:2])


def test_every_cache_column_has_its_counter() -> None:
    assert tuple(CACHE_COUNTERS) == CACHE_COUNT_COLUMNS


def test_unknown_compile_measure_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"compile.measure must be one of \('once', 'cold_warm'\), got 'sometimes'"
    ):
        cell_config_from_dict({"compile": {"measure": "sometimes"}})
    with pytest.raises(ConfigError, match="cold_warm measures one process's compile; this cell trains as 2"):
        cell_config_from_dict({"compile": {"measure": "cold_warm"}, "distributed": {"tasks_per_node": 2}})
