"""A `compilebench sweep` through a real single-node Slurm on a GPU machine, typed GPU gres included.

The GPU machines have no package registry, so Slurm comes as Debian packages unpacked here and
carried along (tests/helpers/slurm/unpack_debs.sh); the node offers its real GPUs as typed gres
(`gpu:H100:1`, File=/dev/nvidia0). The sweep is submitted with `cluster=test_slurm` and the GPU
type of this machine, followed until no cell is pending or running, and the evidence printed:
sinfo, each array's `scontrol show job` (partition, gres), the status table, and for every cell
the GPU its workload saw and its median step time. The sweep directory is packed into OUT.

    bash tests/helpers/slurm/unpack_debs.sh .carry/slurm                  # where apt works
    PYTHONPATH=/tmp/site:. python examples/benchmarks/slurm_gpu_sweep.py --prefix .carry/slurm \\
        --sweep-dir /tmp/sweeps/llm --out "$OUT" -- +experiment=seminar_llm steps=30
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd

from orchestrator.executors.status import sweep_status
from tests.helpers.slurm.cluster import LocalSlurm
from tests.helpers.slurm.install import SlurmInstall
from workloads.contract.vocabulary import QUEUED


def real_gpus() -> dict[str, list[str]]:
    """GPU type (`H100` from "NVIDIA H100 80GB HBM3") -> device files, from nvidia-smi."""
    names = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    gpus: dict[str, list[str]] = {}
    for line in names:
        index, name = (part.strip() for part in line.split(",", 1))
        match = re.search(r"\b([A-Z]\d{2,3}[A-Z]?)\b", name)
        device = Path(f"/dev/nvidia{index}")
        if match is None or not device.exists():
            raise SystemExit(f"cannot offer GPU {index} ({name}) as typed gres: no type or no {device}")
        gpus.setdefault(match.group(1), []).append(str(device))
    return gpus


def follow(cluster: LocalSlurm, sweep_dir: Path, timeout_s: float, every_s: float = 10) -> None:
    """Print the state counts until no cell is pending or running (or the timeout)."""
    began = time.monotonic()
    with cluster.activated():
        while True:
            rows = sweep_status(sweep_dir)
            counts = pd.Series([row.state for row in rows]).value_counts().to_dict()
            print(f"[{time.monotonic() - began:4.0f} s] {counts}", flush=True)
            if not any(state in QUEUED for state in counts) or time.monotonic() - began > timeout_s:
                return
            time.sleep(every_s)


def cell_evidence(sweep_dir: Path) -> pd.DataFrame:
    """Per cell, its last attempt: status, job, partition, the GPU the workload saw, median step."""
    columns = [
        "cell_id",
        "arch",
        "backend",
        "status",
        "slurm_job_id",
        "partition",
        "gpu_name",
        "median_step_ms",
    ]
    runs = [pd.read_parquet(path).iloc[[-1]] for path in sorted(sweep_dir.glob("cells/*/run.parquet"))]
    return pd.concat(runs)[columns] if runs else pd.DataFrame(columns=columns)


def _packed(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """What the pack keeps: not submitit's pickles, nor a shared compile cache (gigabytes)."""
    if "/submitit/" in info.name and info.name.endswith(".pkl") or "/compile_cache" in info.name:
        return None
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", type=Path, required=True, help="unpacked Debian packages of Slurm")
    parser.add_argument("--root", type=Path, default=Path("/tmp/cb-slurm"), help="the cluster's files")
    parser.add_argument("--sweep-dir", type=Path, required=True)
    parser.add_argument("--cpus-per-gpu", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=480, help="seconds to follow the sweep")
    parser.add_argument("--out", type=Path, help="directory to write sweep.tar.gz into")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="run `status SWEEP_DIR --retry-failed` (a sweep packed by an earlier run) instead of the sweep",
    )
    parser.add_argument("overrides", nargs="*", help="compilebench sweep overrides (after --)")
    args = parser.parse_args()

    gpus = real_gpus()
    gpu_type = next(iter(gpus))
    # Cores bound: array tasks running side by side on the GPUs of this node get CPUs of their own.
    with LocalSlurm(
        args.root, install=SlurmInstall(args.prefix.resolve()), gpus=gpus, bind_cores=True
    ) as cluster:
        print(cluster.run("sinfo", "-N", "-o", "%N %P %t %G").stdout, flush=True)
        command = (
            [sys.executable, "-m", "orchestrator.cli.main", "status", str(args.sweep_dir), "--retry-failed"]
            if args.retry_failed
            else [
                sys.executable,
                "-m",
                "orchestrator.cli.main",
                "sweep",
                "cluster=test_slurm",
                f"cluster.gpu_type={gpu_type}",
                f"cluster.cpus_per_gpu={args.cpus_per_gpu}",
                *args.overrides,
                f"hydra.sweep.dir={args.sweep_dir}",
            ]
        )
        print("$", " ".join(command), flush=True)
        submitted = cluster.run(*command, check=False, timeout=600)
        print(submitted.stdout, submitted.stderr, flush=True)
        if submitted.returncode != 0:
            return submitted.returncode
        for array_id in sorted(set(re.findall(r"submitted (\d+)", submitted.stdout))):
            shown = cluster.run("scontrol", "show", "job", array_id, check=False).stdout
            print(
                array_id, " ".join(sorted(set(re.findall(r"(?:Partition|TresPerNode|NodeList)=\S+", shown))))
            )
        follow(cluster, args.sweep_dir, args.timeout)
        status = cluster.run(
            sys.executable, "-m", "orchestrator.cli.main", "status", str(args.sweep_dir), check=False
        )
        print(status.stdout, status.stderr)
    print(cell_evidence(args.sweep_dir).to_string(index=False))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.out / f"{args.sweep_dir.name}.tar.gz", "w:gz") as tar:
            tar.add(args.sweep_dir, arcname=args.sweep_dir.name, filter=_packed)
    return status.returncode


if __name__ == "__main__":
    sys.exit(main())
