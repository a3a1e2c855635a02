"""`LayerCell`: a GEMM cell that runs a whole layer's GEMMs (`gemm.layer`; workloads/gemm/layer.py),
and `LayerWindows`, what it measures of them after its loop.

The measured loop is the GEMM cell's (workloads/gemm/timing.py), its GEMM the layer: a step replays
GEMMS_PER_REPLAY layers captured in one CUDA graph, so `median_step_ms` is ms per layer, back to back.
Then, on the warm cell, the post's comparison of one layer two ways (docs/gemm.md "The post's layer"):
`launched`, its GEMMs called one by one from Python, and `graph`, one layer captured in a CUDA graph
and replayed. For each way the host's time to launch a layer, unprofiled, then one profiler run of
LAYER_WINDOWS windows per way, each a single layer on an idle device between two marker copies
(workloads/instruments/profiled_window.py `windows_run`), whose kernels give the layer's span, idle
share, gaps and matmul time (layer.py). fp8 only: on the CPU or a GPU without fp8 tensor cores the cell
raises NotSupported (`not_supported`), as every fp8 GEMM cell.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.gemm.cell import EAGER_KERNELS, NOT_PAIRED, GemmCell
from workloads.gemm.kernels import Gemm, build_gemm, make_operands
from workloads.gemm.layer import LayerWindow, graph_speedup, layer_columns, layer_shapes, way_columns
from workloads.gemm.shapes import resolve_shape
from workloads.gemm.timing import GEMMS_PER_REPLAY, GemmSteps, captured
from workloads.instruments.base import Instrument
from workloads.instruments.device_activity import device_activity, windows_work
from workloads.instruments.environment import peak_gbps, peak_tflops
from workloads.instruments.profiled_window import collector_paused, device_trace, windows_run

#: Profiled layers per way, and host launch timings per way: enough for a median gap over 60 of the
#: launched way's; the profiled run of both ways with 4 GEMMs each is some 160 kernels.
LAYER_WINDOWS = 20


def host_launch_us(step: Callable[[], object], device: torch.device, times: int) -> list[float]:
    """The host's µs from calling `step` to its return, each time on an idle device (no profiler)."""
    spent = []
    for _ in range(times):
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        step()
        spent.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize(device)
    return spent


def layer_windows(launch: Callable[[], object], device: torch.device) -> dict[str, Any]:
    """The layer_* columns of both ways (module docstring); a way's columns null where its windows
    were not seen (CUPTI unavailable)."""
    graph = captured(launch, device)
    ways: dict[str, Callable[[], object]] = {"launched": launch, "graph": graph.replay}
    launch_us = {way: host_launch_us(step, device, LAYER_WINDOWS) for way, step in ways.items()}
    runs = [windows_run(step, device, 1, LAYER_WINDOWS, (contextlib.nullcontext,)) for step in ways.values()]
    torch.cuda.synchronize(device)
    with collector_paused():
        work = windows_work(device_activity(device_trace(lambda: [run() for run in runs], device)))
    if work is None or len(work) != LAYER_WINDOWS * len(ways):
        print("compilebench: the layer's profiled windows were not seen", file=sys.stderr)
        work = [[]] * (LAYER_WINDOWS * len(ways))
    columns: dict[str, Any] = {"layer_windows": LAYER_WINDOWS}
    for i, way in enumerate(ways):
        kernels = [
            [(p.start, p.end) for p in window if p.kernel]
            for window in work[i * LAYER_WINDOWS : (i + 1) * LAYER_WINDOWS]
        ]
        windows = [window for window in map(LayerWindow.of, kernels) if window is not None]
        columns.update(way_columns(way, windows, launch_us[way]))
    columns["layer_graph_speedup"] = graph_speedup(columns)
    return columns


class LayerWindows(Instrument):
    """After the loop finished: both ways of one layer (`layer_windows`). A probe after measuring never
    fails the attempt: where it fails, the columns stay null and the error goes to stderr."""

    def __init__(self, cell: LayerCell) -> None:
        self.cell = cell

    def after_finished(self) -> dict[str, Any]:
        try:
            return layer_windows(self.cell.launch, self.cell.device)
        except Exception as error:  # noqa: BLE001 - see the class docstring
            print(f"compilebench: no layer windows ({type(error).__name__}: {error})", file=sys.stderr)
            return {}


class LayerCell(GemmCell):
    """A GEMM cell whose GEMM is a layer's GEMMs in order (`launch`): built, measured and summarised
    as a GEMM cell, per layer instead of per GEMM, with LayerWindows after its loop (workloads/kinds.py)."""

    def __init__(self, cfg: CellConfig, rec: CellRecorder, ranks: Ranks) -> None:
        assert cfg.gemm.layer is not None, "LayerCell runs gemm.layer"
        self._open(cfg, rec, ranks)  # fp8: check_layer refuses another precision
        m = resolve_shape(cfg.size, cfg.gemm.m, None, None).m
        self.shapes = layer_shapes(cfg.gemm.layer, m)
        gpu = rec.run.get("gpu_name")
        rec.peak = cfg.peak_tflops or peak_tflops(gpu, PRECISIONS["fp8"].peak_key)
        sums = layer_columns([shape for _, shape in self.shapes], rec.peak, peak_gbps(gpu))
        rec.items_per_step, rec.flops_per_step = 1, sums["flops_per_step"]
        rec.run.update(
            sums,
            gemm_m=m,
            items_per_step=1,
            peak_tflops=rec.peak,
            gemms_per_replay=GEMMS_PER_REPLAY,  # layers per replay
            paired=False,
            paired_fallback=NOT_PAIRED,
        )
        self.gemms: list[Gemm] = []

    def build(self) -> GemmSteps:
        cfg = self.cfg
        self.gemms = [
            build_gemm(
                cfg.backend, "fp8", make_operands(shape, "fp8", "tensorwise", self.device, cfg.seed + i),
                cfg.gemm.kernel,
            )
            for i, (_, shape) in enumerate(self.shapes)
        ]  # fmt: skip
        self.gemm = Gemm(self.launch, compiled=False)
        self.steps = GemmSteps(
            self.gemm, self.device, after_replay=self.clocks.sample if self.sustained else None
        )
        return self.steps

    def launch(self) -> torch.Tensor:
        """The layer: its GEMMs called in order, as a Python loop of a model's layer would."""
        products = [gemm.call() for gemm in self.gemms]
        return products[-1]

    def summarise(self, reports: list[RankReport]) -> None:
        rec = self.rec
        rec.summarise(reports, False, 0.0)
        median_ms, floor_us = rec.run.get("median_step_ms"), rec.run.get("gemm_floor_us")
        us = median_ms * 1e3 if median_ms else None
        tuned = [gemm.tuned_us for gemm in self.gemms]
        rec.run.update(
            gemm_us=us,
            gemm_roofline_share=floor_us / us if floor_us and us else None,
            gemm_kernel="; ".join(
                f"{name} {gemm.name or EAGER_KERNELS[self.device.type]}"
                for (name, _), gemm in zip(self.shapes, self.gemms)
            ),
            gemm_autotune_us=None if None in tuned else statistics.fsum(tuned),  # type: ignore[arg-type]
        )
