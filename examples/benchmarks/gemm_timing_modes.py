"""The GEMM cell's two timing modes against a direct CUDA-graph timing of the same GEMMs (issue 40,
item 3; docs/gemm.md "Timing modes"), in one GPU run:

    PYTHONPATH=. python examples/benchmarks/gemm_timing_modes.py --out OUT [--ms 1 16 256 4096]

For bf16 and fp8 (tensorwise) cuBLAS GEMMs at N = K = 8192 and each M, in this order: a direct
timing (DIRECT_GEMMS GEMMs in CUDA graphs between two CUDA events, each timing after the burst cell's
idle pause and a short untimed lead-in; the median of `--timings`), a `gemm.timing=burst`
cell and a `gemm.timing=sustained` cell (`workloads.run.run_cell` in this process; their files under
OUT/cells/). Prints per row the µs of each, burst / direct, sustained / burst, and the SM clock each
ran at (NVML: the cells' recorded `sm_clock_mhz`, the direct timing's own samples taken halfway
through each timing) with the cells' `clock_limits`, and judges two checks:

    agrees      |burst / direct - 1| <= 2%
    explained   sustained / burst - 1 <= (burst MHz / sustained MHz - 1) + 2%: the sustained cell is
                no slower than its lower clock accounts for (a compute-bound GEMM's time scales
                with the clock, a memory-bound one's less)

The table goes to stdout and OUT/results.txt, the rows to OUT/results.csv. Exit 1 where a check
failed, 0 otherwise. About 2.5-3.5 minutes on an H100 with the defaults (a sustained cell waits for
the board's idle power to settle before it is built: 2-10 s).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from workloads.cell.config import BackendConfig
from workloads.cell.config_io import cell_config_from_dict
from workloads.gemm.bursts import BURST_LEAD_REPLAYS, BURST_PAUSE_S, BURST_REPLAYS
from workloads.gemm.kernels import build_gemm, make_operands
from workloads.gemm.shapes import GemmShape
from workloads.gemm.timing import GEMMS_PER_REPLAY
from workloads.instruments.nvml import ClockReader
from workloads.run import run_cell

#: GEMMs per direct timing: as many as a burst times (200, issue 40's direct timing).
DIRECT_GEMMS = BURST_REPLAYS * GEMMS_PER_REPLAY
#: GEMMs queued untimed before each direct timing, as a burst's lead-in replays.
DIRECT_LEAD_GEMMS = BURST_LEAD_REPLAYS * GEMMS_PER_REPLAY
#: The checks' tolerance: burst against direct, and the sustained slowdown beyond the clocks'.
TOLERANCE = 0.02
N = K = 8192


def direct_timing(
    precision: str, m: int, timings: int, clocks: ClockReader | None
) -> tuple[float, float | None]:
    """(median µs per GEMM, mean SM MHz of its samples) of `timings` timings of DIRECT_GEMMS GEMMs, each
    after BURST_PAUSE_S idle and DIRECT_LEAD_GEMMS untimed: two CUDA graphs of half of them replayed
    back to back between two events, the clock sampled once the first half has run."""
    device = torch.device("cuda")
    operands = make_operands(GemmShape(m, N, K), precision, "tensorwise", device, seed=1337)
    gemm = build_gemm(BackendConfig(), precision, operands)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gemm.call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs = []
    for count in (DIRECT_LEAD_GEMMS, DIRECT_GEMMS // 2):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(count):
                gemm.call()
        graphs.append(graph)
    lead, half_of_them = graphs
    us, mhz = [], []
    for _ in range(timings):
        torch.cuda.synchronize()
        time.sleep(BURST_PAUSE_S)
        lead.replay()
        start, half, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        half_of_them.replay()
        half.record()
        half_of_them.replay()
        end.record()
        half.synchronize()
        reading = clocks.read()[0] if clocks is not None else None
        if reading is not None:
            mhz.append(reading)
        end.synchronize()
        us.append(start.elapsed_time(end) * 1e3 / DIRECT_GEMMS)
    return statistics.median(us), (statistics.fmean(mhz) if mhz else None)


def cell(out: Path, name: str, precision: str, m: int, timing: str, min_seconds: float) -> dict[str, Any]:
    """The run row of one GEMM cell of this timing, run here."""
    config = {
        "model": {"name": "gemm"},
        "gemm": {"m": m, "n": N, "k": K, "timing": timing},
        "size": "small",
        "precision": {"name": precision, "recipe": "tensorwise"},
        "device": "cuda",
        "steps": 20,
        "warmup_steps": 5,
        "measure": {"min_seconds": min_seconds, "max_steps": 100_000},
    }
    directory = out / "cells" / name
    status = run_cell(cell_config_from_dict(config), directory)
    run = pq.read_table(directory / "run.parquet").to_pylist()[-1]
    if status != "completed":
        raise SystemExit(f"{name}: {status}: {run['error']}")
    return run


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def compare(out: Path, precision: str, m: int, args: argparse.Namespace, clocks: ClockReader | None) -> dict:
    """One GEMM timed the three ways: the times, clocks and limits, their ratios and the two checks."""
    name = f"{precision}-m{m}"
    direct_us, direct_mhz = direct_timing(precision, m, args.timings, clocks)
    burst = cell(out, f"{name}-burst", precision, m, "burst", args.min_seconds)
    sustained = cell(out, f"{name}-sustained", precision, m, "sustained", args.min_seconds)
    b_d = ratio(burst["gemm_us"], direct_us)
    s_b = ratio(sustained["gemm_us"], burst["gemm_us"])
    clock = ratio(burst["sm_clock_mhz"], sustained["sm_clock_mhz"])
    return {
        "gemm": name, "m": m, "precision": precision, "direct_us": direct_us, "burst_us": burst["gemm_us"],
        "sustained_us": sustained["gemm_us"], "burst_over_direct": b_d, "sustained_over_burst": s_b,
        "direct_mhz": direct_mhz, "burst_mhz": burst["sm_clock_mhz"],
        "sustained_mhz": sustained["sm_clock_mhz"], "burst_over_sustained_mhz": clock,
        "burst_limits": burst["clock_limits"],
        "sustained_limits": sustained["clock_limits"], "sustained_w": sustained["avg_power_w"],
        "power_limit_w": sustained["gpu_power_limit_w"],
        "agrees": b_d is not None and abs(b_d - 1) <= TOLERANCE,
        "explained": s_b is not None and clock is not None and s_b - 1 <= (clock - 1) + TOLERANCE,
    }  # fmt: skip


HEADER = (
    f"{'GEMM':>12} {'direct µs':>10} {'burst µs':>9} {'sust. µs':>9} {'b/d':>6} {'s/b':>6} {'MHz d':>6} "
    f"{'MHz b':>6} {'MHz s':>6} {'b/s MHz':>7}  limits: burst | sustained (its W)   checks"
)


def line(row: dict) -> str:
    agrees = "agrees" if row["agrees"] else "DISAGREES"
    checks = f"{agrees}, {'explained' if row['explained'] else 'NOT EXPLAINED'}"
    return (
        f"{row['gemm']:>12} {row['direct_us']:10.2f} {fmt(row['burst_us'], '9.2f')} "
        f"{fmt(row['sustained_us'], '9.2f')} {fmt(row['burst_over_direct'], '6.3f')} "
        f"{fmt(row['sustained_over_burst'], '6.3f')} {fmt(row['direct_mhz'], '6.0f')} "
        f"{fmt(row['burst_mhz'], '6.0f')} {fmt(row['sustained_mhz'], '6.0f')} "
        f"{fmt(row['burst_over_sustained_mhz'], '7.3f')}  {row['burst_limits']} | {row['sustained_limits']} "
        f"({fmt(row['sustained_w'], '.0f')} W of {fmt(row['power_limit_w'], '.0f')})   {checks}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="directory for the cells, results.txt/.csv")
    parser.add_argument("--ms", type=int, nargs="+", default=[1, 16, 256, 4096], help="the Ms (N = K = 8192)")
    parser.add_argument("--timings", type=int, default=10, help="direct timings per GEMM (their median)")
    parser.add_argument("--min-seconds", type=float, default=5.0, help="sustained cells' measure.min_seconds")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    precisions = ["bf16", "fp8"] if torch.cuda.get_device_capability() >= (8, 9) else ["bf16"]
    clocks = ClockReader.open(torch.device("cuda"))
    began = time.perf_counter()
    lines = [
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}; burst pause {BURST_PAUSE_S} s",
        HEADER,
    ]
    print("\n".join(lines), flush=True)
    rows = []
    for m in args.ms:
        for precision in precisions:
            rows.append(compare(args.out, precision, m, args, clocks))
            lines.append(line(rows[-1]))
            print(lines[-1], flush=True)
    if clocks is not None:
        clocks.close()
    failed = sum((not row["agrees"]) + (not row["explained"]) for row in rows)
    lines.append(f"{failed} check(s) failed; {time.perf_counter() - began:.0f} s")
    print(lines[-1])
    (args.out / "results.txt").write_text("\n".join(lines) + "\n")
    with open(args.out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
