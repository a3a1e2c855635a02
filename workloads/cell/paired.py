"""Paired measurement: a compiled cell times its own eager baseline in the same process.

Eager and compiled cells run in different processes, on a host whose speed varies from one to the
next: a launch-bound cell's speedup moved between 0.96x and 1.45x across rounds (docs/measurement.md
"Paired measurement"). As PyTorch's own harness (benchmarks/dynamo/common.py), a paired cell
alternates blocks of compiled steps and of steps under `torch.compiler.set_stance("force_eager")` —
the same module, optimizer and batches, no second copy of the weights — in pairs whose order is
balanced (`pair_sides`). A block's value is its median step; a pair's ratio is the eager block's
over the compiled one's, and the stop rule (stop_rule.StopRule) runs on the pairs' ratios. Each
side's peak device memory is its own (`SidePeaks`).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import random
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from workloads.cell.backends import CompiledRun
from workloads.cell.config import CellConfig, MeasureConfig
from workloads.cell.step_timer import BlockTimes, Step, step_timer
from workloads.cell.stop_rule import StopRule
from workloads.cell.train import PreparedCell, StepRecord, run_steps
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPILED_SIDE, EAGER_SIDE


def unpaired_reason(cfg: CellConfig, compiled: CompiledRun, world_size: int) -> str | None:
    """Why this cell cannot measure paired (run.parquet `paired_fallback`), None where it can."""
    if cfg.backend.name == BASELINE_BACKEND:
        return "the eager cell is the baseline itself"
    if not compiled.uses_dynamo:
        return f"backend {cfg.backend.name} is not compiled by dynamo: no force_eager stance"
    if world_size > 1:
        return f"distributed cell ({world_size} processes): ranks would have to agree on every block"
    if not cfg.measure.paired:
        return "measure.paired is false"
    return None


def pair_sides(seed: int, replicate: int) -> Iterator[tuple[str, str]]:
    """The sides of each pair in the order they run: in every two pairs the compiled side runs first
    once (ABBA or BAAB, drawn for each two), so that an effect of going first or second cancels in
    the ratios, and the draws depend on the cell's seed and its replicate, so that replicates do not
    repeat one sequence. Python's generator seeded by a string is the same in every process."""
    draws = random.Random(f"pair order {seed} {replicate}")
    while True:
        first = (COMPILED_SIDE, EAGER_SIDE) if draws.random() < 0.5 else (EAGER_SIDE, COMPILED_SIDE)
        yield first
        yield first[::-1]


class SidePeaks:
    """The peak device memory of each side of a paired cell (CUDA; None elsewhere), bytes.

    The caching allocator's counter (torch.cuda.max_memory_allocated) was reset once the cell was
    built (workloads/train_cell.py `prepare_cell`), and the compiled side runs first: until the first
    switch the peak is the compiled side's, compile and warm-up included. At each switch the peak so
    far is the side's that ran (the largest over its blocks), and the counter restarts at the memory
    allocated then: weights, gradients and optimizer state, which either side's peak holds as an
    unpaired cell's does."""

    def __init__(self, device: torch.device):
        self.device = device
        self.running: str = COMPILED_SIDE
        self.peaks: dict[str, int] = {}

    def switch(self, side: str) -> None:
        """`side` runs from now on."""
        if side != self.running and self.device.type == "cuda":
            self.peaks[self.running] = self.peak(self.running)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.running = side

    def peak(self, side: str) -> int | None:
        """The largest memory allocated while `side` ran so far; None off CUDA or before it ran."""
        if self.device.type != "cuda":
            return None
        now = torch.cuda.max_memory_allocated(self.device) if side == self.running else None
        return max((v for v in (self.peaks.get(side), now) if v is not None), default=None)


@dataclass(frozen=True)
class PeakMemory:
    """A loop's peak device memory, bytes (None off CUDA): of the cell's own steps, compile and
    warm-up included (a paired cell's compiled side), and of a paired cell's eager side."""

    own: int | None
    eager: int | None = None


@dataclass
class PairedOutcome:
    """How the measured loop ended: why it stopped, and why it went on unpaired (None: it did not)."""

    stop_reason: str
    fallback: str | None = None


class _EagerOutOfMemory(Exception):
    """The eager side ran out of memory where the compiled one fits."""


@dataclass(frozen=True)
class LoopHooks:
    """What either loop runs and tells: the step, its device, each step's record, the pause before
    measuring (called once), and the end of each block after it (`after_block(side, steps)`, the
    paired loop's: its last warm-up step's, then each measured block's, called once the block has
    ended on the device and before its steps are reported)."""

    step: Step
    device: torch.device
    on_step: Callable[[StepRecord], None]
    before_measuring: Callable[[], object]
    after_block: Callable[[str, int], object]


class UnpairedLoop:
    """The ordinary loop (train.run_steps) of a cell that cannot measure paired: `fallback` says why."""

    def __init__(self, hooks: LoopHooks, *, gather: Callable[[Any], list[Any]] | None, fallback: str):
        self.hooks, self.gather, self.fallback = hooks, gather, fallback

    def peak_memory(self) -> PeakMemory:
        device = self.hooks.device
        return PeakMemory(torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None)

    def run(self, *, warmup_steps: int, steps: int, measure: MeasureConfig) -> PairedOutcome:
        return PairedOutcome(
            run_steps(
                self.hooks.step,
                warmup_steps,
                steps,
                self.hooks.device,
                self.hooks.on_step,
                measure,
                self.gather,
                before_measuring=self.hooks.before_measuring,
            ),
            fallback=self.fallback,
        )


def measuring_loop(
    cfg: CellConfig,
    cell: PreparedCell,
    world_size: int,
    *,
    replicate: int,
    on_step: Callable[[StepRecord], None],
    before_measuring: Callable[[], object],
    after_block: Callable[[str, int], object],
    gather: Callable[[Any], list[Any]] | None,
) -> PairedLoop | UnpairedLoop:
    """The measured loop of replicate `replicate` of the cell, chosen once: paired where it can be
    (`unpaired_reason`)."""
    hooks = LoopHooks(cell.step, cell.device, on_step, before_measuring, after_block)
    reason = unpaired_reason(cfg, cell.compiled, world_size)
    if reason is not None:
        return UnpairedLoop(hooks, gather=gather, fallback=reason)
    return PairedLoop(hooks, seed=cfg.seed, replicate=replicate)


class PairedLoop:
    """Compiled warm-up steps, one unmeasured eager block, then pairs of blocks until the rule stops.

    K steps per block = max(block_steps, ceil(block_seconds / the last warm-up step)); at least
    max(min_pairs, ceil(steps / K)) pairs; `max_steps` caps the compiled side's measured steps.
    Every step is reported through `on_step` as its block ends, with its `side` and `pair`. The
    pairs' order is `pair_sides(seed, replicate)`."""

    def __init__(self, hooks: LoopHooks, *, seed: int, replicate: int):
        self.step, self.on_step, self.before_measuring = hooks.step, hooks.on_step, hooks.before_measuring
        self.after_block = hooks.after_block
        self.device = hooks.device
        # CUDA events at each step boundary, one synchronize at a block's end: the host runs ahead of
        # the device inside the block. The first step carries the launch latency after the previous
        # block's sync; a block's median is robust to it, and both sides get it alike.
        self.timer = step_timer(self.device)
        self.order = pair_sides(seed, replicate)
        self.memory = SidePeaks(self.device)
        self.index = 0
        """The next step's number."""
        self.paused = False
        """Whether `before_measuring` was called: once per loop, also where it goes on unpaired."""
        self.fallback: str | None = None
        """Why the loop does not measure paired: it does (an eager-side OOM is told by `run`)."""

    def run(self, *, warmup_steps: int, steps: int, measure: MeasureConfig) -> PairedOutcome:
        try:
            return PairedOutcome(self._paired(warmup_steps, steps, measure))
        except _EagerOutOfMemory as error:
            fallback = str(error)
        # Out of the except clause: the error's chain, whose frames hold the failed eager step's
        # tensors, is let go before the compiled steps go on (and before their peak restarts).
        return PairedOutcome(self._unpaired(steps, measure), fallback=fallback)

    def _paired(self, warmup_steps: int, steps: int, measure: MeasureConfig) -> str:
        last_ms = 0.0
        for _ in range(warmup_steps):  # one step a block: a failure keeps the steps before it
            (last,) = self._report(self._block(COMPILED_SIDE, 1), "warmup", COMPILED_SIDE, None)
            last_ms = last.step_ms
        k = max(measure.block_steps, math.ceil(measure.block_seconds * 1e3 / last_ms) if last_ms > 0 else 1)
        self._report(self._block(EAGER_SIDE, k - 1), "warmup", EAGER_SIDE, None)
        self._before_measuring()  # before the last warm-up step, as in the unpaired loop
        self._report(self._ended(EAGER_SIDE, self._block(EAGER_SIDE, 1)), "warmup", EAGER_SIDE, None)
        cap = math.ceil(measure.max_steps / k) if measure.max_steps is not None else None
        fewest = max(measure.min_pairs, math.ceil(steps / k))
        rule = StopRule(fewest, dataclasses.replace(measure, max_steps=cap))
        pair = 0
        while True:
            medians, seconds = {}, 0.0
            for side in next(self.order):
                times = self._block(side, k)
                self._report(self._ended(side, times), "measure", side, pair)
                medians[side] = statistics.median(one.step_ms for one in times)
                seconds += sum(one.step_ms for one in times) / 1e3
            reason = rule.add(seconds, medians[EAGER_SIDE] / medians[COMPILED_SIDE])
            if reason is not None:
                return reason
            pair += 1

    def peak_memory(self) -> PeakMemory:
        return PeakMemory(self.memory.peak(COMPILED_SIDE), self.memory.peak(EAGER_SIDE))

    def _block(self, side: str, k: int) -> BlockTimes:
        """A block of `k` steps of `side`."""
        self.memory.switch(side)
        if side == COMPILED_SIDE:
            return self.timer.block(self.step, k)
        try:
            with torch.compiler.set_stance("force_eager"):
                return self.timer.block(self.step, k)
        except torch.OutOfMemoryError as error:
            raise _EagerOutOfMemory(
                f"the eager side ran out of memory ({str(error).splitlines()[0]}); measured unpaired"
            ) from None

    def _unpaired(self, steps: int, measure: MeasureConfig) -> str:
        """The ordinary loop, after one more compiled warm-up step, its steps numbered on from ours."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.memory.switch(COMPILED_SIDE)  # the eager side's failed block is none of the compiled side's
        offset = self.index

        def on_step(record: StepRecord) -> None:
            self.on_step(dataclasses.replace(record, step=record.step + offset))

        pause = None if self.paused else self._before_measuring
        return run_steps(self.step, 1, steps, self.device, on_step, measure, before_measuring=pause)

    def _before_measuring(self) -> None:
        self.paused = True
        self.before_measuring()

    def _ended(self, side: str, times: BlockTimes) -> BlockTimes:
        """Tell `after_block` that a block of `side` has ended (its steps are reported after)."""
        self.after_block(side, len(times))
        return times

    def _report(self, times: BlockTimes, phase: str, side: str, pair: int | None) -> BlockTimes:
        for one in times:
            self.on_step(
                StepRecord(self.index, phase, one.step_ms, one.data_ms, one.loss, side, pair, one.host_ms)
            )
            self.index += 1
        return times
