"""Two sweeps writing into one sweep directory at once, and `analyze` while cells are still writing.

Real local sweeps of tiny cells in separate processes (as two users' shells, or a shell and a
job, would run them); the manifest is merged under a lock, results are written atomically, and
the analysis reads whatever is complete at each moment without failing.
"""

from __future__ import annotations

import io
import subprocess
import time
from pathlib import Path

import pandas as pd

from tests.helpers import cli, cli_popen

TINY = ["model=gpt", "size=tiny", "backend=eager", "precision=fp32", "device=cpu", "warmup_steps=1"]


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return cli_popen(cwd, *args, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def test_two_sweeps_into_one_directory_at_once(tmp_path: Path) -> None:
    first = start("sweep", *TINY, "steps=3", "seed=1,2", "hydra.sweep.dir=sw", cwd=tmp_path)
    second = start("sweep", *TINY, "steps=3", "seed=3,4", "hydra.sweep.dir=sw", cwd=tmp_path)
    for process in (first, second):
        code, out, err = finish(process)
        assert code == 0, err
    manifest = pd.read_parquet(tmp_path / "sw" / "manifest.parquet")
    runs = pd.concat(pd.read_parquet(p) for p in (tmp_path / "sw").glob("cells/*/run.parquet"))
    assert sorted(runs["seed"]) == [1, 2, 3, 4]
    assert len(manifest) == 4 and manifest["cell_id"].is_unique  # neither sweep dropped the other's rows
    assert sorted(runs["cell_id"]) == sorted(manifest["cell_id"]) and set(runs["status"]) == {"completed"}
    assert len(runs) == 4  # one attempt each: no cell ran twice
    status = cli(tmp_path, "status", "sw")
    assert status.returncode == 0 and status.stdout.rstrip().endswith("4 cell(s): 4 completed"), status.stdout


def test_analyze_while_cells_are_writing(tmp_path: Path) -> None:
    sweep = start("sweep", *TINY, "steps=20", "seed=1,2", "hydra.sweep.dir=sw", cwd=tmp_path)
    seen: list[tuple[int, str]] = []
    while sweep.poll() is None:
        if (tmp_path / "sw" / "manifest.parquet").exists():
            analysis = cli(tmp_path, "analyze", "sw", "--format", "csv", "--no-plots")
            # 1 while no cell has a result yet; never a crash, never a half-read file
            assert analysis.returncode in (0, 1) and "Traceback" not in analysis.stderr, analysis.stderr
            seen.append((analysis.returncode, analysis.stdout))
        time.sleep(1)
    code, _, err = finish(sweep)
    assert code == 0, err
    assert any(rc == 0 for rc, _ in seen), "no analysis ran while the sweep had results"
    completed = [int((pd.read_csv(io.StringIO(out))["status"] == "completed").sum()) for rc, out in seen if rc == 0]
    assert min(completed) < 2, f"every analysis saw the finished sweep, nothing was read mid-sweep: {completed}"
    assert completed == sorted(completed)  # what was complete stays complete
