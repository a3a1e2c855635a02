"""Packed against unpacked array tasks (issue 28, item 6): the same sweep twice through a real
single-node Slurm on this machine's GPUs, once one cell per task, once `cluster.cells_per_task=N`.

Per run: Slurm jobs (array tasks), the wall time from just before `compilebench sweep` to the last
result, the GPU's idle gap before each cell, the `python -m workloads.run` processes (each imports
torch) per cell, cold compiles per inductor cell and their compile time; then `compilebench compare`
of the two runs (packing must not change the answers) and `compilebench analyze` of each. The
compile cache is the Slurm default `per_job`: an unpacked cell compiles cold, a packed one finds
what the cells before it in its task compiled. The sweep directories go into OUT, as tar.gz.

A cell's gap is its `started_at` minus the `finished_at` of the cell before it in its lane: on its
node, bound to the same CPUs. Jobs that run side by side on one node (one per GPU) are each bound to
CPUs of their own (`LocalSlurm(bind_cores=True)`), and the next job takes the CPUs and the GPU the
ended one gave back, so a lane is one GPU's sequence of cells. A lane's first cell has no gap: the
wait for the first jobs is the same however the cells are packed. `finished_at` is taken before the
cell writes its files and exits; `started_at` in `run_cell` (workloads/run.py), once the process
has imported torch and workloads/. So an unpacked cell's gap covers the previous process's file
writes and exit, its job's end, the queueing and start of the next task (submitit included), the
new process's start and its import of torch; the model's library (timm), dynamo and the CUDA
context come after `started_at`, within the cell. A packed cell's process was started ahead and has
imported torch, timm and dynamo and made its CUDA context before its turn: its gap is the hand-over
(the previous cell's writes and, where that one still held device memory, its exit; the turn passed
on), unless it is the first of its task.

    bash tests/helpers/slurm/unpack_debs.sh .carry/slurm          # where apt works
    PYTHONPATH=/tmp/site:. python examples/benchmarks/packing_study.py --prefix .carry/slurm \\
        --root-dir /tmp/sweeps/pack_study --out "$OUT" -- +suite=timm_train measure.min_seconds=2 \\
        model.arch=vit_small_patch16_224,deit_small_patch16_224,resmlp_12_224,mobilenetv2_100,dla34,\\
repvgg_a2,vit_base_patch16_224,deit_base_patch16_224,mixer_b16_224,resnet18,pit_s_224,lcnet_100

`--reanalyse` reads the two sweeps of an earlier study again (unpacked from its tar.gz files into
--root-dir) and writes the tables anew; wall times are the study's own (summary.csv), not re-read.

A rehearsal on a machine without a GPU (one placeholder H100, CPU cells; its numbers mean nothing):

    PYTHONPATH=. python examples/benchmarks/packing_study.py --rehearse --root-dir /tmp/pack-rehearsal \\
        --cells-per-task 2 -- model=gpt size=tiny backend=eager,inductor device=cpu precision=fp32 \\
        steps=3 measure.min_seconds=0.5 seed=0,1
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd

from examples.benchmarks.slurm_gpu_sweep import _packed, follow, real_gpus
from orchestrator.executors.slurm.packing import split_place
from orchestrator.executors.status import sweep_status
from tests.helpers.slurm.cluster import LocalSlurm
from tests.helpers.slurm.install import SlurmInstall
from workloads.contract.attempts import replicate_attempts
from workloads.contract.schema import RUN_SCHEMA
from workloads.contract.sweep_dir import cell_dir, read_files, read_manifest
from workloads.contract.vocabulary import COMPLETED, QUEUED, STATUSES

MODES = ("unpacked", "packed")
CLI = [sys.executable, "-m", "orchestrator.cli.main"]
HITS = ["fx_graph_cache_hits", "aot_autograd_cache_hits"]
#: What the study reads of the run rows.
RUN_COLUMNS = [
    "cell_id",
    "model",
    "arch",
    "backend",
    "status",
    "node_name",
    "cpu_affinity",
    "started_at",
    "finished_at",
    "compile_time_s",
    "compile_cache_warm",
    *HITS,
    "fx_graph_cache_misses",
    "aot_autograd_cache_misses",
    "median_step_ms",
]
#: A lane: one GPU's cells in turn (module doc).
LANE = ["node_name", "cpu_affinity"]
#: The per-cell table's columns (fx_graph, aot_autograd: that cache's hits/misses).
CELL_COLUMNS = [
    "mode",
    "cell_id",
    "arch",
    "backend",
    "status",
    "job_id",
    "gap_s",
    "compile_s",
    "compile_cache_warm",
    "fx_graph",
    "aot_autograd",
    "processes",
    "median_step_ms",
]


def placeholder_gpu(slurm_root: Path) -> dict[str, list[str]]:
    """One typed GPU without a device behind it (an empty file, as LocalSlurm's placeholders)."""
    device = slurm_root / "dev" / "placeholder-gpu0"
    device.parent.mkdir(parents=True, exist_ok=True)
    device.touch()
    return {"H100": [str(device)]}


def run_sweep(cluster: LocalSlurm, sweep_dir: Path, overrides: list[str], timeout_s: float) -> float:
    """Submit the sweep, follow it until no cell is queued (or the timeout), cancel what is left.
    Returns the seconds from just before the submission to the last result (to the end of following
    where cells were left queued)."""
    submitted = pd.Timestamp.now(tz="UTC")
    command = [*CLI, "sweep", *overrides, f"hydra.sweep.dir={sweep_dir}"]
    print("$", " ".join(command), flush=True)
    result = cluster.run(*command, check=False, timeout=600)
    print(result.stdout, result.stderr, flush=True)
    if result.returncode != 0:
        raise SystemExit(f"compilebench sweep exited with {result.returncode}")
    follow(cluster, sweep_dir, timeout_s)
    ended = pd.Timestamp.now(tz="UTC")
    with cluster.activated():
        queued_left = any(row.state in QUEUED for row in sweep_status(sweep_dir))
    cluster.run("scancel", f"--name=compilebench-{sweep_dir.name}", check=False)
    last = ended if queued_left else replicate_rows(sweep_dir)["finished_at"].max()
    return (last - submitted).total_seconds()


def replicate_rows(sweep_dir: Path) -> pd.DataFrame:
    """The attempt that speaks for each replicate of each cell, in the order they started."""
    table, bad = read_files(
        sorted(sweep_dir.glob("cells/*/run.parquet")), RUN_SCHEMA, [*RUN_COLUMNS, "repeat", "attempt"]
    )
    for path, error in bad:
        print(f"warning: cannot read {path}: {error}", file=sys.stderr)
    return replicate_attempts(table.to_pandas()).sort_values("started_at", ignore_index=True)


def cell_processes(sweep_dir: Path, cell_id: str) -> int:
    """How many `python -m workloads.run` processes of the cell ended: each one's last line in
    stdout.log is `cell <id>: <status>`."""
    log = cell_dir(sweep_dir, cell_id) / "logs" / "stdout.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return len(re.findall(rf"^cell {cell_id}: ({'|'.join(STATUSES)})$", text, flags=re.MULTILINE))


def hits_misses(rows: pd.DataFrame, cache: str) -> pd.Series:
    """`hits/misses` of one compile cache per row ("" where nothing was compiled)."""
    hits, misses = rows[f"{cache}_cache_hits"], rows[f"{cache}_cache_misses"]
    return (hits.astype("Int64").astype(str) + "/" + misses.astype("Int64").astype(str)).where(
        hits.notna(), ""
    )


def cell_table(sweep_dir: Path, mode: str) -> pd.DataFrame:
    """Per replicate: its result, job, idle gap before it in its lane (module doc), compile and cache
    counts (hits/misses), and whether an inductor cell compiled cold (no cache hit)."""
    rows = replicate_rows(sweep_dir)
    before = rows.groupby(LANE, dropna=False)["finished_at"].shift()
    jobs = read_manifest(sweep_dir).set_index("cell_id")["job_id"]
    inductor = rows["backend"] == "inductor"
    table = rows.assign(
        mode=mode,
        arch=rows["arch"].fillna(rows["model"]),
        job_id=rows["cell_id"].map(jobs),
        gap_s=(rows["started_at"] - before).dt.total_seconds().round(2),
        compile_s=rows["compile_time_s"].round(1),
        fx_graph=hits_misses(rows, "fx_graph"),
        aot_autograd=hits_misses(rows, "aot_autograd"),
        processes=[cell_processes(sweep_dir, cell) for cell in rows["cell_id"]],
        median_step_ms=rows["median_step_ms"].round(3),
        cold=(rows[HITS].fillna(0).sum(axis=1) == 0).astype(float).where(inductor),
    )
    return table[CELL_COLUMNS + ["cold"]]


def summary_row(cells: pd.DataFrame, manifest: pd.DataFrame, wall_s: float | None) -> dict[str, object]:
    """One line of the study's table for one run (`wall_s`: None where the run is read again)."""
    inductor = cells[cells["backend"] == "inductor"]
    tasks = {split_place(job)[0] for job in manifest["job_id"].dropna()}
    return {
        "cells": len(manifest),
        "completed": int((cells["status"] == COMPLETED).sum()),
        "slurm_jobs": len(tasks),
        "wall_s": None if wall_s is None else round(wall_s, 1),
        "gaps": int(cells["gap_s"].notna().sum()),
        "gap_sum_s": round(cells["gap_s"].sum(), 1),
        "gap_median_s": round(cells["gap_s"].median(), 2),
        "processes_per_cell": round(cells["processes"].mean(), 2),
        "cold_per_inductor_cell": round(inductor["cold"].mean(), 2),
        "inductor_compile_median_s": round(inductor["compile_s"].median(), 1),
    }


def shown(command: list[str]) -> str:
    """The command and what it printed."""
    result = subprocess.run(command, capture_output=True, text=True)
    return f"$ {' '.join(command)}  (exit {result.returncode})\n{result.stdout}{result.stderr}"


def run_study(args: argparse.Namespace, sweeps: dict[str, Path], order: list[str]) -> dict[str, float]:
    """Both runs through one local Slurm, in `order`; each sweep packed into OUT as it ends.
    Returns each run's wall time."""
    gpus = placeholder_gpu(args.slurm_root) if args.rehearse else real_gpus()
    gpu_type, devices = next(iter(gpus.items()))
    cpus_per_gpu = args.cpus_per_gpu or (os.cpu_count() or 1) // len(devices)
    began = time.monotonic()
    warmed = subprocess.run([sys.executable, "-c", "import torch, timm, torch._dynamo"], check=True)
    print(f"host warmed ({warmed.args[-1]}): {time.monotonic() - began:.1f} s", flush=True)

    walls = {}
    install = SlurmInstall(args.prefix.resolve() if args.prefix else None)
    with LocalSlurm(args.slurm_root, install=install, gpus=gpus, bind_cores=True) as cluster:
        print(cluster.run("sinfo", "-N", "-o", "%N %P %t %G").stdout, flush=True)
        partition = [] if gpu_type in cluster.partitions else [f"+cluster.partitions.{gpu_type}=grete-h100"]
        for mode in order:
            per_task = 1 if mode == "unpacked" else args.cells_per_task
            overrides = [
                "cluster=test_slurm",
                f"cluster.gpu_type={gpu_type}",
                f"cluster.cpus_per_gpu={cpus_per_gpu}",
                f"cluster.cells_per_task={per_task}",
                *partition,
                *args.overrides,
            ]
            walls[mode] = run_sweep(cluster, sweeps[mode], overrides, args.timeout)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                with tarfile.open(args.out / f"{mode}.tar.gz", "w:gz") as tar:
                    tar.add(sweeps[mode], arcname=f"{args.root_dir.name}/{mode}", filter=_packed)
    return walls


def report(sweeps: dict[str, Path], order: list[str], walls: dict[str, float], out: Path | None) -> bool:
    """The study's tables, `compilebench compare` of the two runs and `analyze` of each: printed,
    and written into `out`. True when every cell of both runs completed."""
    tables = [cell_table(sweeps[mode], mode) for mode in order]
    summary = {
        mode: summary_row(table, read_manifest(sweeps[mode]), walls.get(mode))
        for mode, table in zip(order, tables)
    }
    summary_table = pd.DataFrame.from_dict(summary, orient="index").rename_axis("mode")
    cells = pd.concat(tables, ignore_index=True)[CELL_COLUMNS]
    text = "\n\n".join(
        [
            summary_table.to_string(),
            cells.to_string(index=False),
            shown([*CLI, "compare", str(sweeps[order[0]]), str(sweeps[order[1]])]),
            *(shown([*CLI, "analyze", str(sweeps[mode]), "--no-plots"]) for mode in order),
        ]
    )
    print(text, flush=True)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "study.txt").write_text(text + "\n")
        summary_table.to_csv(out / "summary.csv")
        cells.to_csv(out / "cells.csv", index=False)
    return all(line["completed"] == line["cells"] for line in summary.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", type=Path, help="unpacked Debian packages of Slurm (default: installed)")
    parser.add_argument(
        "--slurm-root", type=Path, default=Path("/tmp/cb-pack-study"), help="the cluster's files"
    )
    parser.add_argument("--root-dir", type=Path, required=True, help="the two sweep directories go here")
    parser.add_argument("--cells-per-task", type=int, default=12, help="cells per task of the packed run")
    parser.add_argument("--first", choices=MODES, default="unpacked", help="which run goes first")
    parser.add_argument("--cpus-per-gpu", type=int, help="default: this machine's CPUs over its GPUs")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to follow each run")
    parser.add_argument("--out", type=Path, help="directory for the sweeps' tar.gz and study.txt")
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="no GPU here: offer one placeholder H100 (an empty file) and run CPU cells (pass device=cpu)"
        " through the same code; a rehearsal of the study, its numbers say nothing about packing on GPUs",
    )
    parser.add_argument(
        "--reanalyse",
        action="store_true",
        help="run nothing: read an earlier study's two sweeps (unpacked into --root-dir), write the tables",
    )
    parser.add_argument("overrides", nargs="*", help="compilebench sweep overrides of both runs (after --)")
    args = parser.parse_args()
    sweeps = {mode: args.root_dir / mode for mode in MODES}
    order = [args.first, *(mode for mode in MODES if mode != args.first)]
    if args.reanalyse:
        if missing := [str(path) for path in sweeps.values() if not path.is_dir()]:
            raise SystemExit(f"--reanalyse: no sweep at {', '.join(missing)}")
        walls = {}
    elif any(path.exists() for path in sweeps.values()):
        raise SystemExit(f"{args.root_dir} holds an earlier study: choose a new --root-dir")
    else:
        walls = run_study(args, sweeps, order)
    return 0 if report(sweeps, order, walls, args.out) else 1


if __name__ == "__main__":
    sys.exit(main())
