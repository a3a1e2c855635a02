"""Paired measurement (workloads/cell/paired.py): a compiled cell times its own eager baseline.

Real torch.compile on the CPU (aot_eager), real Parquet through `run_cell`: a paired cell writes
both sides, block by block, in a balanced order of its seed and replicate, and stops by the pairs'
ratios as a brute-force reading of the rule says; the cells that cannot pair say why and measure as
before; an eager side that runs out of memory leaves the cell measuring unpaired. On the CPU a
paired cell's peak memory covers both sides, and analysis gives it no ratio to eager's (each
side's own peak on CUDA: tests/gpu/test_gpu_tier.py).
"""

from __future__ import annotations

import math
import os
import random
import statistics
import subprocess
import sys
import weakref
from itertools import groupby, islice
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import SweepData, read_cell
from tests.helpers import REPO_ROOT, reference_stop_reason
from workloads.cell.backends import CompiledRun
from workloads.cell.config import ConfigError, MeasureConfig
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.paired import LoopHooks, PairedLoop, pair_sides, unpaired_reason
from workloads.cell.stop_rule import StopRule
from workloads.cell.train import StepRecord

#: Blocks of a fixed length (no time target) keep the tiny cells short.
BLOCKS = {"paired": True, "block_steps": 3, "block_seconds": 0.0}


def pairs_of(steps: list[dict]) -> list[dict[str, list[dict]]]:
    """The measured rows of each pair, by side, in pair order."""
    measured = [s for s in steps if s["phase"] == "measure"]
    pairs: list[dict[str, list[dict]]] = [
        {"compiled": [], "eager": []} for _ in {s["pair"] for s in measured}
    ]
    for s in measured:
        pairs[s["pair"]][s["side"]].append(s)
    return pairs


def first_sides(steps: list[dict]) -> list[str]:
    """The side whose block ran first in each pair, in pair order, as the step numbers tell."""
    pairs = pairs_of(sorted(steps, key=lambda s: s["step"]))
    return [min(("compiled", "eager"), key=lambda side: pair[side][0]["step"]) for pair in pairs]


def test_a_paired_cell_writes_both_sides_block_by_block(tiny_cells) -> None:
    cell = tiny_cells.get("gpt", "aot_eager", measure=BLOCKS)
    run, steps = cell.run, sorted(cell.steps, key=lambda s: s["step"])
    assert (run["status"], run["paired"], run["paired_fallback"]) == ("completed", True, None)
    assert [s["step"] for s in steps] == list(range(len(steps)))
    warmup = [(s["side"], s["pair"]) for s in steps if s["phase"] == "warmup"]
    assert warmup == [("compiled", None)] * 2 + [("eager", None)] * 3  # compile, then one eager block

    pairs = pairs_of(steps)
    assert len(pairs) == 6 and run["stop_reason"] == "steps"  # min_pairs, the fewest measured
    measured = [s for s in steps if s["phase"] == "measure"]
    assert [s["pair"] for s in measured] == sorted(s["pair"] for s in measured)
    blocks = [(key, len(list(rows))) for key, rows in groupby(measured, key=lambda s: (s["pair"], s["side"]))]
    assert len(blocks) == 12 and {k for _, k in blocks} == {3}  # one block of each side per pair
    # the order of replicate 0 of the cell's seed; the compiled side first in half the pairs
    order = list(islice(pair_sides(1337, 0), 6))
    assert [tuple(side for (p, side), _ in blocks if p == pair) for pair in range(6)] == order
    assert first_sides(steps).count("compiled") == 3

    # The run row is the compiled side's: its median step, count and throughput.
    compiled = [s["step_time_ms"] for s in measured if s["side"] == "compiled"]
    assert run["measured_steps"] == 18 and run["median_step_ms"] == statistics.median(compiled)
    assert run["measured_s"] == pytest.approx(sum(compiled) / 1e3)
    # Each side's host time per step: the median of its measured steps' time from call to return.
    for prefix, side in (("", "compiled"), ("eager_", "eager")):
        host = [s["host_time_ms"] for s in measured if s["side"] == side]
        assert run[f"{prefix}host_ms_per_step"] == statistics.median(host) > 0
    # force_eager runs the same module: no recompile, no second graph, and both sides train one
    # model on one batch stream: the eager cell's curve, bitwise for aot_eager (test_workloads_equivalence)
    unpaired, eager = tiny_cells.get("gpt", "aot_eager").run, tiny_cells.get("gpt", "eager")
    assert (run["recompile_count"], run["graph_count"]) == (0, unpaired["graph_count"])
    curve = eager.losses()
    assert cell.losses()[: len(curve)] == pytest.approx(curve, rel=1e-6, abs=0)


def test_analysis_reads_a_paired_cells_own_steps_only(tiny_cells) -> None:
    """The eager side stays in steps.parquet; the cell's statistics in analysis are its compiled steps',
    its speedup the pairs'."""
    cell = tiny_cells.get("gpt", "aot_eager", measure=BLOCKS)
    data = read_cell(cell.cell_dir, warn=None)  # a test cell's directory is not named by its id
    (row,) = cell_metrics(data).query("cell_id == @cell.run['cell_id']").to_dict("records")
    assert len(data.steps) == len([s for s in cell.steps if s["side"] != "eager"])
    assert (row["measured_steps"], row["median_step_ms"]) == (18, cell.run["median_step_ms"])
    # Its speedup is its own eager side's: the median of the pairs' ratios, with no eager cell read.
    ratios = [
        statistics.median(s["step_time_ms"] for s in pair["eager"])
        / statistics.median(s["step_time_ms"] for s in pair["compiled"])
        for pair in pairs_of(sorted(cell.steps, key=lambda s: s["step"]))
    ]
    assert (row["speedup_method"], row["pairs"], row["baseline_cell_id"]) == ("paired", 6, None)
    assert row["speedup"] == pytest.approx(statistics.median(ratios), rel=1e-12)
    assert row["speedup_low"] <= row["speedup"] <= row["speedup_high"]


def test_the_pairs_stop_rule_agrees_with_a_brute_force_reading(tiny_cells) -> None:
    """A real paired cell with a precision target: it stopped at the first pair at which the rule,
    recomputed from its rows (eager block median / compiled block median), says stop, and why."""
    measure = {**BLOCKS, "block_steps": 2, "min_seconds": 0.3, "rel_ci": 0.05, "max_steps": 40}
    cell = tiny_cells.get("gpt", "aot_eager", measure=measure)
    run = cell.run
    assert run["status"] == "completed" and run["paired"]
    pairs = pairs_of(sorted(cell.steps, key=lambda s: s["step"]))
    seconds = [sum(s["step_time_ms"] for side in pair.values() for s in side) / 1e3 for pair in pairs]
    ratios = [
        statistics.median(s["step_time_ms"] for s in pair["eager"])
        / statistics.median(s["step_time_ms"] for s in pair["compiled"])
        for pair in pairs
    ]
    # max_steps caps the compiled steps: 40 of them are 20 pairs of 2-step blocks
    m = MeasureConfig(min_seconds=0.3, rel_ci=0.05, max_steps=20)
    reasons = [reference_stop_reason(seconds[:n], 6, m, ratios[:n]) for n in range(1, len(pairs) + 1)]
    assert reasons[:-1] == [None] * (len(pairs) - 1) and reasons[-1] == run["stop_reason"]


@pytest.mark.parametrize("seed", range(4))
def test_stop_rule_over_values_agrees_with_the_brute_force_reading(seed: int) -> None:
    """`StopRule.add(seconds, value)`: the interval over the values, the time over the seconds."""
    rng = random.Random(seed)
    m = MeasureConfig(
        min_seconds=rng.choice([0.0, 1.0]),
        rel_ci=rng.choice([None, 0.02, 0.1]),
        max_steps=rng.choice([None, 150]),
        max_seconds=rng.choice([None, 4.0]),
    )
    fewest = rng.choice([6, 20])
    seconds = [rng.randint(20, 40) / 1024 for _ in range(200)]  # exact sums
    values = [1.2 + rng.choice([0, 0, 0.01, 0.05, 0.3]) for _ in range(200)]
    rule = StopRule(fewest, m)
    for n in range(1, 201):
        expected = reference_stop_reason(seconds[:n], fewest, m, values[:n])
        assert rule.add(seconds[n - 1], values[n - 1]) == expected, (n, m)


@pytest.mark.parametrize(
    "backend, measure, reason",
    [
        ("torchscript", {"paired": True}, "backend torchscript is not compiled by dynamo"),
        ("eager", {"paired": True}, "the eager cell is the baseline itself"),
        ("aot_eager", {"paired": False}, "measure.paired is false"),
    ],
)
def test_cells_that_cannot_pair_say_why_and_measure_unpaired(tiny_cells, backend, measure, reason) -> None:
    cell = tiny_cells.get("gpt", backend, measure=measure)
    run = cell.run
    assert (run["status"], run["paired"]) == ("completed", False)
    assert run["paired_fallback"].startswith(reason)
    assert {(s["side"], s["pair"]) for s in cell.steps} == {(None, None)}
    assert (run["measured_steps"], run["stop_reason"]) == (6, "steps")


def test_a_distributed_cell_measures_unpaired() -> None:
    cfg = cell_config_from_dict({"backend": {"name": "inductor"}, "distributed": {"tasks_per_node": 2}})
    compiled = CompiledRun(
        torch.nn.Linear(1, 1), uses_dynamo=True, marks_cudagraph_steps=False, setup_time_s=0
    )
    assert unpaired_reason(cfg, compiled, world_size=2).startswith("distributed cell (2 processes)")
    assert unpaired_reason(cfg, compiled, world_size=1) is None


def test_fewer_than_six_pairs_is_refused() -> None:
    with pytest.raises(ConfigError, match="measure.min_pairs must be >= 6"):
        cell_config_from_dict({"measure": {"min_pairs": 5}})


def out_of_memory_when_eager(after: int):
    """A compiled step whose eager side (force_eager runs the function's own Python) raises the
    allocator's error from its `after`+1-th call on; compiled, the branch is not in the graph."""
    calls = {"eager": 0}

    @torch.compile(backend="aot_eager")
    def forward(x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            calls["eager"] += 1
            if calls["eager"] > after:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return (x * 2).sum()

    def step() -> tuple[torch.Tensor, float]:
        return forward(torch.ones(4)), 0.0

    return step


@pytest.mark.parametrize("after, where", [(0, "warm-up"), (7, "a measured pair")])
def test_an_eager_side_out_of_memory_goes_on_unpaired(after: int, where: str) -> None:
    records: list[StepRecord] = []
    pauses, blocks = [], []
    hooks = LoopHooks(
        step=out_of_memory_when_eager(after),
        device=torch.device("cpu"),
        on_step=records.append,
        before_measuring=lambda: pauses.append(len(records)),
        after_block=lambda side, steps: blocks.append((side, steps)),
    )
    loop = PairedLoop(hooks, seed=0, replicate=0)
    measure = MeasureConfig(min_seconds=0.0, block_steps=2, block_seconds=0.0)
    outcome = loop.run(warmup_steps=1, steps=4, measure=measure)
    assert outcome.fallback.startswith("the eager side ran out of memory (CUDA out of memory."), where
    assert outcome.stop_reason == "steps" and len(pauses) == 1, where
    assert [r.step for r in records] == list(range(len(records)))
    paired_rows = [r for r in records if r.phase == "measure" and r.side is not None]
    assert bool(paired_rows) == (where == "a measured pair")  # the pairs before it keep their rows
    # after the pause, every block that ended was told (the energy's seam): the last warm-up step's,
    # then each measured block with rows; not the block that failed, nor the unpaired steps after it
    told = [
        (side, len(list(rows))) for (_, side), rows in groupby(paired_rows, key=lambda r: (r.pair, r.side))
    ]
    assert blocks == ([("eager", 1), *told] if paired_rows else []), where
    unpaired = [r for r in records if r.side is None]
    # one compiled warm-up step again, then the ordinary loop's `steps` measured ones
    assert [r.phase for r in unpaired] == ["warmup"] + ["measure"] * 4
    assert records[-5:] == unpaired


def test_the_failed_eager_steps_tensors_are_let_go_before_the_cell_goes_on() -> None:
    """The tensors of the eager step that ran out of memory, held by the error's frames, are freed
    before the compiled steps go on unpaired: on CUDA they would take memory the compiled side has
    to fit in, and count in its peak."""
    eager_tensors: list[weakref.ref] = []

    @torch.compile(backend="aot_eager")
    def forward(x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            activation = x * 3
            eager_tensors.append(weakref.ref(activation))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return (x * 2).sum()

    alive_at_step: list[bool] = []

    def step() -> tuple[torch.Tensor, float]:
        alive_at_step.append(any(ref() is not None for ref in eager_tensors))
        return forward(torch.ones(4)), 0.0

    hooks = LoopHooks(step, torch.device("cpu"), lambda record: None, lambda: None, lambda side, steps: None)
    measure = MeasureConfig(min_seconds=0.0, block_steps=2, block_seconds=0.0)
    outcome = PairedLoop(hooks, seed=0, replicate=0).run(warmup_steps=1, steps=4, measure=measure)
    assert outcome.fallback is not None and len(eager_tensors) == 1
    # the compiled warm-up step, the failed eager one, then one more warm-up step and 4 measured ones
    assert alive_at_step == [False] * 7


@pytest.mark.parametrize("seed", [0, 1337, 2**31 - 1])
def test_pair_orders_are_balanced_and_differ_between_replicates(seed: int) -> None:
    """Compiled first in half the pairs at every even count, one off at an odd one, as ABBA or BAAB
    in each two pairs; the same (seed, replicate) the same order, other replicates other orders."""
    orders = [list(islice(pair_sides(seed, replicate), 20)) for replicate in range(5)]
    for order in orders:
        firsts = [first for first, _ in order]
        assert all(set(pair) == {"compiled", "eager"} for pair in order)
        for n in range(1, 21):
            assert abs(firsts[:n].count("compiled") - n / 2) <= 0.5, (firsts, n)
        assert all(order[i] == order[i + 1][::-1] for i in range(0, 20, 2)), order
    assert [list(islice(pair_sides(seed, replicate), 20)) for replicate in range(5)] == orders
    assert len({tuple(order) for order in orders}) == 5


def test_the_pair_order_is_the_same_in_another_process() -> None:
    """A replicate rerun (a retried attempt) runs the order it ran before: the draws do not depend
    on the process's hash seed."""
    code = "from itertools import islice; from workloads.cell.paired import pair_sides; "
    code += "print([first for first, _ in islice(pair_sides(1337, 3), 20)])"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str([first for first, _ in islice(pair_sides(1337, 3), 20)])


def test_a_replicate_runs_its_own_balanced_order(tiny_cells, tiny_config, tmp_path: Path) -> None:
    """Replicate 1 of the paired cell (as the orchestrator runs it: `run_cell(..., repeat=1)`) runs
    the order of its replicate, not replicate 0's, and compiled first in half its pairs."""
    from workloads.run import run_cell

    config = tiny_config("gpt", "aot_eager", measure=BLOCKS)
    assert run_cell(cell_config_from_dict(config), tmp_path / "cell", repeat=1) == "completed"
    steps = pq.read_table(tmp_path / "cell" / "steps.parquet").to_pylist()
    firsts = first_sides(steps)
    assert len(firsts) == 6 and firsts.count("compiled") == 3
    assert firsts == [first for first, _ in islice(pair_sides(1337, 1), 6)]
    assert firsts != first_sides(tiny_cells.get("gpt", "aot_eager", measure=BLOCKS).steps)


def test_a_paired_cpu_cell_gives_no_memory_ratio(tiny_cells) -> None:
    """On the CPU the peak is the process's resident memory, which a paired cell's eager blocks share:
    no eager side's peak of its own, and no "mem vs eager" (an unpaired cell keeps its ratio)."""
    eager, unpaired = tiny_cells.get("gpt", "eager"), tiny_cells.get("gpt", "aot_eager")
    paired = tiny_cells.get("gpt", "aot_eager", measure=BLOCKS)
    assert paired.run["peak_mem_bytes"] > 0 and paired.run["eager_peak_mem_bytes"] is None
    rows = cell_metrics(
        SweepData.concat(read_cell(cell.cell_dir, warn=None) for cell in (eager, unpaired, paired))
    )
    ratio = dict(zip(rows["cell_id"], rows["peak_mem_ratio"]))
    assert math.isnan(ratio[paired.run["cell_id"]])
    assert ratio[unpaired.run["cell_id"]] == unpaired.run["peak_mem_bytes"] / eager.run["peak_mem_bytes"]
