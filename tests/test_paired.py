"""Paired measurement (workloads/cell/paired.py): a compiled cell times its own eager baseline.

Real torch.compile on the CPU (aot_eager), real Parquet through `run_cell`: a paired cell writes
both sides, block by block, and stops by the pairs' ratios as a brute-force reading of the rule
says; the cells that cannot pair say why and measure as before; an eager side that runs out of
memory leaves the cell measuring unpaired.
"""

from __future__ import annotations

import random
import statistics
from itertools import groupby

import pytest
import torch

from analysis.reading.collect import read_cell
from analysis.studies.sweep.table import summarize
from tests.helpers import reference_stop_reason
from workloads.cell.backends import CompiledRun
from workloads.cell.config import ConfigError, MeasureConfig, cell_config_from_dict
from workloads.cell.paired import LoopHooks, PairedLoop, unpaired_reason
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
    order = random.Random(1337)  # the cell's seed draws each pair's order
    for pair in range(6):
        sides = ["compiled", "eager"]
        order.shuffle(sides)
        assert [side for (p, side), _ in blocks if p == pair] == sides, pair

    # The run row is the compiled side's: its median step, count and throughput.
    compiled = [s["step_time_ms"] for s in measured if s["side"] == "compiled"]
    assert run["measured_steps"] == 18 and run["median_step_ms"] == statistics.median(compiled)
    assert run["measured_s"] == pytest.approx(sum(compiled) / 1e3)
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
    (row,) = summarize([data]).query("cell_id == @cell.run['cell_id']").to_dict("records")
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
    loop = PairedLoop(hooks, seed=0)
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
