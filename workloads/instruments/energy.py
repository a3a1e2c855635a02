"""The energy of a cell's windows from its GPU's total-energy counter: pure arithmetic, no torch.

The instrument (workloads/instruments/gpu_energy.py) reads the counter (mJ) with the device
synchronised, at the ends of the cell's windows:

    warm-up window    from the built cell to before its last warm-up step: compilation, autotuning
                      and the warm-up steps before that one
    measured window   from there to the loop's end: the last warm-up step and every measured step
                      (a paired cell's both sides)
    blocks            a paired cell's, in the measured window: the energy from one block's end to the
                      next's is the later block's

The counter moves every 20-100 ms, so a reading is late by up to that much: a window's joules are
worth reading only over many updates, and a paired block's only summed over many blocks (the error
at a boundary moves energy from one block to the next, whose side the pair's drawn order decides;
the time between blocks is charged to the next: `edge_share`). Before the cell, the idle power once
the board has settled (`read_idle`). Tested on hand-made readings and on an H100's recorded counter
(tests/unit/workloads/test_gpu_energy.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.contract.vocabulary import EAGER_SIDE

#: Idle power is read once the board has settled: its power over the last SETTLE_HALF_S of the
#: counter's updates within SETTLE_TOLERANCE of the SETTLE_HALF_S before (no longer falling or
#: rising), polling every IDLE_POLL_S (a poll costs microseconds; an update is seen at most one poll
#: late) for at most IDLE_TIMEOUT_S, after which the last SETTLE_HALF_S's power is recorded as not
#: settled. An H100 whose last process had just ended 5 s of bf16 matmuls drew 131 W for a second
#: and 115 W the next, then 74 W: this settled after 3.9 s at 73.9 W, where halves of 0.5 s stopped on
#: the plateau at 1.2 s and 130.6 W (docs/results/h100_2026-11-27_energy_counter/).
SETTLE_HALF_S, SETTLE_TOLERANCE, IDLE_TIMEOUT_S, IDLE_POLL_S = 1.0, 0.01, 10.0, 0.002
#: An update of the counter as the poll saw it: (host seconds, mJ).
Update = tuple[float, float]


def joules(start_mj: float | None, end_mj: float | None) -> float | None:
    """The energy between two readings of the counter, J; None where one is missing, or where the
    counter went back (the driver reloaded in between)."""
    if start_mj is None or end_mj is None or end_mj < start_mj:
        return None
    return (end_mj - start_mj) / 1e3


def _power_w(start: Update, end: Update) -> float | None:
    """The board's mean power between two updates: between two of its own updates the counter's
    difference is the energy of exactly that span (each seen at most a poll late)."""
    energy = joules(start[1], end[1])
    return energy / (end[0] - start[0]) if energy is not None and end[0] > start[0] else None


def _back(updates: Sequence[Update], end: int, seconds: float) -> int | None:
    """The latest update at least `seconds` before updates[end]; None where none is."""
    return next((i for i in range(end - 1, -1, -1) if updates[end][0] - updates[i][0] >= seconds), None)


def settled_power_w(
    updates: Sequence[Update], half_s: float = SETTLE_HALF_S, tolerance: float = SETTLE_TOLERANCE
) -> float | None:
    """The power over the last `half_s` of these updates where it lies within `tolerance` of the
    power over the `half_s` before it; None before that (too few updates, or still changing)."""
    mid = _back(updates, len(updates) - 1, half_s) if updates else None
    start = None if mid is None else _back(updates, mid, half_s)
    if start is None:
        return None
    before, last = _power_w(updates[start], updates[mid]), _power_w(updates[mid], updates[-1])
    if before is None or last is None or abs(last - before) > tolerance * last:
        return None
    return last


def update_period_s(updates: Sequence[Update]) -> float | None:
    """The counter's update period as the poll saw it: the median time between its updates."""
    gaps = [b[0] - a[0] for a, b in zip(updates, updates[1:])]
    return statistics.median(gaps) if gaps else None


@dataclass(frozen=True)
class Idle:
    """The board's idle power (W), whether it had settled (None where no two updates were read),
    and the counter's update period (s)."""

    watts: float | None
    settled: bool | None
    update_s: float | None


def read_idle(
    read_mj: Callable[[], float | None],
    *,
    timeout_s: float = IDLE_TIMEOUT_S,
    poll_s: float = IDLE_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> Idle:
    """Poll the counter until its power has settled (`settled_power_w`), for at most `timeout_s`:
    then the power over the last SETTLE_HALF_S, not settled. Not NVML's power reading: on Ampere and
    newer GPUs that is a trailing average over 1 s, which still holds the second before (the process
    before, a cold compile's). Watts None where a read failed or the counter did not update twice."""
    deadline = clock() + timeout_s
    last = read_mj()
    updates: list[Update] = []
    while last is not None and clock() < deadline:
        sleep(poll_s)
        value, now = read_mj(), clock()
        if value is not None and value != last:
            updates.append((now, value))
            watts = settled_power_w(updates)
            if watts is not None:
                return Idle(watts, True, update_period_s(updates))
        last = value
    if last is None or len(updates) < 2:
        return Idle(None, None, update_period_s(updates))
    start = _back(updates, len(updates) - 1, SETTLE_HALF_S) or 0
    return Idle(_power_w(updates[start], updates[-1]), False, update_period_s(updates))


#: The shortest median block (s) whose energy is a side's: the counter moves in steps of one update.
#: On the H100 (docs/gpu-results.md) it moved every ~100 ms, ~67 J at a time: GPT-2's 0.14 s compiled
#: blocks of the default `measure.block_seconds` (0.1) got one update or two, phase-locked to the
#: blocks' rhythm, and the sides' J/step came out 0.8x and 1.1x of what their power allows. Half a
#: second spans 5 updates; docs/measurement.md advises `measure.block_seconds=1` for energy per side.
ENERGY_MIN_BLOCK_S = 0.5


@dataclass(frozen=True)
class Block:
    """A paired cell's block: its side, its steps, the energy from the block before's end to its own,
    J (None where a reading failed), and the seconds between those two readings."""

    side: str
    steps: int
    joules: float | None
    seconds: float


def long_enough(blocks: Sequence[Block]) -> bool:
    """Whether the blocks are long enough for the counter to tell their energies apart: the median
    block spans ENERGY_MIN_BLOCK_S (a paired cell's last warm-up step, a block of its own, aside)."""
    measured = [block.seconds for block in blocks[1:]]
    return bool(measured) and statistics.median(measured) >= ENERGY_MIN_BLOCK_S


@dataclass(frozen=True)
class Step:
    """What the arithmetic needs of one step row (steps.parquet): its phase, its side and its time
    (ms; for the blocks' edges)."""

    phase: str
    side: str | None
    ms: float | None = None


def window_start(phases: Sequence[str]) -> int:
    """Where the measured window begins among a loop's steps in order: at the last warm-up step
    before the first measured one (the pause before measuring comes before that step; the last step
    where none was measured), at the first measured step where no warm-up step precedes it."""
    first = next((i for i, phase in enumerate(phases) if phase == "measure"), len(phases))
    return first - 1 if first > 0 and phases[first - 1] == "warmup" else first


def attribute(blocks: Sequence[Block], window: Sequence[Step]) -> list[float | None]:
    """Each window step's energy, J: each block's split evenly over its steps, the blocks covering the
    window from its first step in order; None for steps no block covers (a paired cell that went on
    unpaired), and for every step where a block's steps are not all of its side: no energy is put on
    the wrong side."""
    energies: list[float | None] = [None] * len(window)
    at = 0
    for block in blocks:
        covered = window[at : at + block.steps]
        if len(covered) < block.steps or any(step.side != block.side for step in covered):
            return [None] * len(window)
        if block.joules is not None:
            energies[at : at + block.steps] = [block.joules / block.steps] * block.steps
        at += block.steps
    return energies


def edge_share(blocks: Sequence[Block], window: Sequence[Step]) -> float | None:
    """The share of the compiled blocks' seconds that lies between their steps (the bookkeeping
    before each block: the synchronize, the reading, the stop rule), whose energy the block is
    charged with whatever its side: each measured compiled block's seconds less its steps' times,
    over their seconds (the last warm-up step's block, the first, aside). Where the board draws no
    more between blocks than in them, the paired energy ratio lies toward 1 by at most this share of
    (ratio - 1) (docs/measurement.md "Energy"). None without blocks or step times."""
    at, between, seconds = 0, 0.0, 0.0
    for i, block in enumerate(blocks):
        covered, at = window[at : at + block.steps], at + block.steps
        if i == 0 or block.side == EAGER_SIDE:
            continue
        times = [step.ms for step in covered]
        if len(covered) < block.steps or None in times:
            return None
        between += max(0.0, block.seconds - sum(times) / 1e3)
        seconds += block.seconds
    return between / seconds if seconds > 0 else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


@dataclass(frozen=True)
class Readings:
    """A cell's readings, summed over its ranks where it has several: the windows' energies (J), the
    measured window's wall seconds, a paired cell's blocks."""

    warmup_j: float | None
    window_j: float | None
    window_s: float | None
    blocks: Sequence[Block] = ()


#: The run columns `energy_columns` gives.
ENERGY_COLUMNS = (
    "energy_window_steps",
    "joules_per_step",
    "eager_joules_per_step",
    "items_per_joule",
    "avg_power_w",
    "compile_energy_j",
    "energy_edge_share",
)


def energy_columns(
    readings: Readings,
    steps: Sequence[Step],
    items_per_step: int | None,
    compiles: bool,
    steps_per_row: int = 1,
) -> tuple[dict[str, Any], list[float | None]]:
    """The run row's energy columns from the cell's readings and its steps in order (the merged rows
    of all ranks): the window's steps, J per step of the cell's own side (a paired cell's compiled
    one, as its summary: workloads/cell/recorder.py) and of a paired cell's eager side, items per J,
    the mean power, and where the cell `compiles`, the warm-up window's excess over its steps at the
    measured J per step (never below 0); and each step's energy for steps.parquet, where a block
    measured it (measured steps of a paired cell; None elsewhere). Null where a reading is missing.
    A row that stands for `steps_per_row` steps (a GEMM cell's row: the mean GEMM of a CUDA-graph
    replay of several, workloads/gemm/timing.py) ran that many in the window: J per step is the
    row's share of each."""
    start = window_start([step.phase for step in steps])
    window, before = steps[start:], steps[:start]
    none: list[float | None] = [None] * len(steps)
    if readings.window_j is None:
        return dict.fromkeys(ENERGY_COLUMNS), none
    # Without blocks, every step of the window is the cell's own: the window's mean is each one's.
    # Blocks too short for the counter give no side its energy: the window mixes both sides.
    if readings.blocks:
        energies = (
            attribute(readings.blocks, window) if long_enough(readings.blocks) else [None] * len(window)
        )
    else:
        energies = [readings.window_j / len(window)] * len(window) if window else []
    measured = [
        (e, step.side) for e, step in zip(energies, window) if step.phase == "measure" and e is not None
    ]
    own = _mean([e for e, side in measured if side != EAGER_SIDE])
    eager = _mean([e for e, side in measured if side == EAGER_SIDE])
    compile_j = None
    if compiles and readings.warmup_j is not None:
        at_step = [eager if step.side == EAGER_SIDE else own for step in before]
        if None not in at_step:
            compile_j = max(0.0, readings.warmup_j - sum(at_step))
    seconds = readings.window_s
    own, eager = (None if j is None else j / steps_per_row for j in (own, eager))
    columns = {
        "energy_window_steps": len(window),
        "joules_per_step": own,
        "eager_joules_per_step": eager,
        "items_per_joule": items_per_step / own if items_per_step and own else None,
        "avg_power_w": readings.window_j / seconds if seconds else None,
        "compile_energy_j": compile_j,
        "energy_edge_share": edge_share(readings.blocks, window) if readings.blocks else None,
    }
    step_energies = none[:start] + [
        e if readings.blocks and step.phase == "measure" else None for e, step in zip(energies, window)
    ]
    return columns, step_energies
