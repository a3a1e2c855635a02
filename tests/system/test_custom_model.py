"""Bring your own model (`model=custom model.target=...`): the example package of examples/my_model
trains in this process, through the command line and through the real local Slurm, its package
reaching the job through `cluster.setup`; each kind of bad target ends in one clear line, before
submission where the submitting process can tell (import, callable), else as the cell's `failed`
status with the message (what the target returns, its first step), as `sweep --smoke` shows.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
import torch

from orchestrator.cli.main import main
from orchestrator.grid.expand import GridError, expand
from tests.helpers import REPO_ROOT, TINY, cli, jobs_from, slurm_cli, wait_until_done
from tests.helpers.slurm.cluster import LocalSlurm

#: The user's own package (its directory is what goes on PYTHONPATH).
EXAMPLE_DIR = REPO_ROOT / "examples" / "my_model"
GOOD = "model.target=my_model:build"
#: A tiny custom cell on the CPU (TINY without its model).
CELL = ["model=custom", *(o for o in TINY if not o.startswith("model="))]


@pytest.fixture
def example_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package on this process's sys.path, as after `pip install` or PYTHONPATH."""
    monkeypatch.syspath_prepend(str(EXAMPLE_DIR))


def _example_env(*paths: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(str(p) for p in (REPO_ROOT, *paths))}


def test_example_trains_like_eager_on_synthetic_and_its_own_data(
    example_importable, tiny_cells, tmp_path: Path
) -> None:
    model = {"name": "custom", "target": "my_model:build"}
    eager = tiny_cells.get("custom", "eager", model=model)
    compiled = tiny_cells.get("custom", "aot_eager", model=model)
    for cell in (eager, compiled):
        assert cell.status == "completed", cell.run["error"]
        assert (cell.run["model"], cell.run["arch"], cell.run["batch_size"]) == (
            "custom",
            "my_model:build",
            16,
        )
    assert compiled.run["graph_count"] >= 1
    assert compiled.run["flops_per_step"] > 0  # counted by FlopCounterMode: the example gives none
    # aot_eager runs eager's aten ops: the same losses
    # (tests/unit/workloads/test_compiled_trains_like_eager.py's tolerance)
    assert compiled.losses() == pytest.approx(eager.losses(), rel=1e-6)

    # Real data through the model's own reader (data.source=custom): other batches, other losses.
    images, labels = torch.randn(64, 3, 32, 32), torch.randint(10, (64,))
    torch.save((images, labels), tmp_path / "data.pt")
    real = tiny_cells.get(
        "custom", "eager", model=model, data={"source": "custom", "path": str(tmp_path / "data.pt")}
    )
    assert real.status == "completed", real.run["error"]
    assert real.run["data_source"] == "custom" and real.losses() != eager.losses()


def test_example_through_the_local_executor(tmp_path: Path) -> None:
    """As a user runs it: the package on PYTHONPATH, `compilebench sweep` with cluster=local."""
    result = cli(
        tmp_path,
        "sweep",
        *CELL,
        GOOD,
        "backend=aot_eager",
        "hydra.sweep.dir=sw",
        env=_example_env(EXAMPLE_DIR),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (cell_dir,) = (tmp_path / "sw" / "cells").iterdir()
    run = pd.read_parquet(cell_dir / "run.parquet").iloc[-1]
    assert (run["status"], run["arch"], run["backend"]) == ("completed", "my_model:build", "aot_eager")
    assert run["graph_count"] >= 1


@pytest.mark.parametrize(
    "target, message",
    [
        (
            "no_such_package.models:build",
            "cannot import no_such_package.models (ModuleNotFoundError: No module named 'no_such_package'); "
            "is its package on PYTHONPATH?",
        ),
        (
            "tests.helpers.custom_targets:no_such_builder",
            "tests.helpers.custom_targets has no attribute 'no_such_builder'",
        ),
        ("tests.helpers.custom_targets:NOT_CALLABLE", "NOT_CALLABLE is not callable (type int)"),
        ("build_without_module", "expected package.module:function"),
    ],
)
def test_bad_target_is_refused_before_anything_is_written(
    capsys, no_slurm_here, tmp_path: Path, target: str, message: str
) -> None:
    code = main(["sweep", "cluster=grete", *CELL, f"model.target={target}", "hydra.sweep.dir=sw"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    (line,) = err.strip().splitlines()  # the cell's overrides, then why
    assert line.startswith("error: cluster=grete model=custom ") and line.endswith(
        f": model.target={target}: {message}"
    )
    assert not (tmp_path / "sw").exists()  # nothing written, nothing submitted


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model=custom"], r"Missing mandatory value: target \(at model.target\)"),
        (["model=gpt", "+model.target=my_model:build"], "model.target goes with model=custom"),
    ],
)
def test_target_and_family_go_together(overrides: list[str], message: str) -> None:
    with pytest.raises(GridError, match=message):
        expand(overrides)


def test_smoke_runs_what_the_submitting_side_cannot_check(tmp_path: Path) -> None:
    """A target that returns the wrong thing, and one whose first step raises, pass the grid check
    (they import and are callable) and fail their smoke cells, each with one line that says why;
    nothing is submitted."""
    targets = "tests.helpers.custom_targets:returns_dict,tests.helpers.custom_targets:first_step_raises"
    result = cli(
        tmp_path,
        "sweep",
        "cluster=grete",
        "model=custom",
        f"model.target={targets}",
        "precision=fp32",
        "hydra.sweep.dir=sw",
        "--smoke",
    )
    out, err = result.stdout, result.stderr
    assert result.returncode == 1, out + err
    lines = [line for line in out.splitlines() if line.startswith("[")]
    assert len(lines) == 2 and all(" ... failed in " in line for line in lines), out
    assert (
        "ConfigError: model.target=tests.helpers.custom_targets:returns_dict returned a dict, not a "
        "workloads.models.custom.CustomModel"
    ) in lines[0]
    assert "RuntimeError: shape mismatch in my loss" in lines[1]
    assert "Traceback" not in out + err  # the tracebacks are in the cells' logs only
    statuses = {
        d.name: pd.read_parquet(d / "run.parquet").iloc[-1]["status"]
        for d in (tmp_path / "sw" / "smoke" / "cells").iterdir()
    }
    assert sorted(statuses.values()) == ["failed", "failed"]
    assert sorted(p.name for p in (tmp_path / "sw").iterdir()) == ["smoke"]  # the sweep itself: nothing


def test_example_reaches_the_slurm_job_through_cluster_setup(
    slurm_cluster: LocalSlurm, tmp_path: Path
) -> None:
    """Two sweeps of the example through the real Slurm, the package importable where they are
    submitted: the job whose `cluster.setup` puts it on PYTHONPATH completes; the job whose setup
    leaves it out records `failed` with the import error (the job's PYTHONPATH is the setup's)."""
    sweeps = {"with": [str(REPO_ROOT), str(EXAMPLE_DIR)], "without": [str(REPO_ROOT)]}
    for name, path in sweeps.items():
        setup = f"cluster.setup=['export PYTHONPATH={os.pathsep.join(path)}']"
        result = slurm_cli(
            slurm_cluster,
            tmp_path,
            "sweep",
            "cluster=test_slurm",
            *CELL,
            GOOD,
            setup,
            f"hydra.sweep.dir={name}",
            env=_example_env(EXAMPLE_DIR),
        )
        assert result.returncode == 0, result.stderr
    manifests = {name: pd.read_parquet(tmp_path / name / "manifest.parquet") for name in sweeps}
    cell_dirs = {name: tmp_path / name / "cells" / m["cell_id"].iloc[0] for name, m in manifests.items()}
    wait_until_done(
        slurm_cluster, {job for m in manifests.values() for job in m["job_id"]}, list(cell_dirs.values())
    )
    runs = {name: pd.read_parquet(d / "run.parquet").iloc[-1] for name, d in cell_dirs.items()}
    assert (runs["with"]["status"], runs["with"]["arch"]) == ("completed", "my_model:build"), runs["with"][
        "error"
    ]
    assert runs["without"]["status"] == "failed"
    assert runs["without"]["error"].startswith(
        "workloads.cell.config.ConfigError: model.target=my_model:build: cannot "
        "import my_model (ModuleNotFoundError"
    )
    assert jobs_from(slurm_cluster, tmp_path) == set()
