"""The GPU's busy share of real cells (docs/measurement.md "Device time and the host"): which cells
are launch-bound, and whether the kernels that CUDA graphs replay are seen.

    PYTHONPATH=. python examples/benchmarks/busy_share_gpu.py [--batches 16 256] [--min-seconds 2]

Each cell runs in a fresh `python -m workloads.run` process (no Hydra): gpt small bf16 eager,
inductor and cudagraphs, and resnet50 (timm) bf16 inductor at a small and a large batch; compiled
cells measure paired, so their eager side is profiled too. Per cell it prints the measured median
step, the busy share of each side with its profiled step (the profiler's cost shows beside the
median), the host's µs per tiny op, the label analysis gives the cell's own side (its GPU time per step
against its median step: analysis/cells/device_time.py LAUNCH_BOUND), and the compiled cells' accuracy
check with its cost.
It checks that every share lies in (0, 1] and that the cudagraphs cell's is above 0 (CUPTI reported
the replayed kernels); exit 1 if not.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

from analysis.cells.device_time import LAUNCH_BOUND
from examples.benchmarks.paired_gpu import run_cell


def share(value: object) -> str:
    return "-" if pd.isna(value) else f"{100 * float(value):5.1f}%"


def ms(value: object) -> str:
    return "-" if pd.isna(value) else f"{float(value):8.3f}"


def label(gpu_ms: object, step_ms: object) -> str:
    """The analysis' label of a side (analysis/cells/device_time.py): its GPU idle beyond LAUNCH_BOUND
    of its measured step."""
    if pd.isna(gpu_ms) or pd.isna(step_ms):
        return ""
    return "launch-bound" if 1 - float(gpu_ms) / float(step_ms) > LAUNCH_BOUND else ""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", nargs=2, type=int, default=[16, 256], metavar=("SMALL", "LARGE"))
    parser.add_argument("--min-seconds", type=float, default=2.0, help="measure.min_seconds of each cell")
    args = parser.parse_args()
    common = {"precision": {"name": "bf16"}, "device": "cuda", "measure": {"min_seconds": args.min_seconds}}
    gpt = {"model": {"name": "gpt"}, "size": "small", **common}
    resnet = {"model": {"name": "resnet"}, "size": "large", **common}
    cells = [(f"gpt-small-{b}", {**gpt, "backend": {"name": b}}) for b in ("eager", "inductor", "cudagraphs")]
    cells += [
        (f"resnet50-b{batch}-inductor", {**resnet, "batch_size": batch, "backend": {"name": "inductor"}})
        for batch in args.batches
    ]
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}, launch-bound above {LAUNCH_BOUND:.0%} idle")
    print(
        f"{'cell':28} {'median ms':>9} {'busy':>6} {'prof. ms':>8} {'eager busy':>10} {'prof. ms':>8} "
        f"{'host µs/op':>10} {'steps':>5} {'cost s':>6}  label"
    )
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in cells:
            _, run = run_cell(Path(tmp, name), **config)
            print(
                f"{name:28} {ms(run['median_step_ms']):>9} {share(run['gpu_busy_share']):>6} "
                f"{ms(run['profiled_step_ms']):>8} {share(run['eager_gpu_busy_share']):>10} "
                f"{ms(run['eager_profiled_step_ms']):>8} {ms(run['host_op_us']):>10} "
                f"{run['profiled_steps']!s:>5} {ms(run['profile_s']):>6}  "
                f"{label(run['gpu_ms_per_step'], run['median_step_ms'])}",
                flush=True,
            )
            if pd.notna(run["accuracy"]):
                print(
                    f"{'':28} accuracy {run['accuracy']}: {run['accuracy_rel_diff']:.3g} against eager "
                    f"(eager's rerun {run['accuracy_noise_floor']:.3g}, "
                    f"limit {run['accuracy_tolerance']:.3g}), {run['accuracy_s']:.1f} s",
                    flush=True,
                )
            for column in ("gpu_busy_share", "eager_gpu_busy_share"):
                value = run[column]
                if (column == "gpu_busy_share" or run["paired"]) and not (pd.notna(value) and 0 < value <= 1):
                    failed.append(f"{name}: {column} {value} not in (0, 1]")
    print(
        "\n".join(failed) if failed else "checks: every share in (0, 1]; the cudagraphs cell's replays seen"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
