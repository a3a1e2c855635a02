"""`compilebench bisect` end to end: the refusals before anything runs, and real bisects on the local
executor (the session's virtual environments, tests/conftest.py `venvs`; the search itself:
tests/unit/orchestrator/test_bisection.py) of each exit: a change found (the default quantity, the
speedup), ends that agree (and --all naming the changes between them), an environment undecided.
Every effect is a wait or a missing torch, which a busy machine does not move: a model whose steps
wait as long as its environment says (tests/helpers/custom_targets.py `mlp_of_environment`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.cells.paired import PAIRED
from analysis.report import analyze
from analysis.studies.versions import CHANGES_TABLE, NEWLY_FAILING, NEWLY_WORKING
from tests.conftest import Venvs
from tests.helpers import TINY, cli, environments
from tests.helpers.custom_targets import EAGER_WAIT_ENV, STEP_WAIT_ENV


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


#: The model whose step time its environment sets (tests/helpers/custom_targets.py), a cell of it, and
#: the overrides that make the steps of a named environment wait.
TARGET = "tests.helpers.custom_targets:mlp_of_environment"
MLP = [
    "model=custom", f"model.target={TARGET}", *(o for o in TINY if not o.startswith(("model=", "steps="))),
    "backend=aot_eager",
]  # fmt: skip


def waits(variable: str, **seconds: str) -> list[str]:
    """Overrides that set `variable` in these environments' `env` (e.g. a="0.3", b="0.01/1.2")."""
    return [f"+cluster.environments.{name}.env.{variable}={value}" for name, value in seconds.items()]


def test_bisect_of_the_speedup_names_the_environment_whose_eager_side_waits(
    tmp_path: Path, venvs: Venvs
) -> None:
    """The default quantity, the speedup, of paired cells. From b on, the MLP's eager forward waits
    0.5 s a step (its eager cell's and its force_eager side's), the compiled one does not: a speedup of
    5x or more there on any machine (its compiled step: 1.3 ms quiet, a median of 40-100 ms at load
    2.5-12), against one near 1x in a, whatever the load. The change is at b: the ends and b run, c
    does not. The change rests on the pairs and says so, and the sweep directory analyses to the same."""
    sweep = tmp_path / "sweep"
    result = cli(
        tmp_path, "bisect", *MLP, "steps=4", "measure.block_seconds=0", "measure.block_steps=1",
        *environments(**dict.fromkeys("abcd", venvs.one)),
        *waits(EAGER_WAIT_ENV, **dict.fromkeys("bcd", "0.5")),
        "environment=a,b,c,d", f"hydra.sweep.dir={sweep}", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "bisect: the speedup changed from a to b: one change between a and d (a binary search assumes "
        "the answer changes once; --all judges every neighbouring pair)" in result.stdout
    )
    assert "ran 3 of 4 environments (a, d, b)" in result.stdout
    said = r"a → b: .*speedup new/old \d+\.\d+x \[[\d.]+, [\d.]+\] \(larger, paired per-run ratios\)"
    assert re.search(said, result.stdout), result.stdout
    changes = {t.name: t for t in analyze(sweep, warn=None).tables}[CHANGES_TABLE].data
    assert list(zip(changes["old"], changes["new"])) == [("a", "b"), ("b", "d")]
    first = changes.iloc[0]
    assert (first["speedup_method"], first["speedup_verdict"]) == (PAIRED, "larger")


def test_bisect_stops_where_the_ends_agree_and_all_names_the_change_that_reverts(
    tmp_path: Path, venvs: Venvs
) -> None:
    """The cell completes in c only (a, b, d and e have no torch): the status changes at b → c and
    back at c → d. The ends agree, so the binary search stops there with exit 1, having run two; --all
    runs all five and names both changes."""
    named = environments(a=venvs.bare, b=venvs.bare, c=venvs.one, d=venvs.bare, e=venvs.bare)
    cell = [*MLP, "steps=4", "measure.paired=false", *named, "environment=a,b,c,d,e"]
    ends = cli(tmp_path, "bisect", *cell, f"hydra.sweep.dir={tmp_path / 'ends'}", "--quantity", "status")
    assert ends.returncode == 1, ends.stdout + ends.stderr
    assert "bisect: the status in a and in e is the same: nothing to bisect" in ends.stdout
    assert "a change between them that reverted is unseen" in ends.stdout
    assert "ran 2 of 5 environments (a, e)" in ends.stdout
    sweep = tmp_path / "all"
    every = cli(
        tmp_path, "bisect", *cell, f"hydra.sweep.dir={sweep}", "--quantity", "status", "--all", timeout=600
    )
    assert every.returncode == 0, every.stdout + every.stderr
    assert (
        "bisect --all: the status changed at 2 of 4 neighbouring pairs (b → c, c → d); undecided at 0"
        in every.stdout
    )
    assert "b → c: newly working" in every.stdout and "c → d: newly failing" in every.stdout
    assert "ran 5 of 5 environments" in every.stdout
    changes = {t.name: t for t in analyze(sweep, warn=None).tables}[CHANGES_TABLE].data
    pairs = dict(zip(zip(changes["old"], changes["new"]), changes["status_change"]))
    assert list(pairs) == [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]  # in the order of environment=
    assert (pairs[("b", "c")], pairs[("c", "d")]) == (NEWLY_WORKING, NEWLY_FAILING)


def test_bisect_stops_where_the_ends_cannot_be_told_apart(tmp_path: Path, venvs: Venvs) -> None:
    """In a and b alike the compiled steps wait 0.01 and 0.3 s in turn, six measured: each median's
    bootstrap draws lie at either wait and between, so the interval of a / b spans 1 by far more than
    the margin: neither a change nor none, at any load (a step that load lengthens by 0.9 s, seen at
    load 11, only widens it). Exit 1, after the ends."""
    result = cli(
        tmp_path, "bisect", *MLP, "steps=6", "measure.paired=false",
        *environments(**dict.fromkeys("ab", venvs.one)), *waits(STEP_WAIT_ENV, a="0.01/0.3", b="0.01/0.3"),
        "environment=a,b", f"hydra.sweep.dir={tmp_path / 'sweep'}", "--quantity", "compiled_step",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "bisect: the compiled_step in a and in b is too noisy to tell apart (undecided: more replicates, "
        "repeats=N): nothing to bisect" in result.stdout
    )
    assert re.search(r"a → b: compiled old/new [\d.]+x \[[\d.]+, [\d.]+\] \(undecided\)", result.stdout)
    assert "ran 2 of 2 environments (a, b)" in result.stdout
