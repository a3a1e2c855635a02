"""`compilebench bisect`: the search's arithmetic with a judge of known answers, the refusals before
anything runs, and real bisects over five environments on the local executor (the session's virtual
environments, tests/conftest.py `venvs`), each running four of them: where the last three have no
torch (the cell fails there), and where each step of the last four waits half a second (the
compiled step is slower there, by far more than a busy machine moves it)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import analyze
from analysis.studies.versions import CHANGES_TABLE, NEWLY_FAILING
from orchestrator.sweep.bisection import CHANGED, SAME, UNDECIDED, NoChange, Undecided, bisect
from tests.conftest import Venvs
from tests.helpers import TINY, cli, environments
from tests.helpers.custom_targets import STEP_WAIT_ENV
from workloads.contract.vocabulary import COMPLETED, FAILED

NAMES = [f"env{i}" for i in range(9)]
#: The model whose step time its environment sets, and the seconds each step waits in the slower ones.
TARGET, SLOWER_WAIT_S = "tests.helpers.custom_targets:mlp_of_environment", 0.5


def judge_of(answers: list[float | None], asked: set[str]):
    """A judge of these answers per environment (None: too noisy to tell from anything), recording
    which environments it was asked about."""
    answer = dict(zip(NAMES, answers))

    def judge(old: str, new: str) -> str:
        asked.update((old, new))
        if answer[old] is None or answer[new] is None:
            return UNDECIDED
        return SAME if answer[old] == answer[new] else CHANGED

    return judge


@pytest.mark.parametrize("count", [2, 3, 5, 9])
def test_the_search_names_the_first_change_asking_ends_and_log2_more(count: int) -> None:
    for change in range(1, count):
        asked: set[str] = set()
        answers = [1.0] * change + [2.0] * (count - change)
        found = bisect(NAMES[:count], judge_of(answers, asked))
        assert (found.last_same, found.first_changed) == (NAMES[change - 1], NAMES[change])
        assert len(asked) <= 2 + math.ceil(math.log2(count - 1))


def test_the_search_stops_on_ends_alike_and_places_or_refuses_the_undecided() -> None:
    with pytest.raises(NoChange) as same:
        bisect(NAMES[:5], judge_of([1.0, 2.0, 2.0, 2.0, 1.0], set()))
    assert same.value.verdict == SAME
    # env2 cannot be told from env0; it answers as env4 would not: it is where the search stops.
    with pytest.raises(Undecided) as undecided:
        bisect(NAMES[:5], judge_of([1.0, 1.0, None, 2.0, 2.0], set()))
    assert undecided.value.environment == "env2"
    # env2 undecided against env0 but the same as env4: the change is at or before it.
    answers = [1.0, 2.0, 2.0, 2.0, 2.0]
    noisy = judge_of(answers, set())
    found = bisect(NAMES[:5], lambda a, b: UNDECIDED if {a, b} == {"env0", "env2"} else noisy(a, b))
    assert found.first_changed == "env1"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["environment=a"], "two environments or more"),
        (["environment=a,b,a"], "names an environment twice"),
        (["backend=eager", "environment=a,b"], "one compiled cell"),
        (["backend=inductor", "environment=a,nope"], "nope"),
        (["backend=inductor", "size=tiny,small", "environment=a,b"], "4 compiled cells over 2 environments"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    sweep = tmp_path / "sweep"
    defined = environments(a="/opt/a", b="/opt/b")
    tiny = [o for o in TINY if not o.startswith("size=")] if "size=tiny,small" in overrides else TINY
    result = cli(tmp_path, "bisect", *tiny, *defined, *overrides, f"hydra.sweep.dir={sweep}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not sweep.exists()


def test_bisect_runs_the_ends_and_log2_probes_and_names_the_first_broken_environment(
    tmp_path: Path, venvs: Venvs
) -> None:
    """Five environments in order; the first two have torch, the last three do not, so the cell
    completes in a and b and fails from c on. Ends, then c (changed), then b (same): four of five run,
    c named with b's and c's numbers. The sweep directory analyses as any other: c newly failing."""
    named = environments(a=venvs.one, b=venvs.two, c=venvs.bare, d=venvs.bare, e=venvs.bare)
    sweep = tmp_path / "sweep"
    result = cli(
        tmp_path, "bisect", *TINY, "backend=aot_eager", *named,
        "environment=a,b,c,d,e", f"hydra.sweep.dir={sweep}", "--quantity", "status", timeout=600,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "bisect: the status changed first in c (after b)" in result.stdout
    assert "ran 4 of 5 environments (a, e, c, b)" in result.stdout
    assert "b → c: newly failing" in result.stdout
    runs = pd.concat(pd.read_parquet(path) for path in sweep.glob("cells/*/run.parquet"))
    status = dict(zip(runs["environment"], runs["status"]))
    assert status == {"a": COMPLETED, "b": COMPLETED, "c": FAILED, "e": FAILED}  # d never ran
    changes = {t.name: t for t in analyze(sweep, warn=None).tables}[CHANGES_TABLE].data
    pairs = dict(zip(zip(changes["old"], changes["new"]), changes["status_change"]))
    assert list(pairs) == [("a", "b"), ("b", "c"), ("c", "e")]  # in the order of environment=
    assert pairs[("b", "c")] == NEWLY_FAILING and pd.isna(pairs[("a", "b")]) and pd.isna(pairs[("c", "e")])


def test_bisect_finds_the_environment_whose_compiled_step_is_slower(tmp_path: Path, venvs: Venvs) -> None:
    """One custom model (tests/helpers/custom_targets.py `mlp_of_environment`), a small MLP whose steps also
    wait as long as its environment says: not at all in a, 0.5 s in b to e (their `env`), so that a
    compiled step there lasts at least 0.5 s on any machine, where a's measured 1.3 ms quiet and a
    median of 40-100 ms on the 2 cores at load 2.5-12. (Work instead of a wait moves with the load:
    gpt tiny's scalar kernels read 0.83x [0.51, 1.32] at load 3, 20 times the MLP's layers 0.44x
    [0.09, 1.92] at load 2.5, both undecided.) The change is at b, so every comparison is against a:
    ends, c, b run; d does not. The sweep directory analyses with the version table's own verdict of
    a → b."""
    slower = [f"+cluster.environments.{name}.env.{STEP_WAIT_ENV}={SLOWER_WAIT_S}" for name in "bcde"]
    sweep = tmp_path / "sweep"
    cell = [o for o in TINY if not o.startswith(("model=", "steps="))]
    result = cli(
        tmp_path, "bisect", "model=custom", f"model.target={TARGET}", *cell, "steps=10",
        "measure.paired=false", "backend=aot_eager", *environments(**dict.fromkeys("abcde", venvs.one)),
        *slower, "environment=a,b,c,d,e", f"hydra.sweep.dir={sweep}", "--quantity", "compiled_step",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bisect: the compiled_step changed first in b (after a)" in result.stdout
    assert "ran 4 of 5 environments (a, e, c, b)" in result.stdout
    assert re.search(r"a → b: compiled old/new 0\.\d+x \[[\d.]+, [\d.]+\] \(slower\)", result.stdout)
    changes = {t.name: t for t in analyze(sweep, warn=None).tables}[CHANGES_TABLE].data
    assert list(zip(changes["old"], changes["new"])) == [("a", "b"), ("b", "c"), ("c", "e")]
    assert changes["compiled_verdict"].iloc[0] == "slower"
