"""The one timer of a cell's steps, chosen once per device: `step_timer(device)`.

A step's time runs from one boundary mark to the next, marked on the device (CUDA events in the
stream; on the CPU, whose ops are synchronous, the host clock), so that it is the time the step's
work took on the device. Both measured loops time their steps with it: the unpaired loop reads each
step while later ones are queued (workloads/cell/train.py `run_steps`), the paired loop reads a
block of steps at its end (`StepTimer.block`, workloads/cell/paired.py).

It also takes the host's time from calling a step to its return: on a GPU the time to issue its
launches, which paces a launch-bound step (the host never waits for the device inside a step; a
step of a GPU-bound side that fills the queue of launches, about a thousand, waits for it to drain,
so there the host's time is an upper bound of its own).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

Step = Callable[[], tuple[torch.Tensor, float]]


class StepTimes(NamedTuple):
    """A step's time on the device, its wait for data and its host's time, ms; its loss."""

    step_ms: float
    data_ms: float
    loss: float
    host_ms: float


#: The times of each step of a block.
BlockTimes = list[StepTimes]


@dataclass
class Timed:
    """A step queued on the device: its boundary marks, its wait for data (s), its loss as kept, and
    the host's time from calling it to its return (s)."""

    start: Any
    end: Any
    data_s: float
    loss: Any
    host_s: float


class StepTimer(ABC):
    """Marks step boundaries on the device and reads a step's time and loss once it has ended.

    `begin` marks where the next step starts (at the start, and after a pause that is no step's
    time); `queue` runs one step and marks its end, which is the next step's start; `lead` is how
    many queued steps the host may run ahead of the one it reads."""

    lead = 0

    @abstractmethod
    def settle(self) -> None:
        """Wait for the device's queued work before the first mark."""

    @abstractmethod
    def begin(self, steps: int = 0) -> None:
        """The next step starts here; `steps` of a block follow."""

    @abstractmethod
    def queue(self, step: Step) -> Timed:
        """Run one step and mark its end on the device."""

    @abstractmethod
    def read(self, timed: Timed) -> StepTimes:
        """One step's times, once it has ended on the device (waits for it)."""

    @abstractmethod
    def read_block(self, timed: list[Timed]) -> BlockTimes:
        """The times of the steps queued since `begin`, once the last has ended (waits for it)."""

    def block(self, step: Step, k: int) -> BlockTimes:
        """Run `k` steps as one block, read at its end: inside it, the host runs ahead of the device."""
        self.begin(k)
        return self.read_block([self.queue(step) for _ in range(k)])


class HostTimer(StepTimer):
    """CPU ops complete before they return: the host clock is the device clock, and a step's loss
    is read as it returns (the host's bookkeeping after a step is the next step's time)."""

    def __init__(self) -> None:
        self.start = 0.0

    def settle(self) -> None:
        """Nothing is queued: each op ended before it returned."""

    def begin(self, steps: int = 0) -> None:
        self.start = time.perf_counter()

    def queue(self, step: Step) -> Timed:
        called = time.perf_counter()
        loss, data_s = step()
        end = time.perf_counter()
        timed = Timed(self.start, end, data_s, loss.item(), end - called)
        self.start = end
        return timed

    def read(self, timed: Timed) -> StepTimes:
        return StepTimes((timed.end - timed.start) * 1e3, timed.data_s * 1e3, timed.loss, timed.host_s * 1e3)

    def read_block(self, timed: list[Timed]) -> BlockTimes:
        return [self.read(one) for one in timed]


class CudaTimer(StepTimer):
    """Step boundaries are CUDA events recorded in the stream; a step's time is the device time
    between its two boundary events (GPU idle time waiting for the host included).

    With a `lead` (the unpaired loop), the loss reaches the host through a pinned buffer copied in
    stream order, never through a synchronising `.item()`, which would wait for the steps queued
    after it: a ring of loss slots, step i's reused by step i + lead + 2, queued only after step i
    was read. Without (a block), the losses are kept on the device and copied once, after the
    block's one synchronize; the block's marks are made before its first step."""

    def __init__(self, lead: int = 0) -> None:
        self.lead = lead
        self.losses = torch.empty(lead + 2, dtype=torch.float32, pin_memory=True) if lead else None
        self.queued = 0
        self.marks: deque[torch.cuda.Event] = deque()
        self.start: torch.cuda.Event | None = None

    def settle(self) -> None:
        torch.cuda.synchronize()

    def begin(self, steps: int = 0) -> None:
        self.marks = deque(torch.cuda.Event(enable_timing=True) for _ in range(steps + 1))
        self.start = self._mark()

    def _mark(self) -> torch.cuda.Event:
        mark = self.marks.popleft() if self.marks else torch.cuda.Event(enable_timing=True)
        mark.record()
        return mark

    def queue(self, step: Step) -> Timed:
        called = time.perf_counter()
        loss, data_s = step()
        host_s = time.perf_counter() - called
        if self.losses is not None:
            kept: Any = self.queued % len(self.losses)
            self.losses[kept].copy_(loss.detach().float(), non_blocking=True)
        else:
            kept = loss.detach().float()
        self.queued += 1
        timed = Timed(self.start, self._mark(), data_s, kept, host_s)
        self.start = timed.end
        return timed

    def read(self, timed: Timed) -> StepTimes:
        assert self.losses is not None, "a step is read alone with a lead (else: read_block)"
        timed.end.synchronize()
        step_ms = timed.start.elapsed_time(timed.end)
        return StepTimes(step_ms, timed.data_s * 1e3, self.losses[timed.loss].item(), timed.host_s * 1e3)

    def read_block(self, timed: list[Timed]) -> BlockTimes:
        self.start.synchronize()  # the last mark: the block's end (its start, for an empty block)
        values = torch.stack([one.loss for one in timed]).tolist() if timed else []
        return [
            StepTimes(one.start.elapsed_time(one.end), one.data_s * 1e3, value, one.host_s * 1e3)
            for one, value in zip(timed, values, strict=True)
        ]


def step_timer(device: torch.device, lead: int = 0) -> StepTimer:
    """The timer of steps on `device`; `lead`: queued steps the host may run ahead of the one it
    reads, on a GPU (the unpaired loop's HOST_LEAD_STEPS); 0 on the CPU, or for blocks."""
    return CudaTimer(lead) if device.type == "cuda" else HostTimer()
