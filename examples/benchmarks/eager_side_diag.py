"""Is a paired cell's eager side the eager cell? Blocks of steps alternating in ONE process:

    PYTHONPATH=. python examples/benchmarks/eager_side_diag.py BACKEND [--all]

For a compiled BACKEND: the compiled step and the compiled wrapper under `force_eager` (the paired
cell's eager side); with `--all` also the original module called directly (no dynamo at all) and the
original module under `force_eager`. For `eager`: the eager cell's step alone. gpt small, bf16, on
the GPU; 12 rounds of 20-step blocks (order reversed every other round); prints each kind's median of
the blocks' median steps. Run it in several processes to see how much one process differs from the
next (docs/gpu-results.md, "Paired measurement").
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch

from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.cell.step_timer import CudaTimer
from workloads.cell.train import TrainStep
from workloads.train_cell import prepare_cell

ROUNDS, BLOCK = 12, 20


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backend")
    parser.add_argument(
        "--all", action="store_true", help="also the original module, with and without force_eager"
    )
    args = parser.parse_args()
    config = {"model": {"name": "gpt"}, "size": "small", "precision": {"name": "bf16"}, "device": "cuda"}
    cell = prepare_cell(
        cell_config_from_dict({**config, "backend": {"name": args.backend}, "seed": 1337}),
        CellRecorder("diag", 1),
    )
    step = cell.step
    module = getattr(cell.compiled.module, "_orig_mod", cell.compiled.module)
    original = TrainStep(
        model=dataclasses.replace(step.model, module=module),
        update=step.update,
        batches=step.batches,
        precision=step.precision,
        grad_accum=step.grad_accum,
    )

    def forced(train_step: TrainStep):
        def block(k: int):
            with torch.compiler.set_stance("force_eager"):
                return CudaTimer().block(train_step, k)

        return block

    if args.backend == "eager":
        kinds = {"eager": lambda k: CudaTimer().block(original, k)}
    else:
        kinds = {"compiled": lambda k: CudaTimer().block(step, k), "force_eager": forced(step)}
        if args.all:
            kinds |= {
                "original": lambda k: CudaTimer().block(original, k),
                "force_eager+original": forced(original),
            }
    for _ in range(5):
        CudaTimer().block(step, 1)  # the compile
    for block in kinds.values():
        block(10)
    medians: dict[str, list[float]] = {name: [] for name in kinds}
    for round_ in range(ROUNDS):
        for name, block in list(kinds.items())[:: 1 if round_ % 2 == 0 else -1]:
            medians[name].append(statistics.median(one.step_ms for one in block(BLOCK)))
    print(args.backend, {name: round(statistics.median(values), 3) for name, values in medians.items()})


if __name__ == "__main__":
    main()
