"""When a cell stops measuring: the stop rule of `measure` (config.MeasureConfig) over the measured steps
(or a paired cell's pairs), the distribution-free interval of a median it rests on, and how the loop
of one process or of several ranks applies it (docs/measurement.md "How long a cell measures").
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from workloads.cell.config import MeasureConfig

#: Why the measured loop stopped (run.parquet `stop_reason`): the rule was met exactly at `steps`
#: measured steps, or later when min_seconds or rel_ci was the last condition met; or a cap ended it.
STOP_REASONS = ("steps", "min_seconds", "rel_ci", "max_steps", "max_seconds")

#: Each tail of the median's 95% interval may miss it with at most this probability (1/40 = 2.5%).
_CI_TAILS_PER_MISS = 40
#: Up to this many steps the interval's ranks are exact binomial quantiles; above, the normal
#: approximation with continuity correction (tests/unit/workloads/test_measuring.py checks that they meet
#: there).
_EXACT_RANKS_UP_TO = 400


@functools.cache
def median_interval_ranks(n: int) -> tuple[int, int] | None:
    """1-based ranks (l, u) such that the order statistics x_(l) <= x_(u) of n steps cover their
    distribution's median with probability >= 95%, whatever the distribution: the number of steps
    below the median is Binomial(n, 1/2), so l is the largest rank with P(B <= l - 1) <= 2.5%, and
    u = n + 1 - l. None below 6 steps, where even (x_(1), x_(n)) covers with less than 95%."""
    if n <= _EXACT_RANKS_UP_TO:  # integers: 2**n * P(B = rank) and 2**n * P(B <= rank), exactly
        term, below, rank = 1, 0, 0
        while True:
            below += term
            if _CI_TAILS_PER_MISS * below > 2**n:
                break
            term = term * (n - rank) // (rank + 1)
            rank += 1
    else:  # at most one rank lower than the exact one: an interval as wide or one step wider
        z = statistics.NormalDist().inv_cdf(1 - 1 / _CI_TAILS_PER_MISS)
        rank = math.floor(n / 2 + 0.5 - z * math.sqrt(n) / 2)
    return (rank, n + 1 - rank) if rank >= 1 else None


def median_rel_halfwidth(sorted_s: Sequence[float]) -> float:
    """Half the width of the median's 95% interval (`median_interval_ranks`) over the median, of
    ascending step times; infinite where there are too few steps for one."""
    n = len(sorted_s)
    ranks = median_interval_ranks(n)
    median = (sorted_s[(n - 1) // 2] + sorted_s[n // 2]) / 2 if n else 0.0
    if ranks is None or median <= 0:
        return math.inf
    low, high = sorted_s[ranks[0] - 1], sorted_s[ranks[1] - 1]
    return (high - low) / 2 / median


class StopRule:
    """The stop rule of `measure` (workloads/cell/config.py MeasureConfig), fed one measured step time
    at a time: O(1) per step, plus an insertion into a sorted list where `rel_ci` is set.

    After n measured steps whose times add up to `elapsed` seconds, measuring goes on while
    n < steps; then it stops when
        elapsed >= min_seconds and (rel_ci is null or the median's 95% interval has a half-width
        <= rel_ci x median)       -> `steps` if n == steps, else `rel_ci` where the time had been
                                     reached before this step, else `min_seconds`;
    otherwise when n >= max_steps -> `max_steps`;
    otherwise when elapsed >= max_seconds -> `max_seconds`.
    """

    def __init__(self, steps: int, measure: MeasureConfig):
        self.steps, self.measure = steps, measure
        self.n = 0
        self.elapsed_s = 0.0
        self.sorted_s: list[float] = []
        """The step times (or the `value`s added) in ascending order, kept only where `rel_ci` needs them."""

    def add(self, seconds: float, value: float | None = None) -> str | None:
        """Count one more measured step; the reason to stop after it, or None to go on. `value`,
        where given, is what the interval is of instead of the step's time: a pair of blocks
        (`seconds`, both blocks') and its eager/compiled ratio (workloads/cell/paired.py)."""
        m = self.measure
        before = self.elapsed_s
        self.n += 1
        self.elapsed_s = before + seconds
        if m.rel_ci is not None:
            bisect.insort(self.sorted_s, seconds if value is None else value)
        if self.n < self.steps:
            return None
        if self.elapsed_s >= m.min_seconds and (
            m.rel_ci is None or median_rel_halfwidth(self.sorted_s) <= m.rel_ci
        ):
            if self.n == self.steps:
                return "steps"
            return "rel_ci" if m.rel_ci is not None and before >= m.min_seconds else "min_seconds"
        if m.max_steps is not None and self.n >= m.max_steps:
            return "max_steps"
        if m.max_seconds is not None and self.elapsed_s >= m.max_seconds:
            return "max_seconds"
        return None

    def plan(self) -> tuple[int, str]:
        """How many measured steps to run in all, and why, extrapolated from the steps so far (for
        ranks that must agree on a count in advance): the count at which the mean step so far
        reaches min_seconds, or at which the median's interval, narrowing as 1/sqrt(n), reaches
        rel_ci, whichever is larger; capped as the rule caps. Call it once `steps` steps are in."""
        m, n = self.measure, self.n
        mean = self.elapsed_s / n if n else 0.0

        def reaching(seconds: float) -> float:  # the count at which the mean step adds up to `seconds`
            if seconds <= 0:
                return 0
            return math.ceil(seconds / mean) if mean > 0 else math.inf

        fewest = max(n, self.steps)
        count, reason = fewest, "steps"
        if reaching(m.min_seconds) > count:
            count, reason = reaching(m.min_seconds), "min_seconds"
        if m.rel_ci is not None:
            width = median_rel_halfwidth(self.sorted_s)
            needed = math.ceil(n * (width / m.rel_ci) ** 2) if math.isfinite(width) else math.inf
            if needed > count:
                count, reason = needed, "rel_ci"
        if m.max_seconds is not None and count > max(fewest, reaching(m.max_seconds)):
            count, reason = max(fewest, reaching(m.max_seconds)), "max_seconds"
        if m.max_steps is not None and count > max(fewest, m.max_steps):
            count, reason = max(fewest, m.max_steps), "max_steps"
        if math.isinf(count):  # no cap and no time measured (a clock that did not advance)
            count, reason = fewest, "steps"
        return int(count), reason


class Stopping:
    """How many steps the measured loop launches in all (`limit`, warm-up included), updated from
    the measured steps as they are reported; `reason` once it is decided.

    One process applies the rule to each reported step and stops launching at the first step that
    meets it (the steps already launched are still reported and kept). The ranks of a distributed
    cell must all run the same number of steps (each step's all-reduce waits for every rank), and
    their own clocks could meet the rule at different steps: once `steps` measured steps are
    reported, each rank proposes a count (`StopRule.plan`), they gather the proposals — one
    collective, at the same step on every rank — and all run the largest one.
    """

    def __init__(
        self, warmup_steps: int, steps: int, measure: MeasureConfig, gather: Callable[[Any], list[Any]] | None
    ):
        self.warmup_steps, self.gather = warmup_steps, gather
        self.rule = StopRule(steps, measure)
        cap = max(steps, measure.max_steps) if measure.max_steps is not None else math.inf
        self.limit: float = warmup_steps + cap
        self.reason: str | None = None

    def in_flight_suffice(self, launched: int) -> bool:
        """Whether the measured steps launched but not reported yet will, at the mean step so
        far, stop the loop: they reach the rule's count and its time (without `rel_ci`: an
        interval cannot be foreseen), or its `max_seconds` cap (with or without it). Then a further
        launch would only run past the rule. One process only (ranks agree on a count). If they
        fall short after all, the loop launches again once they are reported."""
        rule, m = self.rule, self.rule.measure
        if self.gather is not None or self.reason or rule.n == 0:
            return False
        in_flight = launched - self.warmup_steps - rule.n
        n = rule.n + in_flight
        if in_flight <= 0 or n < rule.steps:
            return False
        foreseen_s = rule.elapsed_s * n / rule.n
        return (m.rel_ci is None and foreseen_s >= m.min_seconds) or (
            m.max_seconds is not None and foreseen_s >= m.max_seconds
        )

    def measured(self, step_time_ms: float, launched: int) -> None:
        """One more measured step was reported, `launched` steps having been started."""
        if self.reason is not None:
            return
        reason = self.rule.add(step_time_ms / 1e3)
        if self.gather is None:
            if reason is not None:
                self.reason, self.limit = reason, min(self.limit, launched)
        elif self.rule.n == self.rule.steps:
            count, self.reason = max(self.gather(self.rule.plan()), key=lambda proposal: proposal[0])
            self.limit = max(self.warmup_steps + count, launched)
