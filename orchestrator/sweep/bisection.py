"""The search of `compilebench bisect`: the first of an ordered list of environments whose answer
differs from the first's, asking a judge about as few environments as a binary search needs.

The judge compares two environments' answers and says CHANGED, SAME or UNDECIDED (its rule:
orchestrator/sweep/bisect_probes.py). The ends are asked first: the search needs the last to differ
from the first. Then, with `same` an environment known to answer as the first and `changed` one known
to differ (the first and the last to begin with), the middle one is asked against the first: the
same moves `same` up to it, a change moves `changed` down, until they are neighbours. A middle one too
noisy to tell from the first is asked against the last: the same as the last counts as changed; else
the search stops there (more replicates would decide it). With N environments it asks about the
ends and at most ceil(log2(N - 1)) more.
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


@dataclass(frozen=True)
class Bisection:
    """The last environment that answers as the first, and the next, the first whose answer differs."""

    last_same: str
    first_changed: str


def bisect(environments: Sequence[str], judge: Callable[[str, str], str]) -> Bisection:
    """The neighbours where the answer changes (module doc); `judge(a, b)` is b's answer against a's.
    NoChange where the ends do not differ, Undecided where a middle one cannot be placed."""
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
    return Bisection(environments[same], environments[changed])
