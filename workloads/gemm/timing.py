"""How a GEMM cell times its GEMM: as steps of the training cells' measured loop
(workloads/cell/train.py `run_steps`, its CUDA events, its stop rule), each step G GEMMs.

On CUDA the first step runs the GEMM G times (compiling and autotuning a compiled one, letting
cuBLAS pick its kernel) and captures G more in a CUDA graph; every step after it replays that
graph. A replay launches G kernels with one call, so the step's CUDA-event time is G GEMMs with no
host launch gaps between them, which a 10 µs GEMM launched from Python would have. The step's
row records that time / G: milliseconds per GEMM. On the CPU (tests) a step calls the GEMM G times.
`gemm.timing=burst` times the same replays in bursts after idle pauses instead (workloads/gemm/bursts.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from workloads.cell.train import StepRecord
from workloads.gemm.kernels import Gemm

#: GEMMs per CUDA-graph replay (one step). One small GEMM (M = 16, N = K = 8192: ~19 µs in fp8 on
#: an H200) is near the CUDA events' resolution, and back-to-back replays leave ~10 µs between graphs
#: that the loop's step time counts: with 10 GEMMs a replay, fp8 M = 1 read 20.15 µs against 18.84 in
#: bursts at the same 1980 MHz (+7%), with 50 19.02 (+1%; H200, issue 40). 100 leave ~0.5%, while
#: the L2 cache (50 MiB) holds no 64 MiB fp8 weight from one GEMM to the next.
GEMMS_PER_REPLAY = 100


class GemmSteps:
    """The step of `run_steps`: G GEMMs; returns (a zero loss on the device, no data wait)."""

    def __init__(
        self, gemm: Gemm, device: torch.device, after_replay: Callable[[], object] | None = None
    ) -> None:
        self.gemm, self.device, self.after_replay = gemm, device, after_replay
        """`after_replay`: called once a replay is queued, while the GPU runs it (the clocks' sample)."""
        self.graph: torch.cuda.CUDAGraph | None = None
        self.no_loss = torch.zeros((), device=device)

    def __call__(self) -> tuple[torch.Tensor, float]:
        if self.device.type != "cuda":
            self._run_eagerly()
        else:
            if self.graph is None:
                self.graph = self._capture()
            self.graph.replay()
        if self.after_replay is not None:
            self.after_replay()
        return self.no_loss, 0.0

    def _run_eagerly(self) -> None:
        for _ in range(GEMMS_PER_REPLAY):
            self.gemm.call()

    def _capture(self) -> torch.cuda.CUDAGraph:
        return captured(self._run_eagerly, self.device)


def captured(launch: Callable[[], object], device: torch.device) -> torch.cuda.CUDAGraph:
    """One call of `launch` captured in a CUDA graph, after one on a side stream, as torch.cuda.graph's
    docs ask: compilation, autotuning and cuBLAS's workspace for a stream of its own happen there, not
    during the capture."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        launch()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return graph


def per_gemm(on_step: Callable[[StepRecord], None]) -> Callable[[StepRecord], None]:
    """`on_step` fed each step's time per GEMM (the step's / G). The stop rule still counts the
    steps' own times (run_steps applies it to the record it made), so `measure.min_seconds` is
    seconds of device time."""

    def record(step: StepRecord) -> None:
        on_step(dataclasses.replace(step, step_time_ms=step.step_time_ms / GEMMS_PER_REPLAY))

    return record
