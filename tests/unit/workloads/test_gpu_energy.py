"""The GPU's energy (workloads/instruments/energy.py, gpu_energy.py, nvml.py; docs/measurement.md
"Energy"): the arithmetic on hand-made counter readings (the windows' joules per step of each side,
a paired cell's blocks split over their steps, compile energy, the idle power between the counter's
own updates), the sums over the ranks, a GPU whose counter NVML does not support, real tiny CPU cells
whose energy columns stay null, and the whole path through a real paired cell on the CPU with a
stand-in board that draws a constant power. On a GPU: tests/gpu/test_gpu_tier.py.
"""

from __future__ import annotations

import json
import statistics
import time
from itertools import groupby
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pynvml
import pytest
import torch

from tests.helpers import gemm_config, with_instruments
from workloads import kinds
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.cell.train import StepRecord
from workloads.contract.schema import ENERGY_FIELDS
from workloads.gemm.timing import GEMMS_PER_REPLAY
from workloads.instruments import energy, gpu_energy, nvml
from workloads.instruments.base import Instruments
from workloads.instruments.energy import (
    Block,
    Readings,
    Step,
    attribute,
    energy_columns,
    joules,
    read_idle,
    settled_power_w,
    update_period_s,
    window_start,
)
from workloads.instruments.gpu_energy import GpuEnergy
from workloads.run import run_cell

ENERGY_COLUMNS = [field.name for field in ENERGY_FIELDS]
#: Blocks of a fixed length keep the tiny paired cells short (as tests/unit/workloads/test_paired_loop.py).
BLOCKS = {"paired": True, "block_steps": 3, "block_seconds": 0.0}


# --- the arithmetic ----------------------------------------------------------------------------


def test_joules_between_two_readings() -> None:
    assert joules(1_000, 3_500) == 2.5
    assert joules(None, 3_500) is None and joules(1_000, None) is None
    assert joules(3_500, 1_000) is None  # the counter went back: the driver reloaded


#: An H100's counter, each update as a 2 ms poll saw it (examples/benchmarks/energy_counter_probe.py).
H100_COUNTER = json.loads(
    (
        Path(__file__).resolve().parents[3]
        / "docs/results/h100_2026-11-27_energy_counter/counter_series.json"
    ).read_text()
)["series"]


def updates_of(series: str) -> list[tuple[float, float]]:
    return [(t, mj) for t, mj in H100_COUNTER[series]["updates"]]


class FakeClock:
    """time.monotonic and time.sleep of a test: sleeping moves the clock."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def replay(updates: list[tuple[float, float]], clock: FakeClock, fail_after: int | None = None):
    """The recorded counter read at the clock's time: the last update seen by then."""
    reads = []

    def read_mj() -> float | None:
        reads.append(clock.now)
        if fail_after is not None and len(reads) > fail_after:
            return None
        return next((mj for t, mj in reversed(updates) if t <= clock.now), updates[0][1])

    return read_mj


def power_between(updates: list[tuple[float, float]], start_s: float, end_s: float) -> float:
    """The recorded board's mean power between the updates nearest these seconds after the first."""
    t0 = updates[0][0]
    (a, ea), (b, eb) = (min(updates, key=lambda u: abs(u[0] - t0 - at)) for at in (start_s, end_s))
    return (eb - ea) / 1e3 / (b - a)


def test_the_h100_counter_updates_every_100_ms() -> None:
    for series in H100_COUNTER:
        assert update_period_s(updates_of(series)) == pytest.approx(0.1, rel=0.02), series


@pytest.mark.parametrize("series", list(H100_COUNTER))
def test_idle_power_waits_until_the_board_has_settled(series: str) -> None:
    """After another process's load ended, the H100 drew 131 W, then 115 W, before it fell to 74 W;
    in a process with its own CUDA context the board stays in P0 and falls from 131 W to 126 W over
    seconds. The idle power is the first second's within 1% of the second before: 2-5 s on, within 2%
    of the board's power in the recording's last second; over halves of 0.5 s the reading would have
    stopped on the plateau before the fall."""
    updates = updates_of(series)
    settled_at = next(n for n in range(2, len(updates) + 1) if settled_power_w(updates[:n]) is not None)
    watts, t0 = settled_power_w(updates[:settled_at]), updates[0][0]
    assert 2.0 <= updates[settled_at - 1][0] - t0 <= 5.0
    last = updates[-1][0] - t0
    final = power_between(updates, last - 1.0, last)
    assert watts == pytest.approx(final, rel=0.02)
    hasty = next(w for n in range(2, len(updates)) if (w := settled_power_w(updates[:n], half_s=0.5)))
    if series == "after_process_no_context":
        assert hasty > 1.5 * final


def test_reading_idle_polls_the_counter_until_it_settles() -> None:
    """The recorded counter after another process's load, replayed at the poll's clock: read_idle
    stops where the board settled, with its update period; with too little time it records the last
    second's power, not settled (on the plateau before the fall); a read that fails leaves no power."""
    updates = updates_of("after_process_no_context")
    clock = FakeClock(updates[0][0] - 0.05)
    idle = read_idle(replay(updates, clock), clock=clock, sleep=clock.sleep)
    assert idle.settled is True and idle.update_s == pytest.approx(0.1, rel=0.05)
    seen = [u for u in updates if u[0] <= clock.now]
    # each update seen up to a poll (2 ms) later than recorded: the same power within 0.5%
    assert idle.watts == pytest.approx(settled_power_w(seen), rel=0.005)
    assert 2.0 <= clock.now - updates[0][0] <= 5.0
    clock = FakeClock(updates[0][0] - 0.05)
    hurried = read_idle(replay(updates, clock), timeout_s=1.5, clock=clock, sleep=clock.sleep)
    assert hurried.settled is False and hurried.watts > idle.watts
    assert hurried.watts == pytest.approx(power_between(updates, 0.4, 1.4), rel=0.02)
    clock = FakeClock(updates[0][0])
    failing = read_idle(replay(updates, clock, fail_after=100), clock=clock, sleep=clock.sleep)
    assert failing.watts is None and failing.settled is None


def steps_of(*runs: tuple[str, str | None, int]) -> list[Step]:
    """Steps in order from (phase, side, how many) runs."""
    return [Step(phase, side) for phase, side, n in runs for _ in range(n)]


def test_the_window_begins_at_the_last_warm_up_step() -> None:
    assert window_start(["warmup"] * 3 + ["measure"] * 4) == 2  # the pause came before step 2
    assert window_start(["measure"] * 4) == 0  # no warm-up: the pause came before the first step
    assert window_start(["warmup"] * 3) == 2  # the loop failed after its last warm-up step
    # a paired cell that went on unpaired once its eager side ran out of memory in the last warm-up
    # step: the ordinary loop's compiled warm-up step is the window's first row
    assert window_start(["warmup"] * 5 + ["measure"] * 2) == 4


def test_an_unpaired_cell_spreads_its_window_over_its_steps() -> None:
    """5 steps in the window (the last warm-up step and 4 measured), 50 J in 2 s; 40 J in the warm-up
    window, whose 2 steps would have taken 20 J at the measured rate: 20 J compiled."""
    steps = steps_of(("warmup", None, 3), ("measure", None, 4))
    columns, energies = energy_columns(Readings(40.0, 50.0, 2.0), steps, items_per_step=100, compiles=True)
    assert columns == {
        "energy_window_steps": 5,
        "joules_per_step": 10.0,
        "eager_joules_per_step": None,
        "items_per_joule": 10.0,
        "avg_power_w": 25.0,
        "compile_energy_j": 20.0,
        "energy_edge_share": None,  # no blocks
    }
    assert energies == [None] * 7  # a window's mean is no step's measurement: steps.parquet keeps null
    eager, _ = energy_columns(Readings(40.0, 50.0, 2.0), steps, items_per_step=100, compiles=False)
    assert eager["compile_energy_j"] is None  # as compile_time_s: eager compiles nothing
    cheap, _ = energy_columns(Readings(5.0, 50.0, 2.0), steps, items_per_step=100, compiles=True)
    assert cheap["compile_energy_j"] == 0.0  # never below 0


def test_a_row_of_ten_steps_shares_its_energy_among_them() -> None:
    """A GEMM cell's row is the mean GEMM of a replay of 10: the same readings give J per GEMM, a tenth
    of a row's, and items (GEMMs) per J ten times as many; the compile's energy and the power stay."""
    steps = steps_of(("warmup", None, 3), ("measure", None, 4))
    columns, _ = energy_columns(
        Readings(40.0, 50.0, 2.0), steps, items_per_step=1, compiles=True, steps_per_row=10
    )
    assert columns == {
        "energy_window_steps": 5,  # rows
        "joules_per_step": 1.0,
        "eager_joules_per_step": None,
        "items_per_joule": 1.0,
        "avg_power_w": 25.0,
        "compile_energy_j": 20.0,
        "energy_edge_share": None,  # no blocks
    }


def paired_steps() -> list[Step]:
    """A paired cell's steps: 2 compiled warm-up steps, an eager warm-up block of k-1 = 2 steps, the
    last warm-up step (eager), then 2 pairs of blocks of 3: (compiled, eager), (eager, compiled)."""
    return steps_of(
        ("warmup", "compiled", 2),
        ("warmup", "eager", 3),
        ("measure", "compiled", 3),
        ("measure", "eager", 3),
        ("measure", "eager", 3),
        ("measure", "compiled", 3),
    )


PAIRED_BLOCKS = [
    Block("eager", 1, 2.0, 1.0),
    Block("compiled", 3, 9.0, 1.0),
    Block("eager", 3, 15.0, 1.0),
    Block("eager", 3, 16.5, 1.0),
    Block("compiled", 3, 10.5, 1.0),
]


def test_a_paired_cell_splits_each_block_over_its_steps() -> None:
    """Each side's J per step from its own blocks; each measured step gets its block's share, so
    a pair's energy ratio is its blocks' sums; the warm-up window's compiled steps are charged at the
    compiled rate, its eager ones at the eager rate."""
    readings = Readings(100.0, 53.5, 4.0, PAIRED_BLOCKS)
    columns, energies = energy_columns(readings, paired_steps(), items_per_step=13, compiles=True)
    compiled, eager = (9.0 + 10.5) / 6, (15.0 + 16.5) / 6
    assert columns == pytest.approx(
        {
            "energy_window_steps": 13,
            "joules_per_step": compiled,
            "eager_joules_per_step": eager,
            "items_per_joule": 13 / compiled,
            "avg_power_w": 53.5 / 4.0,
            "compile_energy_j": 100.0 - 2 * compiled - 2 * eager,
            "energy_edge_share": None,  # steps without times
        }
    )
    assert energies == pytest.approx([None] * 5 + [3.0] * 3 + [5.0] * 3 + [5.5] * 3 + [3.5] * 3)
    assert sum(energies[8:11]) / sum(energies[5:8]) == pytest.approx(15.0 / 9.0)  # the first pair's ratio


def test_the_compiled_blocks_time_between_their_steps_is_their_edge_share() -> None:
    """Each 1-s compiled block's 3 steps took 0.3 s each (first pair) and 0.32 s (second): 0.1 and
    0.04 s lie between them, 0.14 of their 2 s; the eager blocks and the last warm-up step's block,
    whatever their gaps, do not count."""
    times = {("measure", "compiled"): [300.0] * 3 + [320.0] * 3}
    steps = []
    for step in paired_steps():
        own = times.get((step.phase, step.side))
        steps.append(Step(step.phase, step.side, own.pop(0) if own else 50.0))
    columns, _ = energy_columns(
        Readings(100.0, 53.5, 4.0, PAIRED_BLOCKS), steps, items_per_step=13, compiles=True
    )
    assert columns["energy_edge_share"] == pytest.approx((0.1 + 0.04) / 2.0)
    unpaired, _ = energy_columns(Readings(100.0, 53.5, 4.0), steps, items_per_step=13, compiles=True)
    assert unpaired["energy_edge_share"] is None


def test_blocks_shorter_than_the_counters_steps_give_no_side_its_energy() -> None:
    """0.1 s blocks see one counter update or two: no side's J per step, no step's energy; the
    window's own columns stay."""
    short = [Block(block.side, block.steps, block.joules, seconds=0.1) for block in PAIRED_BLOCKS]
    columns, energies = energy_columns(Readings(100.0, 53.5, 4.0, short), paired_steps(), 13, True)
    assert columns["joules_per_step"] is None and columns["eager_joules_per_step"] is None
    assert columns["compile_energy_j"] is None and energies == [None] * 17
    assert columns["avg_power_w"] == 53.5 / 4.0 and columns["energy_window_steps"] == 13


def test_no_energy_is_put_on_the_wrong_side() -> None:
    """Blocks that do not match the steps' sides (never written by the loop) attribute nothing."""
    swapped = [Block("compiled", 1, 2.0, 1.0), *PAIRED_BLOCKS[1:]]
    assert attribute(swapped, paired_steps()[4:]) == [None] * 13
    columns, energies = energy_columns(Readings(100.0, 53.5, 4.0, swapped), paired_steps(), 13, True)
    assert columns["joules_per_step"] is None and columns["compile_energy_j"] is None
    assert columns["energy_window_steps"] == 13 and energies == [None] * 17


def test_a_paired_cell_gone_unpaired_counts_its_blocks_only() -> None:
    """After an eager-side OOM the steps go on unpaired: no block covers them (their energy holds the
    failed block's), so J per step is the blocks' before it."""
    steps = [*paired_steps()[:11], *steps_of(("warmup", None, 1), ("measure", None, 4))]
    columns, energies = energy_columns(Readings(100.0, 80.0, 6.0, PAIRED_BLOCKS[:3]), steps, 13, True)
    assert columns["joules_per_step"] == 3.0 and columns["eager_joules_per_step"] == 5.0
    assert columns["energy_window_steps"] == 12 and energies[11:] == [None] * 5


def test_without_a_reading_every_column_is_null() -> None:
    steps = steps_of(("warmup", None, 3), ("measure", None, 4))
    columns, energies = energy_columns(Readings(40.0, None, 2.0), steps, 100, True)
    assert set(columns.values()) == {None} and energies == [None] * 7


# --- the ranks -----------------------------------------------------------------------------------


class ConstantBoard:
    """A stand-in for a GPU's energy counter (nvml.EnergyCounter): a board drawing WATTS at all times,
    its counter moving continuously (a real one moves every 20-100 ms)."""

    WATTS = 100.0

    def __init__(self) -> None:
        self.closed = False

    @classmethod
    def open(cls, device: torch.device) -> ConstantBoard:
        return cls()

    def read_mj(self) -> float:
        return self.WATTS * time.perf_counter() * 1e3

    def close(self) -> None:
        self.closed = True


def rank_steps(times_ms: list[float], warmup: int) -> list[StepRecord]:
    return [StepRecord(i, "warmup" if i < warmup else "measure", t, 0.0, 1.0) for i, t in enumerate(times_ms)]


def test_two_ranks_energies_are_summed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank reads its own GPU; the cell's energies are the sums over the ranks, J per step over
    the merged window, and a failed cell, whose rank 0 kept its own report only, has none."""
    monkeypatch.setattr(gpu_energy, "EnergyCounter", ConstantBoard)
    instrument = GpuEnergy(torch.device("cpu"))  # the stand-in board on the CPU: no device to sync
    instrument.before_build()
    instrument.before_loop(None)  # the counter needs no cell
    time.sleep(0.02)
    instrument.before_measuring()
    time.sleep(0.05)
    own = instrument.after_loop()
    assert own["energy_j"] == pytest.approx(100.0 * own["energy_window_s"], rel=1e-3)
    assert own["idle_power_w"] == pytest.approx(100.0, rel=0.02)
    assert 2.0 <= own["warmup_energy_j"] < 50.0  # 20 ms slept, at 100 W

    rank1 = {"energy_j": 7.0, "warmup_energy_j": 3.0, "idle_power_w": 60.0}
    rec = CellRecorder("c", 1, world_size=2)
    rec.items_per_step = 64
    rec.run.update(own)  # what after_loop gave this rank's row
    rec.records = steps = rank_steps([500, 10, 11, 12, 13], warmup=2)
    rec.summarise([rec.report(0, None), RankReport(1, "node1", steps, None, rank1)], True, 0.0)
    total = own["energy_j"] + 7.0
    assert rec.run["energy_j"] == pytest.approx(total) and rec.run["rank_energy_j"] == [own["energy_j"], 7.0]
    assert rec.run["idle_power_w"] == pytest.approx(own["idle_power_w"] + 60.0)
    columns = instrument.after_summary(rec)
    assert columns["energy_window_steps"] == 4  # step 1 (the last warm-up step) and 3 measured
    assert columns["joules_per_step"] == pytest.approx(total / 4)
    assert columns["items_per_joule"] == pytest.approx(64 / (total / 4))
    assert columns["compile_energy_j"] == pytest.approx(max(0.0, own["warmup_energy_j"] + 3.0 - total / 4))

    failed = CellRecorder("c", 1, world_size=2)
    failed.items_per_step = 64
    failed.run.update(own)
    failed.records = steps
    failed.summarise([failed.report(0, None)], True, 0.0)
    assert failed.run["energy_j"] is None and failed.run["rank_energy_j"] == [own["energy_j"]]


# --- NVML -----------------------------------------------------------------------------------------


def test_a_gpu_without_the_counter_opens_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML names the GPU by torch's UUID (CUDA_VISIBLE_DEVICES is torch's business); a GPU older than
    Volta answers NotSupported: no counter, and NVML's start is matched by a stop."""
    calls: list[Any] = []

    def not_supported(handle: str) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    fake = SimpleNamespace(
        nvmlDeviceGetHandleByUUID=lambda uuid: calls.append(uuid) or f"handle of {uuid}",
        nvmlDeviceGetTotalEnergyConsumption=not_supported,
        nvmlShutdown=lambda: calls.append("stop"),
    )
    monkeypatch.setattr(nvml, "start", lambda: fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(uuid="1b2c"))
    assert nvml.EnergyCounter.open(torch.device("cuda", 0)) is None
    assert calls == ["GPU-1b2c", "stop"]
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda handle: 123_456
    counter = nvml.EnergyCounter.open(torch.device("cuda", 0))
    assert counter is not None and counter.read_mj() == 123_456
    assert nvml.EnergyCounter.open(torch.device("cpu")) is None


# --- real cells ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend, measure", [("eager", {}), ("aot_eager", BLOCKS)], ids=["eager", "paired"])
def test_a_cpu_cell_records_null_energy_and_completes(tiny_cells, backend: str, measure: dict) -> None:
    cell = tiny_cells.get("gpt", backend, measure=measure)
    run = cell.run
    assert run["status"] == "completed" and run["paired"] == bool(measure)
    assert {run[name] for name in ENERGY_COLUMNS} == {None} and run["rank_energy_j"] is None
    assert {s["energy_j"] for s in cell.steps} == {None}
    cell.assert_exact_schemas()


def cell_with_a_board(tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **values: Any):
    """A real tiny CPU cell with GpuEnergy on the ConstantBoard at the end of its instruments: its run
    row and its steps in order."""
    monkeypatch.setattr(gpu_energy, "EnergyCounter", ConstantBoard)
    with_instruments(monkeypatch, lambda real: Instruments([*real.members, GpuEnergy(torch.device("cpu"))]))
    status = run_cell(cell_config_from_dict(tiny_config("gpt", **values)), tmp_path)
    (run,) = pq.read_table(tmp_path / "run.parquet").to_pylist()
    steps = sorted(pq.read_table(tmp_path / "steps.parquet").to_pylist(), key=lambda s: s["step"])
    assert status == "completed", run["error"]
    return run, steps


def test_a_paired_cell_on_a_constant_board_charges_each_block_its_own_time(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a board that draws 100 W, the window's energy is 100 W times its seconds; each block's
    energy at least 100 W times its steps' time (the rest is the bookkeeping between blocks), its
    steps share it evenly; each side's J per step is its steps' mean, and the run row says so. (The
    tiny cell's blocks last milliseconds: the board is constant, so no least block length applies.)"""
    monkeypatch.setattr(energy, "ENERGY_MIN_BLOCK_S", 0.0)
    run, steps = cell_with_a_board(
        tiny_config, tmp_path, monkeypatch, backend={"name": "aot_eager"}, measure=BLOCKS
    )
    watts = ConstantBoard.WATTS
    assert run["paired"] and run["energy_j"] == pytest.approx(watts * run["energy_window_s"], rel=1e-3)
    assert run["avg_power_w"] == pytest.approx(watts, rel=1e-3)
    assert run["idle_power_w"] == pytest.approx(watts, rel=0.02)
    measured = [s for s in steps if s["phase"] == "measure"]
    assert run["energy_window_steps"] == len(measured) + 1 == 37  # 6 pairs of 2 blocks of 3, and one
    blocks = [list(rows) for _, rows in groupby(measured, key=lambda s: (s["pair"], s["side"]))]
    for block in blocks:
        assert len({s["energy_j"] for s in block}) == 1  # split evenly
        seconds = sum(s["step_time_ms"] for s in block) / 1e3
        assert sum(s["energy_j"] for s in block) >= watts * seconds * 0.999
    for side, column in (("compiled", "joules_per_step"), ("eager", "eager_joules_per_step")):
        assert run[column] == pytest.approx(
            statistics.fmean(s["energy_j"] for s in measured if s["side"] == side)
        )
    assert run["items_per_joule"] == pytest.approx(run["items_per_step"] / run["joules_per_step"])
    # the measured blocks hold the window but for the last warm-up step and the loop's last moments
    last_warmup_s = steps[len(steps) - len(measured) - 1]["step_time_ms"] / 1e3
    rest = run["energy_j"] - sum(s["energy_j"] for s in measured)
    assert watts * last_warmup_s < rest < watts * (last_warmup_s + 0.5)
    assert all(s["energy_j"] is None for s in steps if s["phase"] == "warmup")
    assert run["warmup_energy_j"] > 0 and 0 <= run["compile_energy_j"] <= run["warmup_energy_j"]
    # the compiled blocks' seconds between their steps: what their energy holds beyond their steps'
    compiled = [s for s in measured if s["side"] == "compiled"]
    beyond = 1 - watts * sum(s["step_time_ms"] for s in compiled) / 1e3 / sum(s["energy_j"] for s in compiled)
    assert 0 < run["energy_edge_share"] == pytest.approx(beyond, abs=1e-3)


def test_an_unpaired_cell_on_a_constant_board_spreads_its_window(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, steps = cell_with_a_board(tiny_config, tmp_path, monkeypatch)
    assert (
        not run["paired"] and run["energy_window_steps"] == 6 + 1
    )  # the measured steps and the last warm-up
    assert run["joules_per_step"] == pytest.approx(run["energy_j"] / 7)
    assert run["eager_joules_per_step"] is None and run["compile_energy_j"] is None  # eager compiles nothing
    window_s = sum(s["step_time_ms"] for s in steps[1:]) / 1e3
    assert window_s <= run["energy_window_s"] < window_s + 0.5
    assert {s["energy_j"] for s in steps} == {None}


class BoardOnTheCpu(GpuEnergy):
    """GpuEnergy on the ConstantBoard for a CPU cell, built as the cell builds its own."""

    @classmethod
    def for_cell(cls, cfg: Any, ranks: Any, steps_per_row: int = 1) -> GpuEnergy:
        return cls(torch.device("cpu"), steps_per_row)


def test_a_gemm_cell_on_a_constant_board_records_joules_per_gemm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GEMM cell's instruments include the energy: on a 100 W board its window draws 100 W, and its
    J per step is per GEMM (a row is the mean of GEMMS_PER_REPLAY): at least 100 W times a GEMM's time."""
    monkeypatch.setattr(gpu_energy, "EnergyCounter", ConstantBoard)
    monkeypatch.setattr(kinds, "GpuEnergy", BoardOnTheCpu)
    config = cell_config_from_dict(gemm_config("cpu", size="small", steps=6, measure={"min_seconds": 0.2}))
    assert run_cell(config, tmp_path) == "completed"
    (run,) = pq.read_table(tmp_path / "run.parquet").to_pylist()
    steps = sorted(pq.read_table(tmp_path / "steps.parquet").to_pylist(), key=lambda s: s["step"])
    watts, rows = ConstantBoard.WATTS, run["energy_window_steps"]
    assert rows == sum(s["phase"] == "measure" for s in steps) + 1  # and the last warm-up step
    assert run["avg_power_w"] == pytest.approx(watts, rel=1e-3)
    assert run["joules_per_step"] == pytest.approx(run["energy_j"] / (rows * GEMMS_PER_REPLAY))
    mean_gemm_s = statistics.fmean(s["step_time_ms"] for s in steps[-rows:]) / 1e3  # the window's rows
    assert watts * mean_gemm_s * 0.999 <= run["joules_per_step"] < watts * (mean_gemm_s + 0.05)
    assert run["items_per_joule"] == pytest.approx(1 / run["joules_per_step"])
    assert run["idle_power_w"] == pytest.approx(watts, rel=0.02) and run["compile_energy_j"] is None
