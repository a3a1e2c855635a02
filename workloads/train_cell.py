"""Build one training cell from its config and train it once: `TrainingCell`, what the attempt
(workloads/run.py `attempt`) builds and steps for every model but the GEMM.

`prepare_cell` builds data, model, optimizer and precision by keyword, counts a step's FLOPs and
applies the backend (DDP inside it where the cell has several ranks). `TrainingCell` builds it with
`prepare_cell`, runs its one measured loop (paired where it can be: workloads/cell/paired.py) and
summarises the ranks' steps; the attempt calls the instruments' moments around it (their list:
workloads/kinds.py `training_instruments`), gathers the ranks' steps and turns failures into a status.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from workloads.cell import backends, distributed, paired
from workloads.cell.catalog import check_cell
from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.cell.train import OptimizerUpdate, PreparedCell, StepRecord, TrainedModel, TrainStep
from workloads.contract.vocabulary import BASELINE_BACKEND
from workloads.data import BatchShape, load_token_source, make_batches
from workloads.instruments import dynamo_records
from workloads.instruments.base import Instrument
from workloads.instruments.environment import open_run_row, peak_tflops, resolve_device
from workloads.models import ModelSpec, build_model


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


def prepare_cell(cfg: CellConfig, rec: CellRecorder, ranks: Ranks = Ranks()) -> PreparedCell:
    """Build data, model, optimizer and precision, apply the backend (DDP inside it where the
    cell has several ranks); fills `rec` as it learns things. `batch_size` and `grad_accum` are
    per rank; `rec` counts items and FLOPs over all ranks."""
    check_cell(cfg)
    device = distributed.rank_device(ranks, resolve_device(cfg.device))
    precision = PRECISIONS[cfg.precision.name]
    precision.apply_global_switches()
    open_run_row(rec.run, device)

    tokens, vocab_size = load_token_source(cfg)
    spec = build_model(cfg, vocab_size)
    batch_size = cfg.batch_size or spec.batch_size
    grad_accum = cfg.grad_accum or spec.grad_accum
    items_per_step = batch_size * grad_accum * spec.items_per_sample
    grad_clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else spec.default_grad_clip
    rec.items_per_step = items_per_step * ranks.world_size
    rec.run.update(
        arch=spec.arch,
        params=spec.params,
        batch_size=batch_size,
        grad_accum=grad_accum,
        items_per_step=rec.items_per_step,
    )

    module = spec.module.to(device)
    if spec.kind == "images" and cfg.model.channels_last:
        module = module.to(memory_format=torch.channels_last)
    shape = BatchShape(spec.kind, batch_size, spec.sample_shape, spec.num_classes, spec.custom)
    batches = make_batches(cfg, shape=shape, device=device, tokens=tokens, ranks=ranks)

    def autocast(cache_enabled: bool = True):
        return precision.autocast(device.type, cache_enabled)

    if spec.flops_per_item is not None:
        rank_flops = float(spec.flops_per_item * items_per_step)  # float64 column; ints can pass 2**53
    else:
        rank_flops = count_training_flops(spec, next(batches), autocast) * grad_accum
    rec.flops_per_step = rank_flops * ranks.world_size
    rec.peak = cfg.peak_tflops or peak_tflops(rec.run.get("gpu_name"), precision.peak_key)
    rec.run.update(flops_per_step=rec.flops_per_step, peak_tflops=rec.peak)
    if device.type == "cuda":
        # The peak memory is the training's, from here: the count above runs the uncompiled model's
        # forward and backward (timm models), which would set a compiled cell's peak.
        torch.cuda.reset_peak_memory_stats(device)

    # After counting FLOPs (those of the model as written), before the backend traces the swapped layers.
    rec.run.update(precision.convert_module(module, device, cfg.precision.recipe, spec.output_head))
    dynamo_records.reset_compile_stats()
    example_x, example_y = next(batches)
    model_inputs = (example_x, example_y) if spec.kind == "tokens" else (example_x,)  # GPT takes targets
    data_parallel = distributed.DataParallel(ranks, device, cfg.distributed)
    compiled = backends.apply_backend(
        module, cfg.backend, model_inputs, autocast, device.type == "cuda", data_parallel
    )
    optimizer = spec.make_optimizer(module, device.type == "cuda" and not cfg.backend.compile_optimizer)
    step = TrainStep(
        model=TrainedModel(
            compiled.module, spec.loss, device, compiled.marks_cudagraph_steps, data_parallel.sync_gradients
        ),
        update=OptimizerUpdate(
            optimizer,
            backends.compile_optimizer_step(optimizer, cfg.backend)
            if cfg.backend.compile_optimizer
            else optimizer.step,
            grad_clip,
        ),
        batches=batches,
        precision=precision,
        grad_accum=grad_accum,
    )
    return PreparedCell(step, device, compiled)


def _announcing(rec: CellRecorder, warmup_steps: int) -> Callable[[StepRecord], None]:
    """`rec.on_step`, which also says in the log when the first measured step has ended: start-up
    and compilation are behind the cell then (a user following the log sees it; tests wait for it
    before they interrupt a cell that must be training)."""
    announced = False

    def on_step(record: StepRecord) -> None:
        nonlocal announced
        rec.on_step(record)
        if record.phase == "measure" and not announced:
            announced = True
            print(
                f"cell {rec.cell_id}: measuring (the {warmup_steps} warm-up step(s) and the first measured "
                "step are done)",
                flush=True,
            )

    return on_step


class TrainingCell:
    """What a training cell's attempt (workloads/run.py `attempt`) builds and steps: the cell of
    `prepare_cell`, trained by its measured loop (paired where it can be)."""

    def __init__(self, cfg: CellConfig, rec: CellRecorder, ranks: Ranks) -> None:
        self.cfg, self.rec, self.ranks = cfg, rec, ranks
        self.cell: PreparedCell | None = None
        self.loop: paired.PairedLoop | paired.UnpairedLoop | None = None

    def build(self) -> PreparedCell:
        self.cell = prepare_cell(self.cfg, self.rec, self.ranks)
        return self.cell

    def measure(self, instruments: Instrument) -> None:
        """Warm up and measure; the loop's columns in the run row, `paired` also where it fails."""
        cfg, rec, ranks, cell = self.cfg, self.rec, self.ranks, self.cell
        assert cell is not None, "build() first"
        # One process applies the stop rule step by step; ranks agree on a count (train.run_steps).
        gather = (lambda value: distributed.gather(ranks, value)) if ranks.world_size > 1 else None
        self.loop = loop = paired.measuring_loop(
            cfg,
            cell,
            ranks.world_size,
            replicate=rec.run.get("repeat", 0),
            on_step=_announcing(rec, cfg.warmup_steps),
            before_measuring=instruments.before_measuring,
            after_block=instruments.after_block,
            gather=gather,
        )
        rec.run.update(paired=loop.fallback is None, paired_fallback=loop.fallback)
        outcome = loop.run(warmup_steps=cfg.warmup_steps, steps=cfg.steps, measure=cfg.measure)
        rec.run.update(
            stop_reason=outcome.stop_reason,
            paired=outcome.fallback is None,
            paired_fallback=outcome.fallback,
            # a paired cell is one process (paired.unpaired_reason): its eager side's peak is this one's
            eager_peak_mem_bytes=loop.peak_memory().eager if outcome.fallback is None else None,
        )

    def peak_memory(self) -> int | None:
        """On CUDA the peak of the cell's own steps (a paired cell's compiled side: paired.SidePeaks);
        on the CPU the process's peak resident memory, both sides of a paired cell."""
        assert self.cell is not None, "build() first"
        if self.cell.device.type != "cuda":
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if self.loop is None:
            return torch.cuda.max_memory_allocated(self.cell.device)
        return self.loop.peak_memory().own

    def summarise(self, reports: list[RankReport]) -> None:
        assert self.cell is not None, "build() first"
        compiles = self.cfg.backend.name != BASELINE_BACKEND
        self.rec.summarise(reports, compiles, self.cell.compiled.setup_time_s)
