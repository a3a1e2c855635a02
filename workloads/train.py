"""The training step and the measured loop around it.

One optimizer step = `grad_accum` micro-steps of (next batch, forward under autocast,
backward), then optional clipping, the optimizer step and zero_grad — nanoGPT's loop. The
measured loop marks every step boundary on the device (CUDA events; on the CPU, whose ops
are synchronous, the host clock), so a step's time is the time its work took on the device,
and it times the host's waits for batches separately.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from workloads.precision import Precision

Batch = tuple[torch.Tensor, torch.Tensor]
LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class StepRecord:
    step: int
    phase: str
    step_time_ms: float
    data_time_ms: float
    loss: float


class TrainStep:
    """A callable that runs one optimizer step and returns (mean loss tensor, seconds waiting for data)."""

    def __init__(self, module: nn.Module, loss_fn: LossFn, optimizer: torch.optim.Optimizer,
                 batches: Iterator[Batch], precision: Precision, device: torch.device,
                 grad_accum: int, grad_clip: float, marks_cudagraph_steps: bool,
                 optimizer_step: Callable[[], None] | None = None, ddp: DistributedDataParallel | None = None):
        self.module = module
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.optimizer_step = optimizer_step or optimizer.step
        self.batches = batches
        self.precision = precision
        self.device = device
        self.grad_accum = grad_accum
        self.grad_clip = grad_clip
        self.marks_cudagraph_steps = marks_cudagraph_steps
        self.ddp = ddp
        """The DDP wrapper inside `module` of a distributed cell, whose gradient sync is switched."""
        self.scaler = precision.make_scaler(device.type)
        self.params = [p for p in module.parameters() if p.requires_grad]
        # Under CUDA graph trees a backward's gradients are outputs in the graph pool. With
        # .grad set to None, autograd would adopt those buffers as .grad, and the next
        # micro-step's replay overwrites them (an error, or silently wrong accumulated
        # gradients: pytorch/pytorch#169545). Gradients that stay allocated are accumulated
        # into by copy instead.
        self.keep_grads = marks_cudagraph_steps
        if self.keep_grads:
            for p in self.params:
                p.grad = torch.zeros_like(p)

    def __call__(self) -> tuple[torch.Tensor, float]:
        data_s = 0.0
        loss_sum = torch.zeros((), device=self.device)
        for micro_step in range(self.grad_accum):
            if self.ddp is not None:
                # As nanoGPT: all-reduce the gradients in the last micro-step's backward only; the
                # flag is read in DDP's forward, which runs eagerly also around a compiled module.
                self.ddp.require_backward_grad_sync = micro_step == self.grad_accum - 1
            t0 = time.perf_counter()
            x, y = next(self.batches)
            data_s += time.perf_counter() - t0
            if self.marks_cudagraph_steps:
                torch.compiler.cudagraph_mark_step_begin()
            with self.precision.autocast(self.device.type):
                loss = self.loss_fn(self.module, x, y)
            # Copy out before the next replay: CUDA-graph outputs live in reused buffers.
            loss_sum += loss.detach()
            scaled = loss / self.grad_accum
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        if self.scaler:
            if self.grad_clip > 0:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            if self.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            self.optimizer_step()
        self.optimizer.zero_grad(set_to_none=not self.keep_grads)
        return loss_sum / self.grad_accum, data_s


def synchronize(device: torch.device) -> None:
    """Wait for all queued device work; a no-op on the CPU, whose ops run synchronously."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_steps(step: Callable[[], tuple[torch.Tensor, float]], warmup_steps: int, steps: int,
              device: torch.device, on_step: Callable[[StepRecord], None]) -> None:
    """Run warm-up then measured steps, reporting each through `on_step` once it has ended on
    the device, so that a failure later in the run keeps the steps already measured."""
    if device.type == "cuda":
        _run_steps_cuda(step, warmup_steps, steps, on_step)
        return
    for i in range(warmup_steps + steps):  # CPU ops complete before they return: a host clock suffices
        t0 = time.perf_counter()
        loss, data_s = step()
        elapsed = time.perf_counter() - t0
        on_step(StepRecord(i, _phase(i, warmup_steps), elapsed * 1e3, data_s * 1e3, loss.item()))


#: How many queued steps the host may run ahead of the device while measuring (see below).
HOST_LEAD_STEPS = 3


def _phase(i: int, warmup_steps: int) -> str:
    return "warmup" if i < warmup_steps else "measure"


def _run_steps_cuda(step: Callable[[], tuple[torch.Tensor, float]], warmup_steps: int, steps: int,
                    on_step: Callable[[StepRecord], None]) -> None:
    """Step boundaries are CUDA events recorded in the stream; a step's time is the device
    time between its two boundary events (GPU idle time waiting for the host included).

    Waiting for each step to finish before launching the next would leave the GPU idle while
    the host launches the next step's first kernels (measured: +6 to +13% per step on an H100
    for CUDA-graph and inductor cells; with the host one step ahead still +2 to +3%, host
    jitter then stalls the GPU). So the host runs HOST_LEAD_STEPS steps ahead: it waits for
    the end event of step i only after queueing step i+HOST_LEAD_STEPS, and the loss reaches
    the host through a pinned buffer copied in stream order, never through a synchronising
    `.item()`.
    """
    total = warmup_steps + steps
    losses = torch.empty(total, dtype=torch.float32, pin_memory=True)
    pending: deque[tuple[int, torch.cuda.Event, torch.cuda.Event, float]] = deque()

    def report(i: int, start: torch.cuda.Event, end: torch.cuda.Event, data_s: float) -> None:
        end.synchronize()
        on_step(StepRecord(i, _phase(i, warmup_steps), start.elapsed_time(end), data_s * 1e3,
                           losses[i].item()))

    torch.cuda.synchronize()
    previous = torch.cuda.Event(enable_timing=True)
    previous.record()
    try:
        for i in range(total):
            loss, data_s = step()
            losses[i].copy_(loss.detach().float(), non_blocking=True)
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            pending.append((i, previous, end, data_s))
            previous = end
            if len(pending) > HOST_LEAD_STEPS:
                report(*pending.popleft())
    except BaseException:
        # Keep the steps that did finish; a sticky CUDA error fails this too: re-raise the first.
        with contextlib.suppress(Exception):
            while pending:
                report(*pending.popleft())
        raise
    while pending:
        report(*pending.popleft())
