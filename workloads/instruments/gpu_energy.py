"""The energy a CUDA cell's GPU takes (docs/measurement.md "Energy"): NVML's total-energy counter of
the board (workloads/instruments/nvml.py), read with the device synchronised at the ends of the
cell's windows; the arithmetic is workloads/instruments/energy.py. At each moment:

    before_build      the board's idle power once it settled (nothing of the cell runs on it yet),
                      and the counter's update period
    before_loop       the warm-up window opens: the cell is built, its first step comes next
    before_measuring  it closes and the measured window opens: before the last warm-up step, after
                      the waits for quiet and the host's probe (the order: workloads/kinds.py)
    after_block       a paired cell's block has ended: the energy since the block before is its own
    after_loop        the measured window closes: this rank's energies, idle power and the window's
                      seconds; the recorder sums the energies over the ranks (SUMMED_OVER_RANKS)
    after_summary     from the merged steps: the window's steps, J per step of each side, compile
                      energy, and each measured step of a paired block its share (steps' energy_j)

The board, not the host: its CPU and memory are in no column. A reading that fails, a GPU without
the counter, a machine without NVML leave the columns null; nothing here fails the attempt.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks, rank_device
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import synchronize
from workloads.instruments.base import Instrument
from workloads.instruments.energy import Block, Idle, Readings, Step, energy_columns, joules, read_idle
from workloads.instruments.environment import resolve_device
from workloads.instruments.nvml import EnergyCounter


class GpuEnergy(Instrument):
    """The counter of this rank's GPU around the cell's windows; its columns (ENERGY_FIELDS)."""

    @classmethod
    def for_cell(cls, cfg: CellConfig, ranks: Ranks, steps_per_row: int = 1) -> Instrument:
        """This instrument on this rank's GPU for a CUDA cell; else a no-op (a CPU cell has no board).
        `steps_per_row`: the steps one step row ran (workloads/instruments/energy.py)."""
        device = rank_device(ranks, resolve_device(cfg.device))
        return cls(device, steps_per_row) if device.type == "cuda" else Instrument()

    def __init__(self, device: torch.device, steps_per_row: int = 1) -> None:
        self._device, self._steps_per_row = device, steps_per_row
        self._counter: EnergyCounter | None = None
        self._idle = Idle(None, None, None)
        self._built_mj: int | None = None
        self._opened: tuple[float, int | None] | None = None
        """(host clock, counter) where the measured window opened; None before."""
        self._block_ends: list[tuple[str, int, int | None, float]] = []
        """(side, steps, counter at its end, host clock then) of each paired block in the window."""

    def before_build(self) -> None:
        self._counter = EnergyCounter.open(self._device)
        if self._counter is not None:
            self._idle = read_idle(self._counter.read_mj)

    def before_loop(self, cell: Any) -> None:
        self._built_mj = self._read()

    def before_measuring(self) -> None:
        if self._counter is not None:
            mj = self._read()  # the queue drained first: the window's clock starts at the reading
            self._opened = (time.perf_counter(), mj)

    def after_block(self, side: str, steps: int) -> None:
        if self._opened is not None:
            self._block_ends.append((side, steps, self._read(), time.perf_counter()))

    def after_loop(self) -> dict[str, Any]:
        if self._counter is None:
            return {}
        columns: dict[str, Any] = {
            "idle_power_w": self._idle.watts,
            "idle_settled": self._idle.settled,
            "energy_update_s": self._idle.update_s,
        }
        if self._opened is not None:
            mj, closed = self._read(), time.perf_counter()
            opened, start_mj = self._opened
            columns.update(
                energy_j=joules(start_mj, mj),
                energy_window_s=closed - opened,
                warmup_energy_j=joules(self._built_mj, start_mj),
            )
        self._counter.close()
        return columns

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        if self._opened is None:
            return {}
        rows = sorted(rec.steps, key=lambda row: row["step"])
        readings = Readings(
            warmup_j=rec.run.get("warmup_energy_j"),  # summed over the ranks by the recorder
            window_j=rec.run.get("energy_j"),
            window_s=rec.run.get("energy_window_s"),
            blocks=self._blocks(),
        )
        columns, energies = energy_columns(
            readings,
            [Step(row["phase"], row["side"], row["step_time_ms"]) for row in rows],
            rec.items_per_step,
            compiles=rec.run.get("compile_time_s") is not None,  # compile energy where compile time
            steps_per_row=self._steps_per_row,
        )
        for row, energy in zip(rows, energies):
            row["energy_j"] = energy
        return columns

    def _read(self) -> int | None:
        """The counter once the device has done its queued work; None without a counter."""
        if self._counter is None:
            return None
        try:
            synchronize(self._device)
        except Exception:  # noqa: BLE001 - a sticky CUDA error after a failure: the failure stands
            return None
        return self._counter.read_mj()

    def _blocks(self) -> list[Block]:
        """Each block's energy: from the block before's end (the window's opening, for the first)."""
        assert self._opened is not None
        blocks, (previous_s, previous) = [], self._opened
        for side, steps, mj, at_s in self._block_ends:
            blocks.append(Block(side, steps, joules(previous, mj), at_s - previous_s))
            previous, previous_s = mj, at_s
        return blocks
