"""Run one cell: `python -m workloads.run CONFIG.yaml [--cell-dir DIR]`, or `run_cell(cfg, dir)`.

Builds data, model, optimizer and precision context; applies the backend; runs warm-up and
measured steps; writes `steps.parquet` and `run.parquet` into the cell directory. Whatever
happens after the config is read — an exception, CUDA OOM, a compile error, SIGTERM, or a
backend that compiled nothing — a run row with the status and error text is written, and the
process exits non-zero unless the status is `completed` (so Slurm marks the job failed).
"""

from __future__ import annotations

import argparse
import resource
import signal
import statistics
import sys
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from workloads import backends
from workloads.config import CellConfig, ConfigError, config_digest, load_cell_config
from workloads.data import check_data_source, load_token_source, make_batches
from workloads.environment import describe_environment, peak_tflops, resolve_device
from workloads.models import ModelSpec, build_model, check_model
from workloads.precision import PRECISIONS
from workloads.schema import (
    RUN_FILE, RUN_SCHEMA, SCHEMA_VERSION, STEPS_FILE, STEPS_SCHEMA, append_rows_atomic, next_attempt,
)
from workloads.train import StepRecord, TrainStep, run_steps


class CellInterrupted(Exception):
    """Raised in the cell's process when Slurm (scancel, time limit) sends SIGTERM."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise CellInterrupted("received SIGTERM (scancel or time limit)")


def is_out_of_memory(err: BaseException | None) -> bool:
    """CUDA OOM raises torch.OutOfMemoryError, the CPU allocator a plain RuntimeError; during
    compilation dynamo wraps either in its own exception, so the cause chain is searched."""
    while err is not None:
        if isinstance(err, torch.OutOfMemoryError) or "can't allocate memory" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _now() -> datetime:
    return datetime.now(timezone.utc)


def count_training_flops(spec: ModelSpec, batch: tuple[torch.Tensor, torch.Tensor], autocast) -> float:
    """FLOPs of one forward+backward on the uncompiled model, counted once by FlopCounterMode.
    Run in eval mode so that batch-norm statistics are left untouched (norms are not counted)."""
    x, y = batch
    spec.module.eval()
    with FlopCounterMode(display=False) as counter:
        with autocast():
            loss = spec.loss(spec.module, x, y)
        loss.backward()
    spec.module.train()
    spec.module.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


class CellRecorder:
    """Collects step rows (with throughput and MFU) and the run row of one attempt."""

    def __init__(self, cell_id: str, attempt: int):
        self.cell_id, self.attempt = cell_id, attempt
        self.steps: list[dict[str, Any]] = []
        self.run: dict[str, Any] = {"cell_id": cell_id, "attempt": attempt, "schema_version": SCHEMA_VERSION}
        self.items_per_step: int | None = None
        self.flops_per_step: float | None = None
        self.peak: float | None = None

    def on_step(self, rec: StepRecord) -> None:
        seconds = rec.step_time_ms / 1e3
        tflops = self.flops_per_step / seconds / 1e12 if self.flops_per_step and seconds > 0 else None
        self.steps.append({
            "cell_id": self.cell_id, "attempt": self.attempt, "step": rec.step, "phase": rec.phase,
            "step_time_ms": rec.step_time_ms, "data_time_ms": rec.data_time_ms, "loss": rec.loss,
            "items": self.items_per_step, "tflops": tflops,
            "mfu": tflops / self.peak if tflops is not None and self.peak else None,
        })

    def summarise(self, compiles: bool, setup_time_s: float) -> None:
        """Summary columns over measured steps. For a backend that compiles, compile time =
        setup plus the warm-up steps' excess over the median measured step (compilation,
        autotuning, graph recording); eager has none (its warm-up excess is in first_step_ms)."""
        measured = [s["step_time_ms"] for s in self.steps if s["phase"] == "measure"]
        warmup = [s["step_time_ms"] for s in self.steps if s["phase"] == "warmup"]
        if not measured:
            return
        median = statistics.median(measured)
        self.run.update(
            measured_steps=len(measured),
            median_step_ms=median,
            mean_step_ms=statistics.fmean(measured),
            std_step_ms=statistics.stdev(measured) if len(measured) > 1 else 0.0,
            items_per_s=self.items_per_step / (median / 1e3),
            mfu=(self.flops_per_step / (median / 1e3) / 1e12 / self.peak
                 if self.flops_per_step and self.peak else None),
            first_step_ms=self.steps[0]["step_time_ms"],
            compile_time_s=(setup_time_s + sum(max(0.0, t - median) for t in warmup) / 1e3
                            if compiles else None),
        )

    def write(self, cell_dir: Path) -> None:
        append_rows_atomic(cell_dir / STEPS_FILE, self.steps, STEPS_SCHEMA)
        append_rows_atomic(cell_dir / RUN_FILE, [self.run], RUN_SCHEMA)


@dataclass
class PreparedCell:
    """A cell ready to train: the step to call, where it runs, and how it was compiled."""

    step: TrainStep
    device: torch.device
    compiled: backends.CompiledRun


def check_cell(cfg: CellConfig) -> None:
    """The configuration errors that need the registries — an unknown model, size or backend,
    a data source the model cannot read — raised as ConfigError before any work starts."""
    family = check_model(cfg)
    check_data_source(cfg, family.kind)
    backends.check_backend(cfg.backend)


def prepare_cell(cfg: CellConfig, rec: CellRecorder) -> PreparedCell:
    """Build data, model, optimizer and precision, apply the backend; fills `rec` as it learns things."""
    check_cell(cfg)
    device = resolve_device(cfg.device)
    precision = PRECISIONS[cfg.precision.name]
    precision.apply_global_switches()
    rec.run.update(describe_environment(device))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    tokens, vocab_size = load_token_source(cfg)
    spec = build_model(cfg, vocab_size)
    batch_size = cfg.batch_size or spec.batch_size
    grad_accum = cfg.grad_accum or spec.grad_accum
    items_per_step = batch_size * grad_accum * spec.items_per_sample
    grad_clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else spec.default_grad_clip
    rec.items_per_step = items_per_step
    rec.run.update(arch=spec.arch, params=spec.params, batch_size=batch_size, grad_accum=grad_accum,
                   items_per_step=items_per_step)

    module = spec.module.to(device)
    if spec.kind == "images" and cfg.model.channels_last:
        module = module.to(memory_format=torch.channels_last)
    batches = make_batches(cfg, spec.kind, batch_size, spec.sample_shape, spec.num_classes, device, tokens)

    def autocast(cache_enabled: bool = True):
        return precision.autocast(device.type, cache_enabled)

    if spec.flops_per_item is not None:
        rec.flops_per_step = float(spec.flops_per_item * items_per_step)  # float64 column; ints can pass 2**53
    else:
        rec.flops_per_step = count_training_flops(spec, next(batches), autocast) * grad_accum
    gpu_name = rec.run.get("gpu_name")
    rec.peak = cfg.peak_tflops or peak_tflops(gpu_name, precision.peak_key)
    rec.run.update(flops_per_step=rec.flops_per_step, peak_tflops=rec.peak)

    backends.reset_compile_stats()
    example_x, example_y = next(batches)
    model_inputs = (example_x,) if spec.kind == "images" else (example_x, example_y)  # GPT takes targets
    compiled = backends.apply_backend(module, cfg.backend, model_inputs, autocast, device.type == "cuda")
    fused = device.type == "cuda" and not cfg.backend.compile_optimizer
    optimizer = spec.make_optimizer(module, fused)
    optimizer_step = (backends.compile_optimizer_step(optimizer, cfg.backend)
                      if cfg.backend.compile_optimizer else None)
    step = TrainStep(compiled.module, spec.loss, optimizer, batches, precision, device, grad_accum,
                     grad_clip, compiled.marks_cudagraph_steps, optimizer_step)
    return PreparedCell(step, device, compiled)


def _train(cfg: CellConfig, rec: CellRecorder) -> str:
    """Everything between a valid config and the final status."""
    cell = prepare_cell(cfg, rec)
    compiled, device = cell.compiled, cell.device
    try:
        run_steps(cell.step, cfg.warmup_steps, cfg.steps, device, rec.on_step)
    finally:
        rec.summarise(cfg.backend.name != "eager", compiled.setup_time_s)
        if compiled.uses_dynamo or cfg.backend.compile_optimizer:
            stats = backends.compile_stats()
            rec.run.update(graph_count=stats.graph_count, graph_break_count=stats.graph_break_count,
                           recompile_count=stats.recompile_count, cudagraph_skips=stats.cudagraph_skips)
        elif cfg.backend.name == "torchscript":
            rec.run.update(graph_count=int(isinstance(compiled.module, torch.jit.ScriptModule)),
                           graph_break_count=0, recompile_count=0)
        rec.run["peak_mem_bytes"] = (torch.cuda.max_memory_allocated(device) if device.type == "cuda"
                                     else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)

    if cfg.backend.name != "eager" and not rec.run.get("graph_count"):
        rec.run["error"] = (f"backend {cfg.backend.name} was requested but no graph was compiled "
                            "(torch.compile disabled, e.g. TORCH_COMPILE_DISABLE=1?); steps ran eagerly")
        return "not_compiled"
    if backends.wants_cudagraphs(cfg.backend) and rec.run.get("cudagraph_skips"):
        rec.run["error"] = (f"backend {cfg.backend.name} (mode {cfg.backend.mode}) asked for CUDA graphs, but "
                            f"{rec.run['cudagraph_skips']} graph(s) ran without them (CPU device or unsupported "
                            "ops: the job log names the reason)")
        return "not_compiled"
    return "completed"


def run_cell(cfg: CellConfig, cell_dir: str | Path) -> str:
    """Run one attempt of a cell, write its Parquet files into `cell_dir`, return the status."""
    cell_dir = Path(cell_dir)
    cell_id = cfg.cell_id or config_digest(cfg)
    rec = CellRecorder(cell_id, next_attempt(cell_dir))
    rec.run.update(
        model=cfg.model.name, arch=cfg.model.arch, size=cfg.size, backend=cfg.backend.name,
        compile_mode=cfg.backend.mode or ("default" if cfg.backend.name == "inductor" else None),
        fullgraph=cfg.backend.fullgraph, regional=cfg.backend.regional,
        compile_optimizer=cfg.backend.compile_optimizer, precision=cfg.precision.name,
        data_source=cfg.data.source, seed=cfg.seed, warmup_steps=cfg.warmup_steps,
        started_at=_now(),
    )
    previous_handler = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        status = _train(cfg, rec)
    except CellInterrupted as err:
        status, rec.run["error"] = "cancelled", str(err)
    except Exception as err:  # a failed cell is a result to record, whatever the cause
        status = "oom" if is_out_of_memory(err) else "failed"
        rec.run["error"] = "".join(traceback.format_exception_only(type(err), err)).strip()
        traceback.print_exc()
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    rec.run.update(status=status, finished_at=_now())
    rec.write(cell_dir)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.run", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="resolved cell config (config.yaml)")
    parser.add_argument("--cell-dir", type=Path, default=None,
                        help="where to write the Parquet files (default: the config file's directory)")
    args = parser.parse_args(argv)
    try:
        cfg = load_cell_config(args.config)
        check_cell(cfg)
    except (OSError, ConfigError) as err:
        print(f"compilebench: invalid cell config {args.config}: {err}", file=sys.stderr)
        return 2
    status = run_cell(cfg, args.cell_dir or args.config.parent)
    print(f"cell {cfg.cell_id or config_digest(cfg)}: {status}")
    return 0 if status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
