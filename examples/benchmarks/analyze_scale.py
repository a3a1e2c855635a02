"""How long does `compilebench analyze` take on a large sweep? Writes a sweep of N cells x S measured
steps through the project's writers (tests/helpers/analysis_sweeps.py:
workloads.contract.schema.append_rows_atomic,
the orchestrator's manifest schema), then times the analysis (read every file, per-cell statistics
with bootstrap intervals, all tables including the seminar comparison, the report's tables written)
and, separately, the figures.

    PYTHONPATH=. python3 examples/benchmarks/analyze_scale.py [--cells 1000] [--steps 1000] [--dir DIR]
                                                           [--no-plots]

The grid: gpt and resnet at five sizes x four precisions x five batch sizes = 200 workloads, each
under eager, inductor, inductor max-autotune, aot_eager and cudagraphs; one cell in 50 failed, one
in 50 not_compiled. Step times are lognormal around a workload's base time; every number is drawn
from a seeded generator, none is a measurement.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from analysis.report import analyze, render_tables, write_report
from tests.helpers.analysis_sweeps import write_cell, write_manifest

MODELS = ("gpt", "resnet")
SIZES = ("tiny", "small", "medium", "large", "xl")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
BATCHES = (8, 16, 32, 64, 128)
#: (backend, compile mode, step time relative to eager)
BACKENDS = (
    ("eager", None, 1.0),
    ("inductor", "default", 0.8),
    ("inductor", "max-autotune", 0.75),
    ("aot_eager", None, 1.05),
    ("cudagraphs", None, 0.9),
)
WARMUP_STEPS = 3


def write_sweep(root: Path, cells: int, steps: int, seed: int = 0) -> None:
    """A sweep directory with `cells` cells of `steps` measured steps each."""
    rng = np.random.default_rng(seed)
    grid = itertools.product(MODELS, SIZES, PRECISIONS, BATCHES, BACKENDS)
    listed = []
    for index, (model, size, precision, batch, (backend, mode, factor)) in zip(range(cells), grid):
        cell_id = f"{index:05d}"
        base = 10.0 * (1 + SIZES.index(size)) * batch / 8
        status = (
            "failed"
            if index % 50 == 7
            else "not_compiled"
            if index % 50 == 19 and backend != "eager"
            else "completed"
        )
        total = WARMUP_STEPS + steps
        times = rng.lognormal(np.log(base * factor), 0.05, steps)
        warmup = [base * 50.0] + [base * factor] * (WARMUP_STEPS - 1)  # the first step compiles
        loss = 4.0 * np.exp(-np.arange(total) / steps) * (1 + rng.normal(0, 1e-3, total))
        write_cell(
            root,
            cell_id,
            backend,
            status=status,
            step_ms=None if status == "failed" else times,
            warmup_ms=warmup,
            data_ms=rng.exponential(0.05 * base, total),
            loss=loss,
            mfu=rng.uniform(0.2, 0.5, total),
            model=model,
            size=size,
            precision=precision,
            batch_size=batch,
            compile_mode=mode,
            peak_mem_bytes=int(2**30 * base),
            error="RuntimeError: synthetic failure" if status == "failed" else None,
        )
        listed.append(
            {
                "cell_id": cell_id,
                "model": model,
                "size": size,
                "backend": backend,
                "compile_mode": mode,
                "precision": precision,
            }
        )
    write_manifest(root, listed)


#: The steps of the pure-Python loop timed beside the analysis: the machine's speed at that moment, so
#: that times from machines, or loads, that differ can be compared as ratios.
LOOP_STEPS = 20_000_000


def python_loop_s() -> float:
    """Seconds of a LOOP_STEPS-step pure-Python loop."""
    start = time.perf_counter()
    for _ in range(LOOP_STEPS):
        pass
    return time.perf_counter() - start


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo (Linux), else the architecture."""
    cpuinfo = Path("/proc/cpuinfo")
    names = (
        [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text().splitlines()
            if line.startswith("model name")
        ]
        if cpuinfo.exists()
        else []
    )
    return names[0] if names else platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None, help="sweep directory (default: a temporary one)")
    parser.add_argument(
        "--plots", action=argparse.BooleanOptionalAction, default=True, help="time the figures too"
    )
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="analyze_scale."))
    if not (root / "manifest.parquet").exists():
        start = time.perf_counter()
        write_sweep(root, args.cells, args.steps)
        print(f"wrote {args.cells} cells x {args.steps} steps in {time.perf_counter() - start:.1f} s: {root}")

    loop_s = python_loop_s()
    start = time.perf_counter()
    analysis = analyze(root, reference="seminar", warn=None)
    render_tables(analysis, "markdown")
    write_report(analysis, with_plots=False)
    tables_s = time.perf_counter() - start
    print(f"{analysis.count_line()}; {len(analysis.data.steps):,} step rows")
    print(
        f"analysis (read, statistics, bootstrap, all tables, report tables): {tables_s:.2f} s; "
        f"a {LOOP_STEPS:,}-step Python loop on this run: {loop_s:.2f} s"
    )
    if args.plots:
        start = time.perf_counter()
        write_report(analysis, with_plots=True)
        print(f"report with figures (PNG + SVG): {time.perf_counter() - start:.2f} s")
    print(
        f"machine: {len(os.sched_getaffinity(0))} of {os.cpu_count()} CPU cores ({cpu_model()}), "
        f"load average {os.getloadavg()[0]:.1f}, Python {platform.python_version()}"
    )
    if args.dir is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
