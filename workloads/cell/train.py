"""The training step and the measured loop around it.

One optimizer step = `grad_accum` micro-steps of (next batch, forward under autocast,
backward), then optional clipping, the optimizer step and zero_grad — nanoGPT's loop. The
measured loop marks every step boundary on the device (workloads/cell/step_timer.py: CUDA
events; on the CPU, whose ops are synchronous, the host clock), so a step's time is the time its
work took on the device, and it times the host's waits for batches separately.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from workloads.cell.backends import CompiledRun
from workloads.cell.config import MeasureConfig
from workloads.cell.precision import Precision
from workloads.cell.step_timer import Step, StepTimer, Timed, step_timer
from workloads.cell.stop_rule import Stopping

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
#: (inputs, targets) of one step, as every data source and custom model gives them.
Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class StepRecord:
    step: int
    phase: str
    step_time_ms: float
    data_time_ms: float
    loss: float
    side: str | None = None
    """A paired cell's `compiled` or `eager` step (workloads/cell/paired.py); None unpaired."""
    pair: int | None = None
    """The pair of blocks a paired cell's measured step belongs to."""
    host_time_ms: float | None = None
    """The host's time from calling the step to its return (workloads/cell/step_timer.py)."""


def _synced_alone(sync: bool) -> None:
    """The gradient sync switch of a process of its own: nothing to switch."""


@dataclass
class TrainedModel:
    """What a step trains: the module (compiled or not), its loss and where it runs."""

    module: nn.Module
    loss_fn: LossFn
    device: torch.device
    marks_cudagraph_steps: bool = False
    """Mark each forward as a new CUDA-graph step (backends.CompiledRun)."""
    sync_gradients: Callable[[bool], None] = _synced_alone
    """Switches DDP's gradient all-reduce for the next backward (distributed.DataParallel)."""


@dataclass
class OptimizerUpdate:
    """How the accumulated gradients update the parameters: clipped, then `step` (the optimizer's
    own, or its compiled one: backends.compile_optimizer_step)."""

    optimizer: torch.optim.Optimizer
    step: Callable[[], None]
    grad_clip: float = 0.0


class TrainStep:
    """A callable that runs one optimizer step and returns (mean loss tensor, seconds waiting for data):
    a `step_timer.Step`."""

    def __init__(
        self,
        *,
        model: TrainedModel,
        update: OptimizerUpdate,
        batches: Iterator[Batch],
        precision: Precision,
        grad_accum: int = 1,
    ):
        self.model, self.update, self.batches = model, update, batches
        self.precision, self.grad_accum = precision, grad_accum
        self.scaler = precision.make_scaler(model.device.type)
        # fp16's scaler steps the optimizer itself, skipping a step whose gradients overflowed (config
        # refuses fp16 with a compiled optimizer step); else the update's own step.
        self.optimizer_step = (
            functools.partial(self.scaler.step, update.optimizer) if self.scaler.is_enabled() else update.step
        )
        self.params = [p for p in model.module.parameters() if p.requires_grad]
        # Under CUDA graph trees a backward's gradients are outputs in the graph pool. With
        # .grad set to None, autograd would adopt those buffers as .grad, and the next
        # micro-step's replay overwrites them (an error, or silently wrong accumulated
        # gradients: pytorch/pytorch#169545). Gradients that stay allocated are accumulated
        # into by copy instead.
        self.keep_grads = model.marks_cudagraph_steps
        if self.keep_grads:
            for p in self.params:
                p.grad = torch.zeros_like(p)

    def __call__(self) -> tuple[torch.Tensor, float]:
        model, update = self.model, self.update
        data_s = 0.0
        loss_sum = torch.zeros((), device=model.device)
        for micro_step in range(self.grad_accum):
            # As nanoGPT: all-reduce the gradients in the last micro-step's backward only; the
            # flag is read in DDP's forward, which runs eagerly also around a compiled module.
            model.sync_gradients(micro_step == self.grad_accum - 1)
            t0 = time.perf_counter()
            x, y = next(self.batches)
            data_s += time.perf_counter() - t0
            if model.marks_cudagraph_steps:
                torch.compiler.cudagraph_mark_step_begin()
            with self.precision.autocast(model.device.type):
                loss = model.loss_fn(model.module, x, y)
            # Copy out before the next replay: CUDA-graph outputs live in reused buffers.
            loss_sum += loss.detach()
            scaled = loss / self.grad_accum
            self.scaler.scale(scaled).backward()
        self.clip_gradients()
        self.optimizer_step()
        self.scaler.update()
        update.optimizer.zero_grad(set_to_none=not self.keep_grads)
        return loss_sum / self.grad_accum, data_s

    def clip_gradients(self) -> None:
        """Clip the accumulated gradients' global norm to the update's `grad_clip` (unscaled first); a
        step of its own so that the accuracy check can record the gradients as the backward made them."""
        if self.update.grad_clip > 0:
            self.scaler.unscale_(self.update.optimizer)
            torch.nn.utils.clip_grad_norm_(self.params, self.update.grad_clip)


@dataclass
class PreparedCell:
    """A cell ready to train: the step to call, where it runs, and how it was compiled."""

    step: TrainStep
    device: torch.device
    compiled: CompiledRun


def synchronize(device: torch.device) -> None:
    """Wait for all queued device work; a no-op on the CPU, whose ops run synchronously."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_steps(
    step: Step,
    warmup_steps: int,
    steps: int,
    device: torch.device,
    on_step: Callable[[StepRecord], None],
    measure: MeasureConfig | None = None,
    gather: Callable[[Any], list[Any]] | None = None,
    before_measuring: Callable[[], object] | None = None,
) -> str:
    """Run warm-up steps, then measured steps until `measure` says stop (`StopRule`; None: exactly
    `steps`), reporting each step through `on_step` once it has ended on the device, so that a
    failure later in the run keeps the steps already measured. `gather` (every rank's value, in
    rank order: `workloads.cell.distributed.gather` bound to the ranks) makes the ranks of a distributed
    cell agree on the count; None for one process. `before_measuring` is called once, before the
    last warm-up step (without warm-up, before the first step): it may wait
    (workloads.local.turns.wait_for_quiet), and one more step then runs before anything is measured;
    the time it takes belongs to no step. Returns why measuring stopped (STOP_REASONS).

    Step boundaries follow one another: a step's time runs from the previous step's end to its own,
    so the measured steps' times add up to the measured span, the host's bookkeeping between steps
    and the device's idle time included."""
    if measure is None:
        measure = MeasureConfig(min_seconds=0.0, max_steps=steps, max_seconds=None)
    stopping = Stopping(warmup_steps, steps, measure, gather)
    pause = _Pause(before_measuring, max(0, warmup_steps - 1))
    _run_timed(step_timer(device, HOST_LEAD_STEPS), step, warmup_steps, stopping, on_step, pause)
    assert stopping.reason is not None
    return stopping.reason


@dataclass
class _Pause:
    """A call between two steps (`before` is the index of the step after it), None for none."""

    call: Callable[[], object] | None
    before: int

    def due(self, i: int) -> bool:
        """Call it if step `i` is the one it comes before; whether it was called."""
        if self.call is None or i != self.before:
            return False
        self.call()
        return True


#: How many queued steps the host may run ahead of the device while measuring on a GPU (see below).
HOST_LEAD_STEPS = 3


def _phase(i: int, warmup_steps: int) -> str:
    return "warmup" if i < warmup_steps else "measure"


def _run_timed(
    timer: StepTimer,
    step: Step,
    warmup_steps: int,
    stopping: Stopping,
    on_step: Callable[[StepRecord], None],
    pause: _Pause,
) -> None:
    """Queue steps, reporting each once it has ended on the device, `timer.lead` steps behind the
    last queued (on the CPU none: each is reported as it returns).

    Waiting for each step to finish before launching the next would leave the GPU idle while
    the host launches the next step's first kernels (measured: +6 to +13% per step on an H100
    for CUDA-graph and inductor cells; with the host one step ahead still +2 to +3%, host
    jitter then stalls the GPU). So the host runs HOST_LEAD_STEPS steps ahead: it waits for
    the end of step i only after queueing step i+HOST_LEAD_STEPS, and reads its loss without
    a synchronising `.item()` (step_timer.CudaTimer). The stop rule sees steps once reported; so
    that the steps in flight do not run past it (3 x 1.4 s for GPT-2), the host stops launching
    once they would meet it at the mean step so far (`Stopping.in_flight_suffice`). Steps launched
    past the rule are reported and kept.
    """
    pending: deque[tuple[int, Timed]] = deque()

    def report(i: int, timed: Timed) -> StepRecord:
        times = timer.read(timed)
        rec = StepRecord(
            i, _phase(i, warmup_steps), times.step_ms, times.data_ms, times.loss, host_time_ms=times.host_ms
        )
        on_step(rec)
        return rec

    timer.settle()
    timer.begin()
    launched = 0
    try:
        while True:
            if launched < stopping.limit and not stopping.in_flight_suffice(launched):
                if pause.due(launched):  # the next step starts after the pause, not before it
                    timer.begin()
                pending.append((launched, timer.queue(step)))
                launched += 1
                if len(pending) <= timer.lead:
                    continue
            if not pending:
                break
            rec = report(*pending.popleft())
            if rec.phase == "measure":
                stopping.measured(rec.step_time_ms, launched)
    except BaseException:
        # Keep the steps that did finish; a sticky CUDA error fails this too: re-raise the first.
        with contextlib.suppress(Exception):
            while pending:
                report(*pending.popleft())
        raise
