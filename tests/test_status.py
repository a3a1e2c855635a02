"""`compilebench status SWEEP_DIR`: cell states from the result files, then squeue/sacct.

Without Slurm: a real local sweep (one cell completes, one fails) and a directory that is no
sweep. With the tests' real local Slurm (no accounting): a submitted sweep is pending or
running, then completed; a job id the scheduler never knew is `lost`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator import status as status_module
from orchestrator.status import expand_job_ids, parse_states
from tests.slurm.cluster import LocalSlurm
from tests.slurm.fixtures import *  # noqa: F401,F403  (slurm_cluster and its guard)

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY = ["model=gpt", "size=tiny", "precision=fp32", "device=cpu", "steps=2", "warmup_steps=1", "backend=eager"]
JOB_TIMEOUT_S = 300


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def table(stdout: str) -> dict[str, dict[str, str]]:
    """The status table as {cell_id: {column: value}}."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {row["cell_id"]: row for row in rows}


def test_job_id_and_state_parsing() -> None:
    assert expand_job_ids("12_[0-2,5%2]") == ["12_0", "12_1", "12_2", "12_5"]
    assert expand_job_ids("12_4") == ["12_4"] and expand_job_ids("13") == ["13"]
    assert parse_states("12_[0-1]|PENDING\n13|CANCELLED by 0\n14_0|RUNNING\n14_0|COMPLETED\n") == {
        "12_0": "PENDING", "12_1": "PENDING", "13": "CANCELLED", "14_0": "COMPLETED"}


def test_local_sweep_completed_and_failed(tmp_path: Path) -> None:
    short_bin = tmp_path / "short.bin"  # shorter than one block: that cell fails in the workload
    np.arange(10, dtype=np.uint16).tofile(short_bin)
    swept = cli(tmp_path, "sweep", *TINY, "data.source=bin,synthetic", f"data.path={short_bin}", "hydra.sweep.dir=sw")
    assert swept.returncode == 1, swept.stderr

    result = cli(tmp_path, "status", "sw")
    assert result.returncode == 1, result.stderr
    rows = table(result.stdout)
    assert sorted(row["state"] for row in rows.values()) == ["completed", "failed"]
    failed = next(row for row in rows.values() if row["state"] == "failed")
    assert "block_size" in failed["error"] and len(failed["error"]) <= status_module.ERROR_WIDTH
    assert all(row["attempts"] == "1" and row["job_id"] == "" for row in rows.values())
    assert {(row["model"], row["size"], row["backend"], row["precision"]) for row in rows.values()} == {
        ("gpt", "tiny", "eager", "fp32")}
    assert result.stdout.rstrip().splitlines()[-1] == "2 cell(s): 1 completed, 1 failed"


@pytest.mark.parametrize("make", [lambda p: p, lambda p: p / "missing"])
def test_not_a_sweep_exits_2_with_one_line(tmp_path: Path, make) -> None:
    (tmp_path / "something.txt").write_text("x")
    result = cli(tmp_path, "status", str(make(tmp_path)))
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: not a sweep directory: ")


# --- through the real single-node Slurm (no accounting) --------------------------------------


def sweep_with_jobs(sweep: Path, job_ids: list[str]) -> Path:
    """A sweep directory of a manifest alone whose cells were submitted as `job_ids` (no results)."""
    from orchestrator.sweep_dir import MANIFEST_FILE, MANIFEST_SCHEMA
    from workloads.schema import table_from_rows, write_parquet_atomic

    sweep.mkdir(parents=True)
    rows = [{"cell_id": f"cell{i:08d}", "model": "gpt", "size": "tiny", "backend": "eager", "precision": "fp32",
             "executor": "slurm", "job_id": job_id} for i, job_id in enumerate(job_ids)]
    write_parquet_atomic(table_from_rows(rows, MANIFEST_SCHEMA), sweep / MANIFEST_FILE)
    return sweep


def test_status_of_a_slurm_sweep(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    env = slurm_cluster.env()
    submitted = cli(tmp_path, "sweep", "cluster=test_slurm", *TINY, "seed=1,2", "hydra.sweep.dir=sw", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_ids = set(pd.read_parquet(tmp_path / "sw" / "manifest.parquet")["job_id"])

    seen: list[set[str]] = []
    end = time.monotonic() + JOB_TIMEOUT_S
    while True:
        began = time.monotonic()
        result = cli(tmp_path, "status", "sw", env=env, timeout=60)
        assert time.monotonic() - began < 30, "status took too long"
        assert result.stderr == "", result.stderr  # sacct is disabled here: silently not used
        rows = table(result.stdout)
        assert {row["job_id"] for row in rows.values()} == job_ids
        states = {row["state"] for row in rows.values()}
        seen.append(states)
        assert states <= {"pending", "running", "completed"}, result.stdout
        if result.returncode == 0:
            break
        assert result.returncode == 1
        if time.monotonic() > end:
            pytest.fail(f"not completed after {JOB_TIMEOUT_S} s:\n{result.stdout}\n{slurm_cluster.logs()}")
        time.sleep(1)
    assert states == {"completed"} and result.stdout.rstrip().endswith("2 cell(s): 2 completed")
    assert all(row["attempts"] == "1" for row in rows.values())
    assert seen[0] & {"pending", "running"}, seen  # the first look came while the jobs were queued

    # A recorded job that the scheduler never knew, and no result: lost.
    sweep = sweep_with_jobs(tmp_path / "other", ["999999"])
    result = cli(tmp_path, "status", str(sweep), env=env, timeout=60)
    assert result.returncode == 1 and result.stderr == ""
    (row,) = table(result.stdout).values()
    assert (row["job_id"], row["state"]) == ("999999", "lost")
    assert re.search(r"1 cell\(s\): 1 lost$", result.stdout.rstrip())
