"""The search of `compilebench bisect`: neighbours of an ordered list of environments between which
the answer changes, asking a judge about as few environments as a binary search needs (`bisect`),
or about every neighbouring pair (`scan`, `--all`).

A binary search assumes the answer changes once between the first and the last. Then the pair it
names is that change. Where the answer may change and change back, the pair it names is still a
change between neighbours, but one of several and not always the first (of the 128 patterns of
two answers over 9 environments whose ends differ, it names the first change in 54:
tests/system/test_bisect.py), and ends that agree hide changes that reverted; `scan` names each.

The judge compares two environments' answers and says CHANGED, SAME or UNDECIDED (its rule:
orchestrator/sweep/bisect_probes.py). The ends are asked first: the search needs the last to differ
from the first. Then, with `same` an environment known to answer as the first and `changed` one known
to differ (the first and the last to begin with), the middle one is asked against the first: the
same moves `same` up to it, a change moves `changed` down, until they are neighbours. A middle one too
noisy to tell from the first is asked against the last: the same as the last counts as changed; else
the search stops there (more replicates would decide it). With N environments it asks about the
ends and at most ceil(log2(N - 1)) more. The pair found is judged against each other last (both
already run): a judge of noisy answers can tell each from the first and not from each other (an
answer that drifted over several environments), and then no one change is named (`Drift`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

CHANGED, SAME, UNDECIDED = "changed", "same", "undecided"
#: The answers bisect can follow (`--quantity`) -> the column of the version table's change rows
#: (analysis/studies/versions.py `change_rows`) that reads their change.
QUANTITIES = {
    "speedup": "speedup",
    "eager_step": "eager",
    "compiled_step": "compiled",
    "status": "status",
}


class NoChange(Exception):
    """The ends' answers do not differ (SAME) or cannot be told apart (UNDECIDED): `verdict`."""

    def __init__(self, verdict: str):
        super().__init__(verdict)
        self.verdict = verdict


class Undecided(Exception):
    """An environment whose answer can be told apart from neither end's: `environment`."""

    def __init__(self, environment: str):
        super().__init__(environment)
        self.environment = environment


class Drift(Exception):
    """The neighbours `old` and `new` answer the one as the first, the other not, yet cannot be told
    apart from each other (`verdict`: SAME or UNDECIDED)."""

    def __init__(self, old: str, new: str, verdict: str):
        super().__init__(f"{old} -> {new}: {verdict}")
        self.old, self.new, self.verdict = old, new, verdict


@dataclass(frozen=True)
class Bisection:
    """Neighbours: `old` answers as the first environment, `new`, the next, does not."""

    old: str
    new: str

    @property
    def pair(self) -> tuple[str, str]:
        return self.old, self.new


def bisect(environments: Sequence[str], judge: Callable[[str, str], str]) -> Bisection:
    """Neighbours where the answer changes (module doc); `judge(a, b)` is b's answer against a's.
    NoChange where the ends do not differ, Undecided where a middle one cannot be placed, Drift where
    the pair found cannot be told apart."""
    first, last = environments[0], environments[-1]
    ends = judge(first, last)
    if ends != CHANGED:
        raise NoChange(ends)
    same, changed = 0, len(environments) - 1
    while changed - same > 1:
        middle = (same + changed) // 2
        verdict = judge(first, environments[middle])
        if verdict == UNDECIDED:
            if judge(environments[middle], last) != SAME:
                raise Undecided(environments[middle])
            verdict = CHANGED
        if verdict == SAME:
            same = middle
        else:
            changed = middle
    found = Bisection(environments[same], environments[changed])
    verdict = ends if same == 0 and changed == len(environments) - 1 else judge(*found.pair)
    if verdict != CHANGED:
        raise Drift(*found.pair, verdict)
    return found


def scan(environments: Sequence[str], judge: Callable[[str, str], str]) -> list[tuple[str, str, str]]:
    """(old, new, verdict) of every pair of neighbours, in order: no assumption on how often the
    answer changes."""
    return [(old, new, judge(old, new)) for old, new in zip(environments, environments[1:])]
