"""Scale of the orchestrator: 10,000-cell `--dry-run`s, and 1,024 cells submitted to a real Slurm.

Every command is timed as a user runs it: the installed `compilebench` script in a fresh process,
interpreter start and imports included, on this machine (wall seconds, and the CPU seconds of the
process, which a busy machine moves less). Two dry runs: one group selection with 10,000 seeds (the
plan of 10,000 cells without a directory) and 40 group selections of 250 seeds. The first
alternates with a dry run of the same grid of 2 cells: the difference of the medians per extra cell
is a dry run's cost per cell, a ratio of two runs on one machine, start-up and imports left out.
The submission goes to the tests' local Slurm (tests/helpers/slurm/, needs root and the Debian packages);
the submitted jobs are cancelled when the cluster stops, so nothing trains. sbatch calls are
counted as the distinct array job ids in manifest.parquet (submitit makes one per array). Exit 1
when a dry run's median passes `--limit` seconds.

    PYTHONPATH=. python examples/benchmarks/orchestrator_scale.py [--rounds 3] [--skip-submit] [--limit 5]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from tests.helpers.slurm.cluster import LocalSlurm

#: 10,000 cells: one group selection x 10,000 seeds; 4 sizes x 5 backends x 2 precisions x 250 seeds.
DRY_RUN_GRIDS = {
    "1 selection": ["model=gpt", "size=tiny", "backend=eager", "seed=range(0,10000)", "cluster=grete"],
    "40 selections": [
        "cluster=grete",
        "model=gpt",
        "size=tiny,small,medium,large",
        "backend=eager,inductor,cudagraphs,aot_eager,torchscript",
        "precision=fp32,bf16",
        "seed=range(250)",
    ],
}
#: The 2-cell dry run beside a grid of DRY_RUN_GRIDS: the per-cell cost is measured above it.
BASELINES = {"1 selection": ["model=gpt", "size=tiny", "backend=eager", "seed=range(0,2)", "cluster=grete"]}
SUBMIT_GRID = [
    "cluster=test_slurm",
    "model=gpt",
    "size=tiny",
    "backend=eager",
    "precision=fp32",
    "device=cpu",
    "steps=1",
    "warmup_steps=0",
    "seed=range(1024)",
    "cluster.array_parallelism=1",
]


def timed_sweep(
    args: list[str], env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess, float]:
    """(wall seconds, the finished process, its CPU seconds: user + system)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    command = shutil.which("compilebench")
    if command is None:
        raise SystemExit(
            "no `compilebench` on PATH: pip install -e . first (the benchmark times the user's command)"
        )
    done = subprocess.run(
        [command, "sweep", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    return seconds, done, cpu


def cell_count(done: subprocess.CompletedProcess) -> int:
    """The cells a dry run planned, from its last line (`10000 cell(s): ...`)."""
    return int(re.match(r"(\d+) cell\(s\)", done.stdout.splitlines()[-1]).group(1))


def dry_run(name: str, grid: list[str], rounds: int, work: Path, baseline: list[str] | None) -> float:
    """The median seconds of `rounds` dry runs of `grid`, each printed; with a `baseline` grid, a
    dry run of it after each, and the per-cell cost above it."""
    times, cpus, base_times, base_cpus = [], [], [], []
    for i in range(rounds):
        sweep_dir = work / f"dry-{len(grid)}-{i}"
        seconds, done, cpu = timed_sweep([*grid, f"hydra.sweep.dir={sweep_dir}", "--dry-run"])
        times.append(seconds)
        cpus.append(cpu)
        cells = cell_count(done)
        scripts = sorted(p.name for p in (sweep_dir / "sbatch").iterdir())
        print(
            f"dry-run {i + 1}: {seconds:.2f} s ({cpu:.2f} s CPU); {done.stdout.splitlines()[-1][:90]}...; "
            f"{len(scripts)} scripts"
        )
        if baseline:
            base_seconds, base_done, base_cpu = timed_sweep(
                [*baseline, f"hydra.sweep.dir={work / f'base-{i}'}", "--dry-run"]
            )
            base_times.append(base_seconds)
            base_cpus.append(base_cpu)
            base_cells = cell_count(base_done)
    median = statistics.median(times)
    print(
        f"{cells:,}-cell --dry-run, {name} (compilebench sweep {' '.join(grid)}): median {median:.2f} s "
        f"({statistics.median(cpus):.2f} s CPU) over {rounds} (min {min(times):.2f}, max {max(times):.2f})"
    )
    if baseline:
        per_cell = {
            what: (statistics.median(big) - statistics.median(small)) / (cells - base_cells) * 1e3
            for what, big, small in (("wall", times, base_times), ("CPU", cpus, base_cpus))
        }
        print(
            f"per cell above a {base_cells}-cell dry run (compilebench sweep {' '.join(baseline)}: median "
            f"{statistics.median(base_times):.2f} s, {statistics.median(base_cpus):.2f} s CPU): "
            f"{per_cell['wall']:.3f} ms wall, {per_cell['CPU']:.3f} ms CPU"
        )
    return median


def submit(work: Path) -> None:
    with LocalSlurm(work / "slurm") as cluster:
        sweep_dir = work / "submit"
        seconds, done, _ = timed_sweep([*SUBMIT_GRID, f"hydra.sweep.dir={sweep_dir}"], env=cluster.env())
        manifest = pd.read_parquet(sweep_dir / "manifest.parquet")
        arrays = manifest["job_id"].str.split("_").str[0].nunique()
        queued = len(cluster.run("squeue", "-h", "-r", "-o", "%i").stdout.split())
        print(done.stdout.strip().splitlines()[-1])
        print(
            f"1,024 cells submitted: {seconds:.2f} s for the whole command; {arrays} sbatch call(s); "
            f"{manifest['job_id'].notna().sum()} job ids in the manifest, {queued} tasks in squeue"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-submit", action="store_true", help="only the dry runs (no Slurm here)")
    parser.add_argument("--limit", type=float, default=5.0, help="seconds a dry run's median may take")
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="cb-scale-") as tmp:
        medians = {
            name: dry_run(name, grid, args.rounds, Path(tmp), BASELINES.get(name))
            for name, grid in DRY_RUN_GRIDS.items()
        }
        if not args.skip_submit:
            submit(Path(tmp))
    slow = {name: median for name, median in medians.items() if median > args.limit}
    if slow:
        raise SystemExit(f"slower than {args.limit:g} s: {slow}")


if __name__ == "__main__":
    main()
