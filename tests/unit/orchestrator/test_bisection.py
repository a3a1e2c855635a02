"""The search of `compilebench bisect` (orchestrator/sweep/bisection.py) with a judge of known answers:
every pattern of two answers over up to 9 environments, changes that revert included; the ends and
log2 more asked; the stops where the ends agree, a middle environment cannot be placed, or the pair
found cannot be told apart."""

from __future__ import annotations

import itertools
import math

import pytest

from orchestrator.sweep.bisection import (
    CHANGED,
    SAME,
    UNDECIDED,
    Drift,
    NoChange,
    Undecided,
    bisect,
    scan,
)

NAMES = [f"env{i}" for i in range(9)]


def judge_of(answers: list[float | None], asked: set[str] | None = None):
    """A judge of these answers per environment (None: too noisy to tell from anything), recording
    which environments it was asked about in `asked`."""
    answer = dict(zip(NAMES, answers))

    def judge(old: str, new: str) -> str:
        if asked is not None:
            asked.update((old, new))
        if answer[old] is None or answer[new] is None:
            return UNDECIDED
        return SAME if answer[old] == answer[new] else CHANGED

    return judge


def patterns(count: int):
    """Every pattern of two answers over `count` environments."""
    return [list(p) for p in itertools.product([0.0, 1.0], repeat=count)]


def changes_of(answers: list[float]) -> list[tuple[str, str]]:
    """The neighbours whose answers differ."""
    return [(NAMES[i], NAMES[i + 1]) for i in range(len(answers) - 1) if answers[i] != answers[i + 1]]


@pytest.mark.parametrize("count", [2, 3, 4, 5, 9])
def test_scan_names_every_change_of_every_pattern(count: int) -> None:
    for answers in patterns(count):
        found = scan(NAMES[:count], judge_of(answers))
        assert [(old, new) for old, new, verdict in found if verdict == CHANGED] == changes_of(answers)
        assert all(verdict == SAME for old, new, verdict in found if (old, new) not in changes_of(answers))


@pytest.mark.parametrize("count", [2, 3, 4, 5, 9])
def test_bisect_names_a_true_change_between_neighbours_of_every_pattern_asking_ends_and_log2_more(
    count: int,
) -> None:
    """Where the ends differ, the pair named is neighbours whose answers differ, whatever changes
    revert between them; where the ends agree, nothing is named (the stated assumption: one change)."""
    for answers in patterns(count):
        asked: set[str] = set()
        if answers[0] == answers[-1]:
            with pytest.raises(NoChange):
                bisect(NAMES[:count], judge_of(answers, asked))
            continue
        found = bisect(NAMES[:count], judge_of(answers, asked))
        assert found.pair in changes_of(answers)
        assert len(asked) <= 2 + math.ceil(math.log2(count - 1))


def test_with_one_change_bisect_names_it_and_with_reverts_not_always_the_first() -> None:
    """Monotone patterns (one change): always that change. Over 9 environments whose ends differ (the
    128 patterns of the 7 between), the first change in 54 of them: the docs' number."""
    for change in range(1, 9):
        answers = [0.0] * change + [1.0] * (9 - change)
        assert bisect(NAMES, judge_of(answers)).pair == (NAMES[change - 1], NAMES[change])
    ends_differ = [p for p in patterns(9) if p[0] == 0.0 and p[-1] == 1.0]
    first = sum(bisect(NAMES, judge_of(p)).pair == changes_of(p)[0] for p in ends_differ)
    assert (first, len(ends_differ)) == (54, 128)


def test_the_search_stops_on_ends_alike_and_places_or_refuses_the_undecided() -> None:
    with pytest.raises(NoChange) as same:
        bisect(NAMES[:5], judge_of([1.0, 2.0, 2.0, 2.0, 1.0]))
    assert same.value.verdict == SAME
    # env2 cannot be told from env0; it answers as env4 would not: it is where the search stops.
    with pytest.raises(Undecided) as undecided:
        bisect(NAMES[:5], judge_of([1.0, 1.0, None, 2.0, 2.0]))
    assert undecided.value.environment == "env2"
    # env2 undecided against env0 but the same as env4: the change is at or before it.
    noisy = judge_of([1.0, 2.0, 2.0, 2.0, 2.0])
    found = bisect(NAMES[:5], lambda a, b: UNDECIDED if {a, b} == {"env0", "env2"} else noisy(a, b))
    assert found.new == "env1"


def test_neighbours_that_cannot_be_told_apart_are_a_drift_not_a_change() -> None:
    """An answer that moves one step per environment, where the judge reads one step as no difference
    and two as a change: env2 differs from env0 and env1 does not, yet env1 → env2 is one step."""

    def judge(old: str, new: str) -> str:
        return CHANGED if abs(NAMES.index(new) - NAMES.index(old)) >= 2 else SAME

    with pytest.raises(Drift) as drift:
        bisect(NAMES[:5], judge)
    assert (drift.value.old, drift.value.new, drift.value.verdict) == ("env1", "env2", SAME)
    assert [verdict for _, _, verdict in scan(NAMES[:5], judge)] == [SAME] * 4
