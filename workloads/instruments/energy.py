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
at a boundary moves energy from one block to the next, whose side the pair's drawn order decides).
Tested on hand-made readings (tests/test_energy.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.contract.vocabulary import EAGER_SIDE

#: The longest the idle power is read (s), and how often the counter is polled meanwhile: a poll
#: costs microseconds, and an update is seen at most one poll late (0.5% of the window).
IDLE_BUDGET_S, IDLE_POLL_S = 0.5, 0.002


def joules(start_mj: float | None, end_mj: float | None) -> float | None:
    """The energy between two readings of the counter, J; None where one is missing, or where the
    counter went back (the driver reloaded in between)."""
    if start_mj is None or end_mj is None or end_mj < start_mj:
        return None
    return (end_mj - start_mj) / 1e3


def idle_power_w(
    read_mj: Callable[[], float | None],
    *,
    budget_s: float = IDLE_BUDGET_S,
    poll_s: float = IDLE_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> float | None:
    """The board's mean power, W, from polling its counter for `budget_s`: from the first update seen
    to the last. Between two of its own updates the counter's difference is the energy of exactly that
    span (each seen at most a poll late), where two reads at any times would each be up to an update
    (20-100 ms) stale. Not NVML's power reading: on Ampere and newer GPUs that is a trailing average
    over 1 s, which half a second later still holds the second before (a cold compile's process, the
    replicate before), and the windows are measured with the counter. None where the counter did not
    update twice, or a read failed."""
    deadline = clock() + budget_s
    last = read_mj()
    updates: list[tuple[float, float]] = []  # (time seen, mJ) of each update
    while last is not None and clock() < deadline:
        sleep(poll_s)
        value, now = read_mj(), clock()
        if value is not None and value != last:
            updates.append((now, value))
        last = value
    if last is None or len(updates) < 2:
        return None
    (t0, e0), (t1, e1) = updates[0], updates[-1]
    energy = joules(e0, e1)
    return energy / (t1 - t0) if energy is not None and t1 > t0 else None


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
    """What the arithmetic needs of one step row (steps.parquet): its phase and its side."""

    phase: str
    side: str | None


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
    }
    step_energies = none[:start] + [
        e if readings.blocks and step.phase == "measure" else None for e, step in zip(energies, window)
    ]
    return columns, step_energies
