"""What the `compare` tests share (tests/unit/analysis/test_compare*.py): tight step times, a sweep of
an eager and an inductor cell, and `compilebench compare` through the command line's main()."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import write_cell, write_manifest


def steps(median: float, seed: int, n: int = 40) -> list[float]:
    """Tight step times (1% spread) around `median`."""
    return list(np.random.default_rng(seed).lognormal(np.log(median), 0.01, n))


def write_sweep(root: Path, inductor_ms: float, eager_ms: float = 10.0, prefix: str = "", **run) -> Path:
    """An eager and an inductor cell of gpt tiny; cell ids with `prefix`, so that matching by id
    would find nothing between two sweeps of different prefixes."""
    write_cell(root, f"{prefix}e", "eager", step_ms=steps(eager_ms, 1), **run)
    write_cell(root, f"{prefix}i", "inductor", step_ms=steps(inductor_ms, 2), **run)
    write_manifest(root, [{"cell_id": f"{prefix}{c}"} for c in ("e", "i")])
    return root


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`compilebench compare ARGS`: (exit code, stdout, stderr)."""
    code = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err
