"""Paired against unpaired on the GPU: is a compiled cell's own eager baseline (alternating blocks in
one process, docs/measurement.md "Paired measurement") as good a baseline as the eager cell?

    python examples/benchmarks/paired_gpu.py [--size small] [--backends inductor cudagraphs] [--rounds 2]

Each round runs, each in a fresh `python -m workloads.run` process: the eager cell, then each compiled
backend unpaired and paired (gpt, bf16, the default measuring). It prints per backend the unpaired
speedup (eager cell's median step / the compiled cell's), and the paired one as `compilebench analyze`
reads it (analysis/cells/paired.py): the median of the pairs' ratios (eager block median / compiled block
median) with its 95% bootstrap interval over pairs. (At b758b0b, whose numbers docs/gpu-results.md
gives, the script drew its own percentile bootstrap over the same ratios, 2000 resamples.)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from analysis.cells.loaded import open_sweep
from workloads.contract.sweep_dir import cell_dir


def run_cell(directory: Path, **config) -> tuple[pd.DataFrame, pd.Series]:
    """One cell in a process of its own; its measured steps and its run row."""
    directory.mkdir(parents=True)  # SWEEP/cells/<id>, as a sweep lays it out
    (directory / "config.yaml").write_text(yaml.safe_dump({**config, "cell_id": directory.name}))
    done = subprocess.run(
        [sys.executable, "-m", "workloads.run", str(directory / "config.yaml"), "--cell-dir", str(directory)],
        capture_output=True,
        text=True,
    )
    run = pd.read_parquet(directory / "run.parquet").iloc[-1]
    if done.returncode != 0:
        raise SystemExit(f"{directory.name}: {run['status']}: {run['error']}\n{done.stderr[-2000:]}")
    steps = pd.read_parquet(directory / "steps.parquet")
    return steps[steps["phase"] == "measure"], run


def paired_speedup(directory: Path) -> pd.Series:
    """The paired cell's speedup as `compilebench analyze` reads it (analysis/cells/paired.py): the median of
    its pair ratios with the bootstrap interval over pairs, and how many pairs."""
    (row,) = open_sweep(directory.parents[1], [directory.name], warn=None).metrics.to_dict("records")
    return pd.Series(row)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="small")
    parser.add_argument("--backends", nargs="+", default=["inductor", "cudagraphs"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    base = {"model": {"name": "gpt"}, "size": args.size, "precision": {"name": "bf16"}, "device": "cuda"}
    print(f"gpt {args.size} bf16, torch {__import__('torch').__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            eager, _ = run_cell(cell_dir(tmp, f"r{round_}-eager"), **base, backend={"name": "eager"})
            eager_ms = eager["step_time_ms"].median()
            print(f"round {round_}: eager cell median step {eager_ms:.3f} ms ({len(eager)} steps)")
            for backend in args.backends:
                cell = {**base, "backend": {"name": backend}}
                alone, _ = run_cell(cell_dir(tmp, f"r{round_}-{backend}"), **cell, measure={"paired": False})
                paired, run = run_cell(cell_dir(tmp, f"r{round_}-{backend}-paired"), **cell)
                if not run["paired"]:
                    print(f"  {backend}: not paired: {run['paired_fallback']}")
                    continue
                speedup = paired_speedup(cell_dir(tmp, f"r{round_}-{backend}-paired"))
                own = paired[paired["side"] == "compiled"]["step_time_ms"].median()
                base_ms = paired[paired["side"] == "eager"]["step_time_ms"].median()
                block = paired.groupby("pair").size().iloc[0] // 2
                print(
                    f"  {backend}: unpaired {eager_ms / alone['step_time_ms'].median():.3f}x "
                    f"(median step {alone['step_time_ms'].median():.3f} ms); "
                    f"paired {speedup['speedup']:.3f}x [{speedup['speedup_low']:.3f}, "
                    f"{speedup['speedup_high']:.3f}] over {speedup['pairs']} pairs (compiled {own:.3f} ms, "
                    f"eager side {base_ms:.3f} ms, {block} steps a block)"
                )


if __name__ == "__main__":
    main()
