"""How long a cell measures (`measure` in the config, workloads/cell/stop_rule.py `StopRule`) and what the
run row says about the measured span (workloads/cell/recorder.py): the stop rule against cases and
against a brute-force reference, the measured loop with fake steps on a fake clock (exact counts)
and with real sleeps (generous bounds), two real gloo ranks agreeing on a count, the end-to-end
columns from known steps, the config's validation, and cell ids that stay what they were. The loop
on a real CUDA device is in the GPU tier (tests/gpu/test_gpu_tier.py).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import workloads.cell.step_timer as step_timer
import workloads.cell.stop_rule as stop_rule
from tests.helpers import reference_stop_reason
from workloads.cell import distributed
from workloads.cell.cell_id import config_digest
from workloads.cell.config import CellConfig, ConfigError, MeasureConfig
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.cell.stop_rule import (
    STOP_REASONS,
    Stopping,
    StopRule,
    median_interval_ranks,
    median_rel_halfwidth,
)
from workloads.cell.train import StepRecord, run_steps
from workloads.contract.schema import RUN_SCHEMA

NO_CAPS = {"max_steps": None, "max_seconds": None}


def stop_reason(times_s: Sequence[float], steps: int, measure: MeasureConfig) -> str | None:
    """Why measuring stops after these measured step times (seconds, in order), or None to go on:
    `StopRule` fed them all, as the measured loop does one by one."""
    rule = StopRule(steps, measure)
    reason = None
    for seconds in times_s:
        reason = rule.add(seconds)
    return reason


def planned_steps(times_s: Sequence[float], steps: int, measure: MeasureConfig) -> tuple[int, str]:
    """`StopRule.plan` after these measured step times: what the ranks of a distributed cell propose."""
    rule = StopRule(steps, measure)
    for seconds in times_s:
        rule.add(seconds)
    return rule.plan()


def measure(**values: Any) -> MeasureConfig:
    """A MeasureConfig that needs nothing but `values`: no time floor and no caps unless given."""
    return MeasureConfig(**{"min_seconds": 0.0, **NO_CAPS, **values})


def first_stop(times: list[float], steps: int, m: MeasureConfig) -> tuple[int, str] | None:
    """After how many of `times` the rule stops, and why (None: it goes on after all of them)."""
    for n in range(1, len(times) + 1):
        reason = stop_reason(times[:n], steps, m)
        if reason is not None:
            return n, reason
    return None


# --- the rule ------------------------------------------------------------------------------


def test_steps_is_the_minimum_count() -> None:
    """Steps slower than min_seconds / steps: `steps` of them, as before the rule existed."""
    assert first_stop([1.0] * 50, 20, measure(min_seconds=5.0)) == (20, "steps")


def test_min_seconds_measures_fast_steps_for_that_long() -> None:
    # 1/64 s steps (exact in binary): 0.25 s is reached at the 16th
    assert first_stop([1 / 64] * 100, 5, measure(min_seconds=0.25)) == (16, "min_seconds")
    # the defaults: a 10 ms step is measured for 5 s (500 steps), not 20 steps (0.2 s)
    n, reason = first_stop([0.01] * 1000, 20, MeasureConfig())
    assert reason == "min_seconds" and n in (500, 501)


def test_max_steps_caps_a_fast_step() -> None:
    assert first_stop([1 / 1024] * 100, 5, measure(min_seconds=1.0, max_steps=40)) == (40, "max_steps")
    # the rule met at the cap itself says why it was met
    assert first_stop([1 / 64] * 100, 5, measure(min_seconds=0.25, max_steps=16)) == (16, "min_seconds")
    # a larger `steps` wins over the cap
    assert first_stop([1 / 1024] * 100, 60, measure(min_seconds=1.0, max_steps=40)) == (60, "max_steps")


def test_rel_ci_stops_once_the_interval_is_narrow() -> None:
    # identical steps: the interval has no width as soon as there is one (6 steps)
    assert first_stop([0.01] * 100, 2, measure(rel_ci=0.01)) == (6, "rel_ci")
    # the time was reached first, then precision was the last condition
    assert first_stop([1.0] * 100, 2, measure(min_seconds=1.0, rel_ci=0.01)) == (6, "rel_ci")
    # precision came first (6 steps), then the time (8 steps of 1/8 s)
    assert first_stop([1 / 8] * 100, 2, measure(min_seconds=1.0, rel_ci=0.01)) == (8, "min_seconds")
    # all three at once at `steps`
    assert first_stop([1.0] * 100, 10, measure(min_seconds=1.0, rel_ci=0.01)) == (10, "steps")


def test_rel_ci_that_is_never_reached_ends_at_a_cap() -> None:
    noisy = [1.0, 2.0] * 50  # the median's interval spans both levels: never ±1%
    assert first_stop(noisy, 4, measure(rel_ci=0.01, max_steps=30)) == (30, "max_steps")
    # 3 s a pair: 9 s are reached after the 6th step
    assert first_stop(noisy, 4, measure(rel_ci=0.01, max_seconds=9.0)) == (6, "max_seconds")


def test_max_seconds_never_cuts_below_steps() -> None:
    noisy = [1.0, 2.0] * 25  # never within ±1%; 3 s are measured after 2 steps
    assert first_stop(noisy, 10, measure(rel_ci=0.01, max_seconds=3.0)) == (10, "max_seconds")


def test_no_step_no_stop() -> None:
    assert stop_reason([], 1, MeasureConfig()) is None


@pytest.mark.parametrize("seed", range(6))
def test_incremental_rule_agrees_with_the_reference(seed: int) -> None:
    """The loop's O(1)-per-step rule gives the reference's answer after every step. Step times are
    multiples of 1/1024 s, so that sums are exact and neither side's rounding decides a case."""
    rng = random.Random(seed)
    m = measure(
        min_seconds=rng.choice([0.0, 0.5, 2.0]),
        rel_ci=rng.choice([None, 0.02, 0.1]),
        max_steps=rng.choice([None, 150]),
        max_seconds=rng.choice([None, 3.0]),
    )
    steps = rng.choice([1, 5, 20, 160])
    level = rng.randint(8, 20)
    times = [(level + rng.choice([0, 0, 0, 1, 2, 9])) / 1024 for _ in range(200)]
    rule = StopRule(steps, m)
    for n in range(1, len(times) + 1):
        assert rule.add(times[n - 1]) == reference_stop_reason(times[:n], steps, m), (n, m, steps)


# --- the median's interval -------------------------------------------------------------------


def exact_lower_rank(n: int) -> int:
    """The largest l with P(Binomial(n, 1/2) <= l - 1) <= 1/40, in integers: 40 x 2**n x P <= 2**n."""
    below, rank, term = 0, 0, 1  # term = comb(n, rank)
    while 40 * (below + term) <= 2**n:
        below += term
        term = term * (n - rank) // (rank + 1)
        rank += 1
    return rank


def test_median_interval_ranks_are_the_binomial_ones() -> None:
    # the textbook table of distribution-free 95% intervals of the median
    assert [median_interval_ranks(n) for n in (6, 10, 20, 100)] == [(1, 6), (2, 9), (6, 15), (40, 61)]
    assert all(median_interval_ranks(n) is None for n in range(0, 6))
    for n in range(6, stop_rule._EXACT_RANKS_UP_TO + 1, 7):
        assert median_interval_ranks(n) == (exact_lower_rank(n), n + 1 - exact_lower_rank(n))
        low = median_interval_ranks(n)[0]
        assert (
            40 * sum(math.comb(n, k) for k in range(low))
            <= 2**n
            < 40 * sum(math.comb(n, k) for k in range(low + 1))
        )


def test_approximate_ranks_are_never_narrower_and_at_most_one_off() -> None:
    for n in range(stop_rule._EXACT_RANKS_UP_TO + 1, 3000, 37):
        low, high = median_interval_ranks(n)
        assert exact_lower_rank(n) - 1 <= low <= exact_lower_rank(n) and high == n + 1 - low


def test_median_rel_halfwidth() -> None:
    values = [float(v) for v in range(1, 21)]  # ranks (6, 15) around a median of 10.5
    assert median_rel_halfwidth(values) == (15 - 6) / 2 / 10.5
    assert median_rel_halfwidth([1.0] * 5) == math.inf


# --- what ranks propose ----------------------------------------------------------------------


def test_plan_extrapolates_to_min_seconds() -> None:
    assert planned_steps([1 / 128] * 20, 20, MeasureConfig()) == (640, "min_seconds")  # 5 s / (1/128 s)
    assert planned_steps([1.0] * 20, 20, MeasureConfig()) == (20, "steps")
    assert planned_steps([1 / 4096] * 20, 20, MeasureConfig()) == (5000, "max_steps")
    assert planned_steps([1 / 128] * 20, 20, measure(min_seconds=5.0, max_seconds=2.0)) == (
        256,
        "max_seconds",
    )
    assert planned_steps([1 / 128] * 20, 20, measure(min_seconds=5.0, max_steps=10)) == (20, "max_steps")


def test_plan_extrapolates_the_interval_as_one_over_root_n() -> None:
    times = [float(v) for v in range(1, 21)]
    width = median_rel_halfwidth(sorted(times))
    assert planned_steps(times, 20, measure(rel_ci=0.1, max_steps=10**6)) == (
        math.ceil(20 * (width / 0.1) ** 2),
        "rel_ci",
    )


# --- the measured loop -----------------------------------------------------------------------


class FakeClock:
    """Stands in for `time` in workloads.cell.step_timer (the CPU's timer): perf_counter advances
    only when a step says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def fake_steps(clock: FakeClock, seconds: Callable[[int], float]) -> Callable[[], tuple[torch.Tensor, float]]:
    """A training step whose i-th call takes seconds(i) on the fake clock."""
    calls = [0]

    def step() -> tuple[torch.Tensor, float]:
        clock.now += seconds(calls[0])
        calls[0] += 1
        return torch.tensor(float(calls[0])), 0.0

    return step


def run_fake(
    monkeypatch: pytest.MonkeyPatch,
    seconds: Callable[[int], float],
    warmup: int,
    steps: int,
    m: MeasureConfig | None,
    gather: Callable[[Any], list[Any]] | None = None,
) -> tuple[list[StepRecord], str]:
    clock = FakeClock()
    monkeypatch.setattr(step_timer, "time", clock)
    records: list[StepRecord] = []
    reason = run_steps(
        fake_steps(clock, seconds), warmup, steps, torch.device("cpu"), records.append, m, gather
    )
    return records, reason


def measured(records: list[StepRecord]) -> list[StepRecord]:
    return [r for r in records if r.phase == "measure"]


def test_loop_measures_for_min_seconds_after_the_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    # warm-up steps take 2 s (compilation) and do not count; measured ones 1/128 s
    records, reason = run_fake(
        monkeypatch, lambda i: 2.0 if i < 3 else 1 / 128, 3, 5, measure(min_seconds=0.25)
    )
    assert [r.phase for r in records[:3]] == ["warmup"] * 3 and [r.step for r in records] == list(
        range(len(records))
    )
    assert (len(measured(records)), reason) == (32, "min_seconds")
    assert math.fsum(r.step_time_ms for r in measured(records)) == 250.0  # the steps' times are the span


def test_loop_honours_steps_and_max_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    records, reason = run_fake(monkeypatch, lambda i: 0.5, 1, 7, measure(min_seconds=1.0))
    assert (len(measured(records)), reason) == (7, "steps")
    records, reason = run_fake(monkeypatch, lambda i: 1 / 1024, 1, 7, measure(min_seconds=10.0, max_steps=50))
    assert (len(measured(records)), reason) == (50, "max_steps")
    records, reason = run_fake(
        monkeypatch, lambda i: 1 / 1024, 1, 70, measure(min_seconds=10.0, max_steps=50)
    )
    assert (len(measured(records)), reason) == (70, "max_steps")  # steps is the minimum


def test_loop_without_measure_runs_exactly_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    records, reason = run_fake(monkeypatch, lambda i: 1 / 1024, 2, 6, None)
    assert (len(records), len(measured(records)), reason) == (8, 6, "steps")


def test_loop_stops_at_the_count_the_ranks_agree_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `gather`, the rule is not applied step by step: after `steps` measured steps this rank
    proposes a count, and every rank runs the largest proposal (here another rank's)."""
    proposals: list[Any] = []

    def gather(value: Any) -> list[Any]:
        proposals.append(value)
        return [value, (77, "min_seconds"), (12, "steps")]

    records, reason = run_fake(monkeypatch, lambda i: 1.0, 2, 10, measure(min_seconds=1.0), gather)
    assert proposals == [(10, "steps")]  # once, with this rank's plan
    assert (len(measured(records)), reason) == (77, "min_seconds")


def test_a_step_s_host_time_is_its_call_to_its_return() -> None:
    """The host's time of a step that holds its host 5 ms: at least that, and (on the CPU, whose
    clock is the device's) at most the step's own time, which also holds the bookkeeping before it."""

    def held() -> tuple[torch.Tensor, float]:
        until = time.perf_counter() + 0.005
        while time.perf_counter() < until:
            pass
        return torch.zeros(()), 0.0

    for times in step_timer.step_timer(torch.device("cpu")).block(held, 4):
        assert 5.0 <= times.host_ms <= times.step_ms


def test_loop_with_real_sleeps() -> None:
    """5 ms steps for 0.2 s: about 40 of them. A sleep lasts at least as long as asked, so at most
    40; a loaded machine oversleeps, so only a generous lower bound."""

    def step() -> tuple[torch.Tensor, float]:
        time.sleep(0.005)
        return torch.zeros(()), 0.0

    records: list[StepRecord] = []
    reason = run_steps(step, 2, 5, torch.device("cpu"), records.append, measure(min_seconds=0.2))
    times = [r.step_time_ms / 1e3 for r in measured(records)]
    assert reason == "min_seconds" and 5 <= len(times) <= 40
    assert math.fsum(times) >= 0.2 > math.fsum(times[:-1])


def test_a_real_training_step_is_measured_for_min_seconds() -> None:
    """The tiny GPT's real training step through the loop."""
    from workloads.train_cell import prepare_cell

    cfg = cell_config_from_dict({"size": "tiny", "precision": {"name": "fp32"}, "device": "cpu"})
    rec = CellRecorder("cell", 1)
    cell = prepare_cell(cfg, rec)
    reason = run_steps(cell.step, 1, 3, cell.device, rec.on_step, measure(min_seconds=0.3, max_steps=10**5))
    rec.summarise([rec.report(0, None)], compiles=False, setup_time_s=0.0)
    assert reason in ("min_seconds", "steps") and rec.run["measured_steps"] >= 3
    assert rec.run["measured_s"] >= 0.3 and rec.run["e2e_items_per_s"] > 0


def test_steps_in_flight_that_meet_the_rule_stop_the_launches() -> None:
    """With the host ahead, a slow step (GPT-2: 1.4 s) is not launched past the rule: once the
    steps in flight would meet its count and time at the mean step so far, launching stops."""
    stopping = Stopping(2, 5, measure(min_seconds=5.0), gather=None)
    for _ in range(2):
        stopping.measured(1400.0, launched=7)  # 2 warm-up + 5 measured launched, 2 reported
    assert stopping.in_flight_suffice(7)  # 5 steps, 7 s foreseen
    assert not stopping.in_flight_suffice(6)  # 4 steps: the count falls short
    assert not Stopping(2, 5, measure(min_seconds=5.0), gather=None).in_flight_suffice(7)  # nothing seen yet
    longer = Stopping(2, 5, measure(min_seconds=10.0), gather=None)
    for _ in range(2):
        longer.measured(1400.0, launched=7)
    assert not longer.in_flight_suffice(7)  # 7 s foreseen, 10 s asked
    for ruled in (
        Stopping(2, 5, measure(min_seconds=5.0, rel_ci=0.01), gather=None),
        Stopping(2, 5, measure(min_seconds=5.0), gather=lambda value: [value]),
    ):
        ruled.measured(1400.0, launched=7)
        ruled.measured(1400.0, launched=7)
        assert not ruled.in_flight_suffice(7)  # an interval, or ranks that agree on a count
    capped = Stopping(2, 5, measure(min_seconds=2.0, rel_ci=0.005, max_seconds=5.0), gather=None)
    for _ in range(2):
        capped.measured(1400.0, launched=7)
    assert capped.in_flight_suffice(7)  # whatever the interval: 7 s foreseen, past max_seconds
    assert not capped.in_flight_suffice(6)  # 4 steps: the count falls short


def test_the_pause_before_measuring_comes_before_the_last_warmup_step_and_is_no_steps_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local executor's wait for quiet (workloads/local/turns.py) runs before the last warm-up step,
    so a warmed-up step separates it from the measured ones, and its seconds count in no step
    (on the fake clock: each step takes 1 ms, the pause 1,000 s)."""
    clock = FakeClock()
    monkeypatch.setattr(step_timer, "time", clock)
    calls: list[str] = []

    def step() -> tuple[torch.Tensor, float]:
        calls.append("step")
        clock.now += 1e-3
        return torch.zeros(()), 0.0

    def pause() -> None:
        calls.append("pause")
        clock.now += 1000.0

    records: list[StepRecord] = []
    run_steps(
        step, 3, 2, torch.device("cpu"), records.append, measure(min_seconds=0.0), before_measuring=pause
    )
    assert calls == ["step", "step", "pause", "step", "step", "step"]
    assert [r.step_time_ms for r in records] == pytest.approx([1.0] * 5)
    calls.clear()
    run_steps(
        step, 0, 1, torch.device("cpu"), records.append, measure(min_seconds=0.0), before_measuring=pause
    )
    assert calls == ["pause", "step"]


def _agreeing_rank(rank: int, store_path: str, out_path: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        clock = FakeClock()
        step_timer.time = clock  # this process's own module: rank 1's steps take twice as long
        records: list[StepRecord] = []
        ranks = distributed.Ranks(rank, 2, rank, "gloo")
        gather = lambda value: distributed.gather(ranks, value)  # noqa: E731
        reason = run_steps(
            fake_steps(clock, lambda i: (rank + 1) / 128),
            2,
            4,
            torch.device("cpu"),
            records.append,
            measure(min_seconds=0.25),
            gather,
        )
        Path(out_path).write_text(f"{len(measured(records))} {reason}")
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_run_the_same_count(tmp_path: Path) -> None:
    """Rank 0 would reach 0.25 s after 32 steps, rank 1 after 16: both run 32."""
    outs = [tmp_path / f"rank{r}" for r in range(2)]
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_agreeing_rank, args=(r, str(tmp_path / "store"), str(outs[r]))) for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert [out.read_text() for out in outs] == ["32 min_seconds", "32 min_seconds"]


# --- the end-to-end columns ------------------------------------------------------------------


def rank_report(rank: int, times: list[float], waits: list[float], warmup: int = 1) -> RankReport:
    steps = [
        StepRecord(i, "warmup" if i < warmup else "measure", t, w, 1.0)
        for i, (t, w) in enumerate(zip(times, waits))
    ]
    return RankReport(rank, f"node{rank}", steps, peak_mem_bytes=None)


def test_end_to_end_columns_of_one_rank(tmp_path: Path) -> None:
    rec = CellRecorder("cell", 1)
    rec.items_per_step, rec.flops_per_step, rec.peak = 1000, 4e12, 100.0
    # warm-up 500 ms (not in the span); measured 10, 20, 90 ms with waits of 1, 2, 5 ms
    rec.summarise([rank_report(0, [500, 10, 20, 90], [7, 1, 2, 5])], compiles=False, setup_time_s=0.0)
    run = rec.run
    assert run["measured_s"] == pytest.approx(0.12, rel=1e-12)
    assert run["data_wait_s"] == pytest.approx(0.008, rel=1e-12)
    assert run["e2e_items_per_s"] == pytest.approx(3000 / 0.12, rel=1e-12)  # 25,000/s
    assert run["items_per_s"] == pytest.approx(1000 / 0.02, rel=1e-12)  # the median step's: 50,000/s
    assert run["e2e_mfu"] == pytest.approx(3 * 4e12 / 0.12 / 1e12 / 100, rel=1e-12)  # 1.0
    assert run["mfu"] == pytest.approx(4e12 / 0.02 / 1e12 / 100, rel=1e-12)
    rec.run["stop_reason"] = "min_seconds"
    rec.write(tmp_path)
    row = pq.read_table(tmp_path / "run.parquet").to_pylist()[0]
    assert (row["measured_s"], row["stop_reason"]) == (run["measured_s"], "min_seconds")


def test_end_to_end_span_of_two_ranks_is_the_slowest_per_step() -> None:
    rec = CellRecorder("cell", 1, world_size=2)
    rec.items_per_step, rec.flops_per_step, rec.peak = 2048, 2e12, 50.0
    rec.summarise(
        [rank_report(0, [500, 10, 40, 12], [1, 4, 0, 3]), rank_report(1, [400, 30, 20, 12], [2, 1, 6, 3])],
        compiles=True,
        setup_time_s=0.0,
    )
    run = rec.run
    # merged measured steps: max(10, 30), max(40, 20), max(12, 12) = 30, 40, 12 ms; waits 4, 6, 3 ms
    assert run["measured_s"] == pytest.approx(0.082, rel=1e-12)
    assert run["data_wait_s"] == pytest.approx(0.013, rel=1e-12)
    assert run["e2e_items_per_s"] == pytest.approx(3 * 2048 / 0.082, rel=1e-12)
    assert run["e2e_mfu"] == pytest.approx(3 * 2e12 / 0.082 / 1e12 / (50.0 * 2), rel=1e-12)


def test_end_to_end_mfu_is_null_without_a_peak() -> None:
    rec = CellRecorder("cell", 1)
    rec.items_per_step = 10
    rec.summarise([rank_report(0, [5, 10], [0, 0])], compiles=False, setup_time_s=0.0)
    assert rec.run["e2e_mfu"] is None and rec.run["e2e_items_per_s"] == pytest.approx(1000.0)


def test_the_columns_follow_mfu_in_the_run_schema() -> None:
    names = RUN_SCHEMA.names
    at = names.index("mfu")
    assert names[at + 1 : at + 6] == [
        "measured_s",
        "e2e_items_per_s",
        "e2e_mfu",
        "data_wait_s",
        "stop_reason",
    ]
    assert set(STOP_REASONS) == {"steps", "min_seconds", "rel_ci", "max_steps", "max_seconds"}


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "section, message",
    [
        ({"min_seconds": -1}, "measure.min_seconds must be >= 0"),
        ({"max_steps": 0}, "measure.max_steps must be >= 1 or null"),
        ({"max_seconds": 0}, "measure.max_seconds must be > 0"),
        ({"max_seconds": 2.0}, r"measure.max_seconds \(2.0\) must be >= measure.min_seconds \(5.0\)"),
        ({"rel_ci": 0}, "measure.rel_ci must be between 0 and 1"),
        ({"rel_ci": 1.5}, "measure.rel_ci must be between 0 and 1"),
        (
            {"rel_ci": 0.01, "max_steps": None, "max_seconds": None},
            "measure.rel_ci needs measure.max_steps or",
        ),
        ({"min_second": 1}, "unknown config key 'measure.min_second'"),
        ({"min_seconds": "long"}, "config key measure.min_seconds must be float"),
        ({"max_steps": 1.5}, "config key measure.max_steps must be int or null"),
    ],
)
def test_bad_measure_section(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        cell_config_from_dict({"measure": section})
    assert "\n" not in str(err.value)


def test_measure_section_values_are_read() -> None:
    cfg = cell_config_from_dict({"steps": 3, "measure": {"min_seconds": 1, "max_steps": 3, "rel_ci": 0.02}})
    assert cfg.measure == MeasureConfig(min_seconds=1, max_steps=3, max_seconds=300.0, rel_ci=0.02)


def test_default_cells_keep_their_ids() -> None:
    """The digests of these configs at the commit before `measure` existed (615db9f)."""
    assert config_digest(CellConfig()) == "fd8ea6a5ee09"
    resnet = {
        "model": {"name": "resnet"},
        "size": "small",
        "backend": {"name": "inductor", "mode": "max-autotune"},
        "steps": 50,
    }
    assert config_digest(cell_config_from_dict(resnet)) == "7c316a04bcf3"
    explicit = {
        **resnet,
        "measure": {"min_seconds": 5.0, "max_steps": 5000, "max_seconds": 300.0, "rel_ci": None},
    }
    assert config_digest(cell_config_from_dict(explicit)) == "7c316a04bcf3"
    assert config_digest(cell_config_from_dict({**resnet, "measure": {"rel_ci": 0.01}})) != "7c316a04bcf3"
