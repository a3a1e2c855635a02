"""`GemmCell`: what a GEMM cell's attempt builds and steps, the counterpart of workloads/train_cell.py's
`TrainingCell`.

Builds the operands and the GEMM (workloads/gemm/kernels.py), times CUDA-graph replays of it
(workloads/gemm/timing.py) in the measured loop of training cells (`gemm.timing=sustained`) or in
bursts after idle pauses (`burst`: workloads/gemm/bursts.py), and fills the run row: the summary
of CellRecorder (a step is one GEMM: one item, 2·M·N·K FLOPs), the environment of a training cell,
the columns of its instruments (workloads/kinds.py `gemm_instruments`: provenance, the GPU's
energy per GEMM, the GPU's clocks while it ran: workloads/instruments/gpu_clocks.py), and the
gemm_* columns (workloads/gemm/shapes.py; docs/gemm.md). workloads/run.py runs it in the one
attempt of every cell (`attempt`); fp8 where the device has no fp8 tensor cores raises NotSupported,
recorded as `not_supported`.
"""

from __future__ import annotations

import torch

from workloads.cell.catalog import check_cell
from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.cell.support import require_fp8
from workloads.cell.train import run_steps
from workloads.contract.vocabulary import SUSTAINED
from workloads.gemm.bursts import run_bursts
from workloads.gemm.kernels import Gemm, build_gemm, make_operands
from workloads.gemm.private_torch import AutotuneChoices
from workloads.gemm.shapes import gemm_columns, gemm_flops, resolve_shape
from workloads.gemm.timing import GEMMS_PER_REPLAY, GemmSteps, per_gemm
from workloads.instruments import dynamo_records
from workloads.instruments.base import Instrument
from workloads.instruments.environment import open_run_row, peak_gbps, peak_tflops, resolve_device
from workloads.instruments.gpu_clocks import GpuClocks

#: What an eager GEMM cell's `gemm_kernel` says, by device type.
EAGER_KERNELS = {"cuda": "cublas", "cpu": "aten"}

#: run.parquet `paired_fallback` of every GEMM cell.
NOT_PAIRED = "a GEMM cell times one kernel per cell: its eager (cuBLAS) baseline is a cell of its own"


class GemmCell:
    """What a GEMM cell's attempt (workloads/run.py `attempt`) builds and steps: the GEMM of the
    cell's shape, its CUDA-graph replays timed by the measured loop (sustained) or in bursts
    (`ranks`: one process; check_cell refuses more). Its run row is opened when it is made, before
    the instruments' first moment."""

    def __init__(self, cfg: CellConfig, rec: CellRecorder, ranks: Ranks) -> None:
        self._open(cfg, rec, ranks)
        self.shape = shape = resolve_shape(cfg.size, cfg.gemm.m, cfg.gemm.n, cfg.gemm.k)
        rec.items_per_step, rec.flops_per_step = 1, gemm_flops(shape)
        rec.peak = cfg.peak_tflops or peak_tflops(
            rec.run.get("gpu_name"), PRECISIONS[cfg.precision.name].peak_key
        )
        rec.run.update(
            gemm_m=shape.m,
            gemm_n=shape.n,
            gemm_k=shape.k,
            items_per_step=1,
            flops_per_step=rec.flops_per_step,
            peak_tflops=rec.peak,
            gemms_per_replay=GEMMS_PER_REPLAY,
            paired=False,
            paired_fallback=NOT_PAIRED,
        )

    def _open(self, cfg: CellConfig, rec: CellRecorder, ranks: Ranks) -> None:
        """What every GEMM cell does first: check the config, find the device, open the run row; its
        clocks, sampled by its loop, are one of its instruments (workloads/kinds.py)."""
        check_cell(cfg)
        self.cfg, self.rec, self.ranks = cfg, rec, ranks
        self.device = device = resolve_device(cfg.device)
        self.sustained = cfg.gemm.timing == SUSTAINED
        self.clocks = GpuClocks(device)
        if cfg.precision.name == "fp8":
            require_fp8(device)
        open_run_row(rec.run, device)
        self.gemm: Gemm | None = None
        self.steps: GemmSteps | None = None
        self.autotuner = AutotuneChoices()

    def build(self) -> GemmSteps:
        cfg = self.cfg
        dynamo_records.reset_compile_stats()
        operands = make_operands(self.shape, cfg.precision.name, cfg.precision.recipe, self.device, cfg.seed)
        self.gemm = build_gemm(cfg.backend, cfg.precision.name, operands, cfg.gemm.kernel)
        # Sustained: a clock sample (at most every CLOCK_SAMPLE_GAP_S) right after a replay is queued;
        # a burst cell samples halfway through each burst instead.
        sample = self.clocks.sample if self.sustained else None
        self.steps = GemmSteps(self.gemm, self.device, after_replay=sample)
        return self.steps

    def measure(self, instruments: Instrument) -> None:
        cfg, steps = self.cfg, self.steps
        assert steps is not None, "build() first"
        on_step = per_gemm(self.rec.on_step)
        with self.autotuner.listening():
            if self.sustained:
                stop_reason = run_steps(
                    steps, cfg.warmup_steps, cfg.steps, self.device, on_step=on_step, measure=cfg.measure,
                    before_measuring=instruments.before_measuring,
                )  # fmt: skip
            else:
                stop_reason = run_bursts(
                    steps, cfg.warmup_steps, cfg.steps, self.device, on_step,
                    before_measuring=instruments.before_measuring, during_burst=self.clocks.sample,
                )  # fmt: skip
        self.rec.run["stop_reason"] = stop_reason

    def peak_memory(self) -> int | None:
        return torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None

    def _kernel_name(self) -> str | None:
        """The Triton kernel with its tiles, inductor's choice, or for eager the library."""
        gemm, chosen = self.gemm, self.autotuner.last
        assert gemm is not None, "build() first"
        if gemm.name is not None:
            return gemm.name
        if gemm.compiled:
            return chosen.kernel if chosen else None
        # Eager is torch.mm / torch._scaled_mm: cuBLAS(Lt) on CUDA, oneDNN or ATen's own on the CPU.
        return EAGER_KERNELS[self.device.type]

    def summarise(self, reports: list[RankReport]) -> None:
        """The summary of CellRecorder, and the gemm_* columns from it."""
        cfg, rec, gemm = self.cfg, self.rec, self.gemm
        assert gemm is not None, "build() first"
        rec.summarise(reports, gemm.compiled, 0.0)
        chosen = self.autotuner.last
        rec.run.update(
            gemm_columns(
                self.shape,
                cfg.precision.name,
                cfg.precision.recipe,
                rec.run.get("median_step_ms"),
                rec.peak,
                peak_gbps(rec.run.get("gpu_name")),
            ),
            gemm_kernel=self._kernel_name(),
            gemm_autotune_us=(chosen.us if chosen else None) if gemm.compiled else gemm.tuned_us,
        )
        if gemm.compiled:
            rec.run.update(dynamo_records.compile_stats().columns())
