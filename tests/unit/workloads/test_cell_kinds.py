"""The table of cell kinds (workloads/kinds.py KINDS): each config is run by one kind, which names its
MeasuredCell and its instruments, and the attempt runs what the table says."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import gemm_config, with_instruments
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.distributed import Ranks
from workloads.cell.recorder import CellRecorder
from workloads.contract.vocabulary import COMPLETED
from workloads.gemm.cell import GemmCell
from workloads.gemm.layer_cell import LayerCell
from workloads.instruments.base import Instrument, Instruments
from workloads.instruments.gpu_clocks import GpuClocks
from workloads.instruments.provenance import Provenance
from workloads.kinds import KINDS, gemm_instruments, kind_of
from workloads.run import run_cell
from workloads.train_cell import TrainingCell

LAYER = {"layer": "llama3_70b_attention"}
FP8 = {"name": "fp8", "recipe": "tensorwise"}


@pytest.mark.parametrize(
    ("config", "kind", "cell"),
    [
        ({"model": {"name": "gpt"}}, "training", TrainingCell),
        ({"model": {"name": "resnet"}}, "training", TrainingCell),
        (gemm_config(), "gemm", GemmCell),
        (gemm_config(gemm={"timing": "burst"}), "gemm", GemmCell),
        (gemm_config(precision=FP8, gemm=LAYER), "gemm layer", LayerCell),
    ],
)
def test_each_config_is_run_by_one_kind(config: dict, kind: str, cell: type) -> None:
    cfg = cell_config_from_dict(config)
    assert [row.name for row in KINDS if row.runs(cfg)] == [kind]
    assert kind_of(cfg).cell is cell


def test_a_gemm_cell_s_instruments_read_its_own_clocks() -> None:
    """On the CPU: no wait for quiet (not the local executor's), no energy, the cell's clocks, provenance."""
    cell = GemmCell(cell_config_from_dict(gemm_config()), CellRecorder("gemm", 1), Ranks())
    members = gemm_instruments(cell).members
    assert [type(member) for member in members] == [Instrument, Instrument, GpuClocks, Provenance]
    assert members[2] is cell.clocks


class Seen(Instrument):
    """Logs the moments it is called at."""

    def __init__(self) -> None:
        self.moments: list[str] = []

    def before_loop(self, cell: object) -> None:
        self.moments.append(type(cell).__name__)

    def before_measuring(self) -> None:
        self.moments.append("before_measuring")


def test_the_attempt_runs_the_kind_s_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instrument added to the gemm row of the table is called by a GEMM cell's attempt: the attempt
    takes the cell and its instruments from the table."""
    seen = Seen()
    with_instruments(monkeypatch, lambda real: Instruments([*real.members, seen]), kind="gemm")
    assert run_cell(cell_config_from_dict(gemm_config()), tmp_path / "gemm") == COMPLETED
    assert seen.moments == ["GemmSteps", "before_measuring"]
    (run,) = pd.read_parquet(tmp_path / "gemm" / "run.parquet").to_dict("records")
    assert run["model"] == "gemm" and run["gemm_us"] > 0
