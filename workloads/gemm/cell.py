"""`gemm_cell`: a GEMM cell's attempt, the counterpart of workloads/train_cell.py's `train_cell`.

Builds the operands and the GEMM (workloads/gemm/kernels.py), runs the measured loop of training
cells over CUDA-graph replays of it (workloads/gemm/timing.py), and fills the run row: the summary
of CellRecorder (a step is one GEMM: one item, 2·M·N·K FLOPs), the environment of a training cell,
the columns of the instruments it shares with one (`gemm_instruments`: provenance, the GPU's
energy per GEMM), and the gemm_* columns (workloads/gemm/shapes.py; docs/gemm.md). workloads/run.py
runs it inside the attempt's lifecycle; fp8 where the device has no fp8 tensor cores raises
NotSupported, recorded as `not_supported`.
"""

from __future__ import annotations

import torch

from workloads.cell.backends import compiled_status
from workloads.cell.catalog import check_cell
from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder
from workloads.cell.support import require_fp8
from workloads.cell.train import run_steps
from workloads.gemm.kernels import build_gemm, make_operands
from workloads.gemm.private_torch import AutotuneChoices
from workloads.gemm.shapes import gemm_columns, gemm_flops, resolve_shape
from workloads.gemm.timing import GEMMS_PER_REPLAY, GemmSteps, per_gemm
from workloads.instruments import dynamo_records
from workloads.instruments.base import Instrument
from workloads.instruments.environment import open_run_row, peak_gbps, peak_tflops, resolve_device
from workloads.instruments.gpu_energy import GpuEnergy
from workloads.instruments.provenance import Provenance
from workloads.instruments.registry import WaitForQuiet

#: What an eager GEMM cell's `gemm_kernel` says, by device type.
EAGER_KERNELS = {"cuda": "cublas", "cpu": "aten"}

#: run.parquet `paired_fallback` of every GEMM cell.
NOT_PAIRED = "a GEMM cell times one kernel per cell: its eager (cuBLAS) baseline is a cell of its own"


def gemm_instruments(cfg: CellConfig, ranks: Ranks) -> list[Instrument]:
    """A GEMM cell's instruments, in the order of a training cell's (workloads/instruments/registry.py):
    the waits for quiet, the GPU's energy (a step row is one GEMM of a replay of GEMMS_PER_REPLAY),
    provenance. They read no more of the built cell than its device (GemmSteps has one)."""
    return [
        WaitForQuiet.for_process(),
        GpuEnergy.for_cell(cfg, ranks, steps_per_row=GEMMS_PER_REPLAY),
        Provenance(),
    ]


def gemm_cell(cfg: CellConfig, rec: CellRecorder, ranks: Ranks) -> str:
    """Everything between a valid config and the final status (`ranks`: one process; check_cell
    refuses more)."""
    check_cell(cfg)
    instruments = gemm_instruments(cfg, ranks)
    device = resolve_device(cfg.device)
    if cfg.precision.name == "fp8":
        require_fp8(device)
    open_run_row(rec.run, device)

    shape = resolve_shape(cfg.size, cfg.model.m, cfg.model.n, cfg.model.k)
    gpu_name = rec.run.get("gpu_name")
    rec.items_per_step, rec.flops_per_step = 1, gemm_flops(shape)
    rec.peak = cfg.peak_tflops or peak_tflops(gpu_name, PRECISIONS[cfg.precision.name].peak_key)
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

    for instrument in instruments:
        instrument.before_build()
    dynamo_records.reset_compile_stats()
    operands = make_operands(shape, cfg.precision.name, cfg.precision.recipe, device, cfg.seed)
    gemm = build_gemm(cfg.backend, cfg.precision.name, operands)
    steps = GemmSteps(gemm, device)
    for instrument in instruments:
        instrument.before_loop(steps)

    def before_measuring() -> None:
        for instrument in instruments:
            instrument.before_measuring()

    autotuner = AutotuneChoices()
    try:
        with autotuner.listening():
            rec.run["stop_reason"] = run_steps(
                steps,
                cfg.warmup_steps,
                cfg.steps,
                device,
                on_step=per_gemm(rec.on_step),
                measure=cfg.measure,
                before_measuring=before_measuring,
            )
    finally:
        for instrument in instruments:
            rec.run.update(instrument.after_loop())
        memory = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        rec.summarise([rec.report(ranks.rank, memory)], gemm.compiled, 0.0)
        for instrument in instruments:
            rec.run.update(instrument.after_summary(rec))
        chosen = autotuner.last
        rec.run.update(
            gemm_columns(
                shape,
                cfg.precision.name,
                cfg.precision.recipe,
                rec.run.get("median_step_ms"),
                rec.peak,
                peak_gbps(gpu_name),
            ),
            # Eager is torch.mm / torch._scaled_mm: cuBLAS(Lt) on CUDA, oneDNN or ATen's own on the CPU.
            gemm_kernel=(chosen.kernel if chosen else None) if gemm.compiled else EAGER_KERNELS[device.type],
            gemm_autotune_us=chosen.us if chosen and gemm.compiled else None,
        )
        if gemm.compiled:
            rec.run.update(dynamo_records.compile_stats().columns())
    return compiled_status(cfg.backend, rec.run)
