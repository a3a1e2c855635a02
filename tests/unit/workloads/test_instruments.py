"""The seam between a cell's loop and its instruments (workloads/instruments/base.py, workloads/kinds.py,
workloads/run.py `attempt`): an instrument that does not apply to a cell is a no-op object, and the
loop of a real tiny CPU cell calls every instrument's moments in the list's order and merges the
columns each returns into the run row, also when the loop fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.helpers import with_instruments
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.distributed import Ranks
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import PreparedCell
from workloads.instruments.accuracy import AccuracyCheck
from workloads.instruments.base import Instrument, Instruments
from workloads.instruments.cold_compile import ColdCompile
from workloads.instruments.compile_workers import CompileWorkersIdle
from workloads.instruments.dynamo_records import CompileCounters, DdpSplits, NoDdpSplits
from workloads.instruments.host_load import HostLoad, WaitForQuiet
from workloads.instruments.provenance import Provenance
from workloads.kinds import training_instruments
from workloads.local import turns
from workloads.run import run_cell
from workloads.train_cell import TrainingCell


def instruments_for(cfg, ranks: Ranks, repeat: int = 0) -> Instruments:
    """The training kind's instruments of replicate `repeat` of `cfg` on this rank."""
    rec = CellRecorder("cell", 1)
    rec.run["repeat"] = repeat
    return training_instruments(TrainingCell(cfg, rec, ranks))


def test_an_instrument_that_does_not_apply_is_a_no_op_object(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eager on the CPU, one process, not the local executor's: no cold compile, no wait for quiet, no
    DDP splits, no profiled window, no accuracy check, each the base class's no-op (or a counter of
    none); where they apply, the real ones."""
    monkeypatch.delenv(turns.DIR_ENV, raising=False)
    alone = instruments_for(cell_config_from_dict(tiny_config("gpt")), Ranks()).members
    assert [type(instrument) for instrument in alone] == [
        Instrument,
        Instrument,
        CompileWorkersIdle,  # every cell: one with no compile workers does not wait
        HostLoad,
        Instrument,  # a CPU cell: no GPU energy
        Provenance,
        NoDdpSplits,
        CompileCounters,
        Instrument,  # a CPU cell: no profiled window
        Instrument,  # eager is the accuracy check's reference, not checked
    ]
    assert alone[6].splits == 0
    nothing = Instrument()
    assert nothing.before_build() is None and nothing.before_measuring() is None
    assert nothing.after_block("compiled", 5) is None
    assert nothing.after_loop() == {} and nothing.after_summary(CellRecorder("c", 1)) == {}
    assert nothing.after_finished() == {}

    monkeypatch.setenv(turns.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(turns.INDEX_ENV, "0")
    cold_warm = cell_config_from_dict(tiny_config("gpt", "inductor", compile={"measure": "cold_warm"}))
    applied = instruments_for(cold_warm, Ranks(0, 2, 0, "gloo")).members
    assert [type(instrument) for instrument in applied][:2] == [ColdCompile, WaitForQuiet]
    assert type(applied[6]) is DdpSplits and applied[7].ddp_splits is applied[6]
    assert type(applied[-1]) is Instrument  # ranks would each check alone: no accuracy check
    one_process = instruments_for(cold_warm, Ranks()).members
    assert type(one_process[-1]) is AccuracyCheck
    assert (
        type(instruments_for(cold_warm, Ranks(), repeat=1).members[-1]) is Instrument
    )  # checked once, in the first


class Observer(Instrument):
    """Logs its moments into `log` under its name; adds a provenance column after the loop (later
    in the list than provenance: its value wins) and a cold-compile column after the summary."""

    def __init__(self, name: str, log: list[tuple[str, str]], fail_before_measuring: bool = False):
        self.name, self.log, self.fail = name, log, fail_before_measuring
        self.seen: dict[str, Any] = {}

    def before_build(self) -> None:
        self.log.append((self.name, "before_build"))

    def before_loop(self, cell: PreparedCell) -> None:
        self.log.append((self.name, "before_loop"))
        self.seen["cell"] = cell

    def before_measuring(self) -> None:
        self.log.append((self.name, "before_measuring"))
        if self.fail:
            raise RuntimeError("an instrument failed before measuring")

    def after_loop(self) -> dict[str, Any]:
        self.log.append((self.name, "after_loop"))
        return {"gpu_driver": f"driver of {self.name}"}

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        self.log.append((self.name, "after_summary"))
        self.seen["steps"], self.seen["host_op_us"] = len(rec.steps), rec.run.get("host_op_us")
        return {"compile_cold_s": 1.5}

    def after_finished(self) -> dict[str, Any]:
        self.log.append((self.name, "after_finished"))
        return {"gpu_power_limit_w": 1.0}


def observed_cell(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool = False
) -> tuple[str, dict[str, Any], list[tuple[str, str]], Observer]:
    """A tiny eager GPT cell run by `run_cell`, with an Observer before and after the cell's own
    instruments: (status, its run row, the moments logged, the last observer)."""
    log: list[tuple[str, str]] = []
    first, last = Observer("first", log), Observer("last", log, fail_before_measuring=fail)
    with_instruments(monkeypatch, lambda real: Instruments([first, *real.members, last]))
    status = run_cell(cell_config_from_dict(tiny_config("gpt", steps=3, warmup_steps=2)), tmp_path)
    (row,) = pq.read_table(tmp_path / "run.parquet").to_pylist()
    return status, row, log, last


def test_the_loop_calls_the_moments_in_order_and_merges_their_columns(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, row, log, last = observed_cell(tiny_config, tmp_path, monkeypatch)
    moments = [
        "before_build",
        "before_loop",
        "before_measuring",
        "after_loop",
        "after_summary",
        "after_finished",
    ]
    assert status == "completed"
    assert log == [(name, moment) for moment in moments for name in ("first", "last")]
    assert isinstance(last.seen["cell"], PreparedCell)
    # after the summary: the merged steps are in, and so are the columns every after_loop gave
    assert last.seen["steps"] == 5 and last.seen["host_op_us"] is not None
    assert row["gpu_driver"] == "driver of last" and row["compile_cold_s"] == 1.5
    assert row["measured_steps"] == 3 and row["host_op_us"] > 0 and row["cpu_model"]
    assert row["gpu_power_limit_w"] == 1.0


def test_after_a_failure_the_loop_still_asks_every_instrument_for_its_columns(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, row, log, _ = observed_cell(tiny_config, tmp_path, monkeypatch, fail=True)
    assert status == "failed" and "an instrument failed before measuring" in row["error"]
    assert log[-4:] == [
        ("first", "after_loop"),
        ("last", "after_loop"),
        ("first", "after_summary"),
        ("last", "after_summary"),
    ]
    assert row["gpu_driver"] == "driver of last" and row["compile_cold_s"] == 1.5
    assert ("first", "after_finished") not in log  # a failed loop has no warm cell to work on
