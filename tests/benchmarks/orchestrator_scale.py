"""Scale of the orchestrator (issue 3): a 10,000-cell `--dry-run`, and 1,024 cells submitted to a real Slurm.

Both are timed as a user runs them: the whole `compilebench sweep` command in a fresh process,
interpreter start and imports included, on this machine. The submission goes to the tests' local
Slurm (tests/slurm/, needs root and the Debian packages); the submitted jobs are cancelled when
the cluster stops, so nothing trains. sbatch calls are counted as the distinct array job ids in
manifest.parquet (submitit makes one sbatch call per array).

    PYTHONPATH=. python tests/benchmarks/orchestrator_scale.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from tests.slurm.cluster import LocalSlurm

#: 4 sizes x 5 backends x 2 precisions x 250 seeds = 10,000 cells in 40 group selections.
DRY_RUN_GRID = ["cluster=grete", "model=gpt", "size=tiny,small,medium,large",
                "backend=eager,inductor,cudagraphs,aot_eager,torchscript", "precision=fp32,bf16", "seed=range(250)"]
SUBMIT_GRID = ["cluster=test_slurm", "model=gpt", "size=tiny", "backend=eager", "precision=fp32", "device=cpu",
               "steps=1", "warmup_steps=0", "seed=range(1024)", "cluster.array_parallelism=1"]


def timed_sweep(args: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "sweep", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"sweep failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, done


def dry_run(rounds: int, work: Path) -> None:
    times = []
    for i in range(rounds):
        sweep_dir = work / f"dry{i}"
        seconds, done = timed_sweep([*DRY_RUN_GRID, f"hydra.sweep.dir={sweep_dir}", "--dry-run"])
        times.append(seconds)
        scripts = sorted(p.name for p in (sweep_dir / "sbatch").iterdir())
        print(f"dry-run {i + 1}: {seconds:.2f} s; {done.stdout.splitlines()[-1][:90]}...; {len(scripts)} scripts")
    print(f"10,000-cell --dry-run: median {statistics.median(times):.2f} s over {rounds} (min {min(times):.2f}, "
          f"max {max(times):.2f})")


def submit(work: Path) -> None:
    with LocalSlurm(work / "slurm") as cluster:
        sweep_dir = work / "submit"
        seconds, done = timed_sweep([*SUBMIT_GRID, f"hydra.sweep.dir={sweep_dir}"], env=cluster.env())
        manifest = pd.read_parquet(sweep_dir / "manifest.parquet")
        arrays = manifest["job_id"].str.split("_").str[0].nunique()
        queued = len(cluster.run("squeue", "-h", "-r", "-o", "%i").stdout.split())
        print(done.stdout.strip().splitlines()[-1])
        print(f"1,024 cells submitted: {seconds:.2f} s for the whole command; {arrays} sbatch call(s); "
              f"{manifest['job_id'].notna().sum()} job ids in the manifest, {queued} tasks in squeue")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-submit", action="store_true", help="only the dry run (no Slurm here)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="cb-scale-") as tmp:
        dry_run(args.rounds, Path(tmp))
        if not args.skip_submit:
            submit(Path(tmp))


if __name__ == "__main__":
    main()
