"""The catalogue (workloads/cell/catalog.py) against what builds its entries, and the reason it exists:
the orchestrator checks every cell of a grid without importing torch."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO_ROOT
from workloads.cell.catalog import FAMILY_KINDS, GEMM_FAMILY, SIZES
from workloads.models import MODEL_FAMILIES


def test_every_family_has_a_builder_and_every_size_a_preset() -> None:
    assert MODEL_FAMILIES.keys() == FAMILY_KINDS.keys() - {GEMM_FAMILY}  # a GEMM builds no model
    assert all(tuple(family.sizes) == SIZES for family in MODEL_FAMILIES.values())


def test_expanding_and_checking_a_grid_imports_no_torch() -> None:
    code = (
        "import sys; from orchestrator.grid.expand import expand; "
        "grid = expand(['model=gpt', 'backend=eager,inductor', 'cluster=grete', "
        "'hydra.sweep.dir=/nonexistent']); "
        "print(len(grid.cells), 'torch' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["2", "False"]
