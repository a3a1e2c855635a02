"""Does the host's speed hold still if the measuring thread stays on one CPU, or if Python's garbage
collector is off? Blocks of compiled and `force_eager` steps (a paired cell's two sides) under each
condition, in ONE process, rounds in random order:

    PYTHONPATH=. python examples/benchmarks/host_pinning.py --arch resnet50d [--rounds 10] [--block 20]

Conditions: `free` (the thread may run on every allowed CPU, as a cell does today), `pinned` (the
thread on one allowed CPU, not CPU 0), `nogc` (gc disabled during the block), `pinned_nogc`. Prints,
per condition, the median of the compiled blocks' medians, their spread (max/min over rounds) and
the median eager/compiled ratio with its spread. The suite's settings: timm, 224 px, batch 128,
bf16, inductor, synthetic data. Run it in several processes to compare one process with the next
(docs/gpu-results.md, "Does pinning the measuring thread hold the host still?").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import statistics

import torch

from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.cell.step_timer import CudaTimer
from workloads.instruments.host_load import op_overhead_us
from workloads.train_cell import prepare_cell

CONDITIONS = ("free", "pinned", "nogc", "pinned_nogc")


@contextlib.contextmanager
def condition(name: str, cpu: int):
    allowed = os.sched_getaffinity(0)
    was_enabled = gc.isenabled()
    try:
        if "pinned" in name:
            os.sched_setaffinity(0, {cpu})  # pid 0: the calling thread only
        if "nogc" in name:
            gc.disable()
        yield
    finally:
        os.sched_setaffinity(0, allowed)
        if was_enabled:
            gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", default="resnet50d")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args()
    config = {
        "model": {"name": "timm", "arch": args.arch},
        "size": "small",
        "batch_size": 128,
        "precision": {"name": "bf16"},
        "device": "cuda",
        "backend": {"name": "inductor"},
        "seed": 1337,
    }
    cell = prepare_cell(cell_config_from_dict(config), CellRecorder("pinning", 1))
    step = cell.step
    cpu = max(os.sched_getaffinity(0) - {0})

    def compiled(k: int):
        return CudaTimer().block(step, k)

    def eager(k: int):
        with torch.compiler.set_stance("force_eager"):
            return CudaTimer().block(step, k)

    for _ in range(3):
        compiled(1)  # the compile
    eager(5)
    compiled(5)
    order = random.Random(1)
    blocks: dict[str, dict[str, list[float]]] = {c: {"compiled": [], "eager": []} for c in CONDITIONS}
    host_us = [op_overhead_us(cell.device)]
    for _ in range(args.rounds):
        for name in order.sample(CONDITIONS, len(CONDITIONS)):
            sides = [("compiled", compiled), ("eager", eager)]
            order.shuffle(sides)
            with condition(name, cpu):
                for side, block in sides:
                    blocks[name][side].append(statistics.median(one.step_ms for one in block(args.block)))
        host_us.append(op_overhead_us(cell.device))
    summary = {"arch": args.arch, "cpu": cpu, "host_op_us": [round(u, 2) for u in host_us if u is not None]}
    for name, sides in blocks.items():
        ratios = [e / c for e, c in zip(sides["eager"], sides["compiled"], strict=True)]
        summary[name] = {
            "compiled_ms": round(statistics.median(sides["compiled"]), 2),
            "compiled_spread": round(max(sides["compiled"]) / min(sides["compiled"]), 3),
            "eager_ms": round(statistics.median(sides["eager"]), 2),
            "ratio": round(statistics.median(ratios), 4),
            "ratio_spread": round(max(ratios) / min(ratios), 3),
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
