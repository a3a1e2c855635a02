"""Sweep directories for the analysis tests and benchmark, written as a sweep leaves them: each
cell's config.yaml, run.parquet and steps.parquet through the workloads' own writer
(workloads.contract.schema.append_rows_atomic; for cells of several processes workloads.cell.recorder, which
merges the ranks' steps as a distributed cell does), and manifest.parquet through the
orchestrator's schema."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.cell.train import StepRecord
from workloads.contract.attempts import next_attempt
from workloads.contract.schema import (
    MANIFEST_SCHEMA,
    RUN_SCHEMA,
    STEPS_SCHEMA,
    append_rows_atomic,
    table_from_rows,
    write_parquet_atomic,
)
from workloads.contract.sweep_dir import MANIFEST_FILE

#: The figures of a sweep with training cells, in the report's order (report/plots/<name>.png, .svg).
TRAINING_FIGURES = ["speedup", "step_times", "mfu", "compile_vs_speedup", "data_wait", "scaling"]
#: Items (tokens or images) per step of every test cell.
ITEMS = 1000
#: Warm-up step times: slow on purpose (compilation), so a leak into the statistics shows.
WARMUP_MS = (5000.0, 900.0)

RUN_DEFAULTS: dict[str, Any] = {
    "model": "gpt", "size": "tiny", "precision": "bf16", "data_source": "synthetic", "seed": 1337,
    "batch_size": 8, "grad_accum": 1, "items_per_step": ITEMS, "device": "cpu", "world_size": 1, "nodes": 1,
}  # fmt: skip
H100 = {"device": "cuda:0", "gpu_name": "NVIDIA H100 80GB HBM3"}
#: The axes of GPT-2 124M (the seminar's gpt2) on an H100.
GPT2 = dict(
    model="gpt", size="medium", arch="gpt-12x12x768", precision="bf16", batch_size=12, grad_accum=40, **H100
)


def metrics_of(sweep: Path, **options: Any) -> dict[str, dict[str, Any]]:
    """The per-cell metrics of a sweep directory, by cell id (`options`: cell_metrics')."""
    return {
        row["cell_id"]: row
        for row in cell_metrics(load_sweep(sweep, warn=None), **options).to_dict("records")
    }


def write_cell(
    sweep: Path,
    cell_id: str,
    backend: str = "eager",
    status: str = "completed",
    step_ms: Sequence[float] | None = None,
    attempt: int = 1,
    data_ms: Sequence[float] | None = None,
    loss: Sequence[float] | None = None,
    mfu: Sequence[float] | None = None,
    warmup_ms: Sequence[float] = WARMUP_MS,
    repeat: int | None = None,
    **run: Any,
) -> Path:
    """A cell directory with one more attempt; `step_ms` are the measured steps' times (None: no
    steps file, as a cell that failed while building). `data_ms`, `loss` and `mfu` cover the
    warm-up steps and then the measured ones. `repeat`: the replicate the attempt ran (None: the
    column left null, as in files written before replicates)."""
    directory = Path(sweep) / "cells" / cell_id
    directory.mkdir(parents=True, exist_ok=True)
    row = {
        **RUN_DEFAULTS,
        "cell_id": cell_id,
        "attempt": attempt,
        "repeat": repeat,
        "status": status,
        "backend": backend,
        "graph_count": None if backend == "eager" else 1,
        "graph_break_count": None if backend == "eager" else 0,
        "compile_time_s": None if backend == "eager" else 3.5,
        **run,
    }
    _write_config(directory, row)
    append_rows_atomic(directory / "run.parquet", [row], RUN_SCHEMA)
    if step_ms is not None:
        times = [*warmup_ms, *step_ms]
        phases = ["warmup"] * len(warmup_ms) + ["measure"] * len(step_ms)
        column = lambda values: list(values) if values is not None else [None] * len(times)  # noqa: E731
        steps = [
            {"cell_id": cell_id, "attempt": attempt, "step": i, "phase": phase, "step_time_ms": ms,
             "data_time_ms": data, "loss": value, "items": ITEMS, "mfu": fraction}
            for i, (phase, ms, data, value, fraction) in
            enumerate(zip(phases, times, column(data_ms), column(loss), column(mfu)))
        ]  # fmt: skip
        append_rows_atomic(directory / "steps.parquet", steps, STEPS_SCHEMA)
    return directory


def write_replicates(
    sweep: Path,
    cell_id: str,
    backend: str,
    replicate_step_ms: Sequence[Sequence[float]],
    replicate_data_ms: Sequence[Sequence[float] | None] | None = None,
    replicate_run: Sequence[dict[str, Any]] | None = None,
    **run: Any,
) -> Path:
    """A cell run as len(replicate_step_ms) replicates (`repeats`), one attempt each in turn as the
    orchestrator runs them: attempt r + 1 ran replicate r with measured steps replicate_step_ms[r]
    (and waits for data replicate_data_ms[r], over the measured steps only: no wait in the warm-up),
    its run row with `run` and replicate_run[r] (e.g. the energy columns of its window)."""
    waits = replicate_data_ms or [None] * len(replicate_step_ms)
    own = replicate_run or [{}] * len(replicate_step_ms)
    for repeat, (step_ms, data_ms, mine) in enumerate(zip(replicate_step_ms, waits, own)):
        data = None if data_ms is None else [0.0] * len(WARMUP_MS) + list(data_ms)
        directory = write_cell(
            sweep, cell_id, backend, step_ms=step_ms, data_ms=data, attempt=repeat + 1, repeat=repeat,
            **{**run, **mine},
        )  # fmt: skip
    return directory


def write_paired_replicates(
    sweep: Path,
    cell_id: str,
    backend: str,
    replicate_blocks: Sequence[Sequence[tuple[Sequence[float], Sequence[float]]]],
    paired: Sequence[bool] | None = None,
    block_j_per_step: Sequence[Sequence[tuple[float, float]]] | None = None,
    replicate_run: Sequence[dict[str, Any]] | None = None,
    **run: Any,
) -> Path:
    """A paired cell (workloads/cell/paired.py) run as len(replicate_blocks) replicates, one attempt
    each: replicate r's pair p is replicate_blocks[r][p] = (eager block's step times, compiled
    block's), measured in that order with `side` and `pair`, after WARMUP_MS compiled warm-up steps.
    `paired[r]`: what replicate r's run row says (default: true for every replicate).
    `block_j_per_step[r][p]`: (eager block's, compiled block's) energy over its steps, each of its
    steps' `energy_j` as the workload splits a block's energy (default: none measured);
    replicate_run[r]: more of replicate r's run row."""
    directory = Path(sweep) / "cells" / cell_id
    directory.mkdir(parents=True, exist_ok=True)
    for repeat, blocks in enumerate(replicate_blocks):
        attempt = repeat + 1
        joules = block_j_per_step[repeat] if block_j_per_step else [(None, None)] * len(blocks)
        rows = [(ms, "warmup", "compiled", None, None) for ms in WARMUP_MS] + [
            (ms, "measure", side, pair, energy)
            for pair, ((eager_ms, compiled_ms), (eager_j, compiled_j)) in enumerate(zip(blocks, joules))
            for side, times, energy in (("eager", eager_ms, eager_j), ("compiled", compiled_ms, compiled_j))
            for ms in times
        ]
        steps = [
            {"cell_id": cell_id, "attempt": attempt, "step": i, "phase": phase, "step_time_ms": ms,
             "items": ITEMS, "side": side, "pair": pair, "energy_j": energy}
            for i, (ms, phase, side, pair, energy) in enumerate(rows)
        ]  # fmt: skip
        row = {
            **RUN_DEFAULTS, "cell_id": cell_id, "attempt": attempt, "repeat": repeat, "status": "completed",
            "backend": backend, "graph_count": 1, "graph_break_count": 0, "compile_time_s": 3.5,
            "paired": True if paired is None else paired[repeat], **run,
            **(replicate_run[repeat] if replicate_run else {}),
        }  # fmt: skip
        _write_config(directory, row)
        append_rows_atomic(directory / "run.parquet", [row], RUN_SCHEMA)
        append_rows_atomic(directory / "steps.parquet", steps, STEPS_SCHEMA)
    return directory


def write_ranks_cell(
    sweep: Path,
    cell_id: str,
    backend: str,
    rank_step_ms: Sequence[Sequence[float]],
    nodes: int = 1,
    **run: Any,
) -> Path:
    """A completed cell of one process per entry of `rank_step_ms` (rank r's measured step times,
    after WARMUP_MS on every rank) on `nodes` nodes, recorded as the workload records it: rank 0
    merges the ranks' steps (workloads.cell.recorder). ITEMS items per process and step."""
    directory = Path(sweep) / "cells" / cell_id
    world_size, compiles = len(rank_step_ms), backend != "eager"
    recorder = CellRecorder(cell_id, next_attempt(directory), world_size)
    recorder.items_per_step = ITEMS * world_size
    recorder.run.update({
        **RUN_DEFAULTS, "status": "completed", "backend": backend, "world_size": world_size, "nodes": nodes,
        "items_per_step": recorder.items_per_step, "dist_backend": "gloo" if world_size > 1 else None,
        "graph_count": 1 if compiles else None, "graph_break_count": 0 if compiles else None, **run,
    })  # fmt: skip
    per_node = world_size // nodes
    reports = [
        RankReport(
            rank,
            f"node{rank // per_node}",
            [
                StepRecord(step, phase, ms, 0.0, 4.0 - 0.01 * step)
                for step, (phase, ms) in enumerate(
                    [("warmup", ms) for ms in WARMUP_MS] + [("measure", ms) for ms in times]
                )
            ],
            None,
        )
        for rank, times in enumerate(rank_step_ms)
    ]
    recorder.summarise(reports, compiles, setup_time_s=0.0)
    directory.mkdir(parents=True, exist_ok=True)
    # As the orchestrator writes it: a cell of one process has no `distributed` section.
    _write_config(
        directory, recorder.run, {"nodes": nodes, "tasks_per_node": per_node} if world_size > 1 else None
    )
    recorder.write(directory)
    return directory


def _write_config(directory: Path, row: dict[str, Any], distributed: dict[str, int] | None = None) -> None:
    """The cell's config.yaml, as far as analysis reads it (cells without a result)."""
    config = {
        "model": {"name": row["model"], "arch": None},
        "size": row["size"],
        "seed": row["seed"],
        "backend": {"name": row["backend"], "mode": row.get("compile_mode")},
        "precision": {"name": row["precision"]},
        "data": {"source": row["data_source"]},
        "batch_size": None,
        "grad_accum": None,
        **({"distributed": distributed} if distributed else {}),
    }
    (directory / "config.yaml").write_text(yaml.safe_dump(config))


def write_manifest(sweep: Path, cells: Sequence[dict[str, Any]]) -> Path:
    """manifest.parquet listing these cells (dicts with cell_id and axes), run locally."""
    path = Path(sweep) / MANIFEST_FILE
    rows = [
        {"executor": "local", **{k: v for k, v in cell.items() if k in MANIFEST_SCHEMA.names}}
        for cell in cells
    ]
    write_parquet_atomic(table_from_rows(rows, MANIFEST_SCHEMA), path)
    return path


def write_seminar_sweep(root: Path) -> Path:
    """Cells of the seminar's models (three measured steps each, so that every statistic can be
    checked by hand): gpt2 eager / cudagraphs (not_compiled) / inductor, shakespeare_char eager /
    inductor (slower: against the report) / inductor max-autotune, resnet18 eager / torchscript /
    inductor, resnet34 eager / torchscript (the same times) / inductor (failed)."""
    gpt2 = dict(
        model="gpt",
        size="medium",
        arch="gpt-12x12x768",
        precision="bf16",
        batch_size=12,
        grad_accum=40,
        **H100,
    )
    char = dict(
        model="gpt", size="small", arch="gpt-6x6x384", precision="bf16", batch_size=64, grad_accum=1, **H100
    )
    r18 = dict(model="resnet", size="small", arch="resnet18", precision="tf32", batch_size=128, **H100)
    r34 = dict(model="resnet", size="medium", arch="resnet34", precision="tf32", batch_size=128, **H100)
    mfu = lambda value: [value] * (len(WARMUP_MS) + 3)  # noqa: E731
    write_cell(root, "gpt2-eager", "eager", step_ms=[3000.0, 3010.0, 3020.0], mfu=mfu(0.40), **gpt2)
    write_cell(
        root,
        "gpt2-cudagraphs",
        "cudagraphs",
        status="not_compiled",
        step_ms=[3000.0, 3010.0, 3020.0],
        mfu=mfu(0.40),
        **gpt2,
    )
    write_cell(
        root,
        "gpt2-inductor",
        "inductor",
        step_ms=[2600.0, 2610.0, 2620.0],
        mfu=mfu(0.46),
        compile_mode="default",
        **gpt2,
    )
    write_cell(root, "char-eager", "eager", step_ms=[16.0, 17.0, 18.0], mfu=mfu(0.20), **char)
    write_cell(
        root,
        "char-inductor",
        "inductor",
        step_ms=[19.0, 20.0, 21.0],
        mfu=mfu(0.17),
        compile_mode="default",
        **char,
    )
    write_cell(
        root,
        "char-autotune",
        "inductor",
        step_ms=[12.0, 13.0, 14.0],
        mfu=mfu(0.26),
        compile_mode="max-autotune",
        **char,
    )
    write_cell(root, "r18-eager", "eager", step_ms=[300.0, 310.0, 320.0], **r18)
    write_cell(root, "r18-torchscript", "torchscript", step_ms=[150.0, 160.0, 170.0], **r18)
    write_cell(root, "r18-inductor", "inductor", step_ms=[400.0, 410.0, 420.0], compile_mode="default", **r18)
    write_cell(root, "r34-eager", "eager", step_ms=[240.0, 250.0, 260.0], **r34)
    write_cell(root, "r34-torchscript", "torchscript", step_ms=[260.0, 250.0, 240.0], **r34)
    write_cell(
        root,
        "r34-inductor",
        "inductor",
        status="failed",
        error="BackendCompilerFailed: boom",
        compile_mode="default",
        **r34,
    )
    return root


#: The GEMM cell's own run.parquet columns (workloads/gemm/), for schemas that do not name them yet.
GEMM_FIELDS = [
    ("gemm_m", pa.int64()), ("gemm_n", pa.int64()), ("gemm_k", pa.int64()), ("fp8_recipe", pa.string()),
    ("gemm_us", pa.float64()), ("gemm_tflops", pa.float64()), ("gemm_bytes", pa.float64()),
    ("gemm_gbps", pa.float64()), ("peak_gbps", pa.float64()), ("gemm_floor_us", pa.float64()),
    ("gemm_roofline_share", pa.float64()), ("gemm_bound", pa.string()), ("gemm_kernel", pa.string()),
    ("gemm_autotune_us", pa.float64()), ("gemms_per_replay", pa.int64()),
]  # fmt: skip
GEMM_RUN_SCHEMA = pa.schema(
    [*RUN_SCHEMA, *(pa.field(n, t) for n, t in GEMM_FIELDS if n not in RUN_SCHEMA.names)]
)
#: H100 SXM: 3,350 GB/s of HBM3, 1,979 dense fp8 TFLOP/s (989 bf16).
PEAK_GBPS, PEAK_TFLOPS = 3350.0, {"bf16": 989.0, "fp8": 1979.0}


def write_gemm_cell(
    sweep: Path, cell_id: str, backend: str, precision: str, m: int, step_us: Sequence[float], n: int = 8192,
    k: int = 8192, recipe: str | None = None, status: str = "completed", **run: Any,
) -> Path:  # fmt: skip
    """A GEMM cell (`model=gemm`) of one replicate, M x K by K x N, whose measured replays took `step_us`
    µs per GEMM, with the roofline columns the GEMM workload computes (an H100's peaks)."""
    size = 1 if precision == "fp8" else 2
    nbytes = float(size * (m * k + k * n) + 2 * m * n)  # inputs in their dtype, a bf16 output
    flops = 2.0 * m * n * k
    memory_us, compute_us = nbytes / (PEAK_GBPS * 1e3), flops / (PEAK_TFLOPS[precision] * 1e6)
    directory = Path(sweep) / "cells" / cell_id
    directory.mkdir(parents=True, exist_ok=True)
    row = {
        **RUN_DEFAULTS, **H100, "model": "gemm", "size": f"{m}x{n}x{k}", "cell_id": cell_id, "attempt": 1,
        "repeat": 0, "status": status, "backend": backend, "precision": precision, "items_per_step": 1,
        "gemm_m": m, "gemm_n": n, "gemm_k": k, "fp8_recipe": recipe, "gemm_bytes": nbytes,
        "peak_gbps": PEAK_GBPS, "gemm_floor_us": max(memory_us, compute_us),
        "gemm_bound": "memory" if memory_us >= compute_us else "compute",
        "gemm_kernel": "cublas" if backend == "eager" else "triton_tem_fused_0", "gemms_per_replay": 10,
        **({} if backend == "eager" else {"compile_mode": "max-autotune-no-cudagraphs"}), **run,
    }  # fmt: skip
    _write_config(directory, row)
    append_rows_atomic(directory / "run.parquet", [row], GEMM_RUN_SCHEMA)
    if status == "completed":
        times = [*WARMUP_MS, *(us / 1e3 for us in step_us)]
        steps = [
            {"cell_id": cell_id, "attempt": 1, "step": i, "step_time_ms": ms, "items": 1,
             "phase": "warmup" if i < len(WARMUP_MS) else "measure"}
            for i, ms in enumerate(times)
        ]  # fmt: skip
        append_rows_atomic(directory / "steps.parquet", steps, STEPS_SCHEMA)
    return directory
