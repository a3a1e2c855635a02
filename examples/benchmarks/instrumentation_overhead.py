"""What does measuring cost? The instrumented loop (`run_steps`: a device sync and timers at
every step, the loss read back, a step row recorded) against a bare loop over the same
prepared cell (the same training step, one sync at the very end), alternated A/B in one process.

    python examples/benchmarks/instrumentation_overhead.py [--device cuda] [--rounds 5] [--steps 100]
"""

from __future__ import annotations

import argparse
import statistics
import time

from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import run_steps, synchronize
from workloads.train_cell import prepare_cell

CASES = {
    "cuda": [("gpt", "small", "inductor"), ("gpt", "small", "cudagraphs"), ("resnet", "small", "inductor")],
    "cpu": [("gpt", "tiny", "eager"), ("resnet", "tiny", "eager")],
}


def bare_loop(step, n: int, device) -> float:
    """Seconds per step of n back-to-back steps, synchronised once at the end."""
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    synchronize(device)
    return (time.perf_counter() - t0) / n


def instrumented_loop(step, n: int, device, rec: CellRecorder) -> float:
    """Seconds per step, wall clock, of the loop that cells run (bookkeeping included)."""
    t0 = time.perf_counter()
    run_steps(step, 0, n, device, rec.on_step)
    return (time.perf_counter() - t0) / n


def measure(model: str, size: str, backend: str, device_name: str, rounds: int, steps: int) -> dict:
    precision = "bf16" if device_name == "cuda" else "fp32"
    cfg = cell_config_from_dict(
        {
            "model": {"name": model},
            "size": size,
            "backend": {"name": backend},
            "precision": {"name": precision},
            "device": device_name,
        }
    )
    rec = CellRecorder("overhead", 1)
    cell = prepare_cell(cfg, rec)
    run_steps(cell.step, 0, 10, cell.device, lambda _: None)  # compile and settle before timing
    bare, inst = [], []
    for _ in range(rounds):
        bare.append(bare_loop(cell.step, steps, cell.device))
        inst.append(instrumented_loop(cell.step, steps, cell.device, rec))
    b, i = statistics.median(bare), statistics.median(inst)
    return {
        "case": f"{model}-{size}-{backend}",
        "bare_ms": b * 1e3,
        "instrumented_ms": i * 1e3,
        "overhead_pct": (i / b - 1) * 100,
        "spread_bare_pct": (max(bare) / min(bare) - 1) * 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=sorted(CASES), default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rows = [measure(*case, args.device, args.rounds, args.steps) for case in CASES[args.device]]
    print("| case | bare loop ms/step | instrumented ms/step | overhead % | bare spread (max/min-1) % |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['case']} | {r['bare_ms']:.3f} | {r['instrumented_ms']:.3f} | {r['overhead_pct']:+.2f} | "
            f"{r['spread_bare_pct']:.2f} |"
        )


if __name__ == "__main__":
    main()
