"""`compilebench bisect`: one cell over an ordered list of environments, run only where the search
(orchestrator/sweep/bisection.py) asks, or all of them (`--all`), and judged as the version table
judges neighbours.

The overrides are a sweep's: one compiled cell (`backend=NAME`, no list) and `environment=a,b,...`.
Each probe is a sweep of that cell in the environments not yet run, planned, prepared and run or
submitted (and waited for) as `compilebench sweep` does, into one sweep directory that each probe
adds to (its manifest kept in the order of `environment=`); replicates and pairing are the sweep's
own. Where the answer needs it (the speedup, the eager step) the probe runs the cell's eager cell
beside it (`backend=eager,NAME`). Two environments are compared by the version table's rows
(analysis/studies/versions.py `change_rows`): the quantity's verdict (`equivalence_verdict` of its
interval against the margin) decides CHANGED (faster, slower, larger, smaller), SAME (no difference)
or UNDECIDED; a cell that completed in one and not the other is CHANGED whatever the quantity. The
speedup's change rests on the paired per-run ratios where both compiled cells are paired, else on the
four cells (`_speedup_change` there); the evidence says which. `answer` prints what was found with
the search's assumption and gives the exit code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.cells.loaded import Loaded, Settings, open_sweep
from analysis.cells.paired import PAIRED, UNPAIRED
from analysis.rendering.text import fmt_number, fmt_speedup, is_null
from analysis.studies.versions import change_rows, version_rows
from orchestrator.executors.base import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Follow
from orchestrator.executors.choice import executor_for
from orchestrator.grid.cells import Grid
from orchestrator.grid.expand import expand
from orchestrator.sweep.bisection import (
    CHANGED,
    QUANTITIES,
    SAME,
    UNDECIDED,
    Drift,
    NoChange,
    Undecided,
    bisect,
    scan,
)
from orchestrator.sweep.driver import drive
from workloads.contract.sweep_dir import check_sweep_dir, read_manifest, write_manifest
from workloads.contract.vocabulary import BASELINE_BACKEND

#: Those that need the eager cell beside the compiled one.
WITH_EAGER = {"speedup", "eager_step"}
#: What a change of speedup rests on (analysis/studies/versions.py `_speedup_change`), as printed.
SPEEDUP_BASIS = {PAIRED: "paired per-run ratios", UNPAIRED: "four cells, unpaired"}
#: What an undecided comparison needs.
MORE_RUNS = "undecided: more replicates, repeats=N"


class BisectError(ValueError):
    """Overrides bisect cannot search; the message is one line."""


def _take(overrides: Sequence[str], key: str) -> tuple[list[str], list[str]]:
    """(the values of `key=a,b`, the other overrides); BisectError where `key` is given twice."""
    given = [o for o in overrides if o.startswith(f"{key}=")]
    if len(given) > 1:
        raise BisectError(f"{key}= given {len(given)} times; give it once")
    values = given[0].split("=", 1)[1].split(",") if given else []
    return [v.strip() for v in values], [o for o in overrides if not o.startswith(f"{key}=")]


@dataclass
class Probes:
    """The cell's overrides (without its environment), its sweep directory, and the environments run."""

    overrides: list[str]
    environments: list[str]
    quantity: str
    equivalence: float
    sweep_dir: Path
    config_dirs: Sequence[Path] = ()
    ran: list[str] = field(default_factory=list)
    _loaded: tuple[int, Loaded] | None = None

    def grid(self, environments: Sequence[str]) -> Grid:
        return expand(
            [*self.overrides, f"environment={','.join(environments)}", f"hydra.sweep.dir={self.sweep_dir}"],
            config_dirs=self.config_dirs,
        )

    def run(self, environments: Sequence[str]) -> None:
        """Run the cell in those of `environments` not run yet, as one sweep into the directory."""
        todo = [e for e in environments if e not in self.ran]
        if not todo:
            return
        print(f"bisect: running {', '.join(todo)}", flush=True)
        grid = self.grid(todo)
        executor = executor_for(grid)
        code = drive(executor, executor.plan(grid), grid, None if executor.foreground else Follow())
        if code == EXIT_USAGE:  # a failed cell is recorded and judged; a refused sweep is not
            raise BisectError(f"the probe of {', '.join(todo)} was refused (above)")
        self.ran.extend(todo)
        self._list_in_order()

    def _list_in_order(self) -> None:
        """The manifest's rows in the order of `environment=` (a sweep puts its newest first), which
        is the order `analyze`'s version table reads neighbours in."""
        manifest = read_manifest(self.sweep_dir)
        if manifest is None:
            return
        rank = {name: i for i, name in enumerate(self.environments)}
        rows = manifest.astype(object).where(manifest.notna(), None).to_dict("records")
        write_manifest(self.sweep_dir, sorted(rows, key=lambda row: rank.get(row["environment"], len(rank))))

    def changes(self, environments: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(the version rows of `environments`, the change rows of each with the next), all run first;
        the sweep opened again only after a probe ran."""
        self.run(environments)
        if self._loaded is None or self._loaded[0] != len(self.ran):
            opened = open_sweep(self.sweep_dir, settings=Settings(equivalence=self.equivalence), warn=None)
            self._loaded = (len(self.ran), opened)
        loaded = self._loaded[1]
        rows = version_rows(loaded.data, loaded.metrics, list(environments))
        return rows, change_rows(loaded.data, loaded.metrics.reset_index(drop=True), rows, self.equivalence)

    def verdict(self, change: Mapping) -> str:
        """CHANGED, SAME or UNDECIDED of one change row (module doc)."""
        if not is_null(change["status_change"]):
            return CHANGED
        if self.quantity == "status":
            return SAME
        verdict = change[f"{QUANTITIES[self.quantity]}_verdict"]
        if verdict in ("faster", "slower", "larger", "smaller"):
            return CHANGED
        return SAME if verdict == "no difference" else UNDECIDED

    def judge(self, old: str, new: str) -> str:
        """CHANGED, SAME or UNDECIDED: `new`'s answer against `old`'s (module doc)."""
        _, change = self.changes([old, new])
        return UNDECIDED if change.empty else self.verdict(change.iloc[0])

    def evidence(self, old: str, new: str) -> str:
        """The two environments' numbers and the change between them, as lines."""
        rows, _ = self.changes([old, new])
        lines = [
            f"  {row['environment']}: eager {fmt_number(row['eager_ms'])} ms, compiled "
            f"{fmt_number(row['median_step_ms'])} ms, speedup "
            f"{fmt_speedup(row['speedup'], row['speedup_low'], row['speedup_high']) or '-'}, {row['status']}"
            for row in rows.to_dict("records")
        ]
        return "\n".join([*lines, self.change(old, new)])

    def change(self, old: str, new: str) -> str:
        """`  a → b: eager old/new 1.041x [1.005, 1.079] (faster); ...; speedup new/old ... (paired ...)`."""
        _, change = self.changes([old, new])
        if change.empty:
            return f"  {old} → {new}: nothing to compare"
        row = change.iloc[0]
        said = [
            f"{name} {fmt_speedup(row[c], row[f'{c}_low'], row[f'{c}_high'], 3)} ({row[f'{c}_verdict']}"
            f"{', ' + SPEEDUP_BASIS[row['speedup_method']] if c == 'speedup' else ''})"
            for name, c in (("eager old/new", "eager"), ("compiled old/new", "compiled"),
                            ("speedup new/old", "speedup"))
            if not is_null(row[c])
        ]  # fmt: skip
        if not is_null(row["status_change"]):
            said.append(str(row["status_change"]))
        return f"  {old} → {new}: {'; '.join(said) or 'nothing to compare'}"


def probes_for(
    overrides: Sequence[str], quantity: str, equivalence: float, config_dirs: Sequence[Path] = ()
) -> Probes:
    """The probes of a bisect, every environment and the cell checked first (GridError, BisectError,
    SweepDirError, ExecutorError: nothing is written or submitted)."""
    environments, rest = _take(overrides, "environment")
    if len(environments) < 2:
        raise BisectError("bisect needs environment=A,B,... with two environments or more, in order")
    if len(set(environments)) < len(environments):
        raise BisectError(f"environment={','.join(environments)} names an environment twice")
    backends, rest = _take(rest, "backend")
    if len(backends) != 1 or backends[0] == BASELINE_BACKEND:
        raise BisectError("bisect follows one compiled cell: give backend=NAME (one, not eager)")
    both = [BASELINE_BACKEND, *backends] if quantity in WITH_EAGER else backends
    chosen, rest = _take(rest, "hydra.sweep.dir")
    rest.append(f"backend={','.join(both)}")
    # One directory for every probe: the one chosen, else the one a sweep of these overrides gets now.
    where = [f"hydra.sweep.dir={','.join(chosen)}"] if chosen else []
    whole = expand([*rest, f"environment={','.join(environments)}", *where], config_dirs=config_dirs)
    compiled = [c for c in whole.cells if c.config["backend"]["name"] != BASELINE_BACKEND]
    if len(compiled) != len(environments):
        raise BisectError(
            f"bisect follows one cell: these overrides give {len(compiled)} compiled cells over "
            f"{len(environments)} environments, not one each"
        )
    check_sweep_dir(whole.sweep_dir)
    executor_for(whole).plan(whole)  # the profile and partition checked before anything runs
    return Probes(rest, environments, quantity, equivalence, whole.sweep_dir, config_dirs)


def report(probes: Probes, message: str) -> None:
    """The bisect's answer, then which environments it ran and where their results are."""
    ran = f"ran {len(probes.ran)} of {len(probes.environments)} environments ({', '.join(probes.ran)})"
    print(f"{message}\n{ran}; results in {probes.sweep_dir}")


def answer(probes: Probes, every: bool) -> int:
    """Run the search (or with `every`, --all, every environment and each neighbouring pair), print
    what it found with its assumption, and return the exit code: EXIT_OK where a change is named."""
    quantity, margin = probes.quantity, probes.equivalence
    first, last = probes.environments[0], probes.environments[-1]
    assumes = "a binary search assumes the answer changes once; --all judges every neighbouring pair"
    if every:
        probes.run(probes.environments)
        pairs = scan(probes.environments, probes.judge)
        named = {verdict: [f"{old} → {new}" for old, new, said in pairs if said == verdict]
                 for verdict in (CHANGED, UNDECIDED)}  # fmt: skip
        report(
            probes,
            f"bisect --all: the {quantity} changed at {len(named[CHANGED])} of {len(pairs)} neighbouring "
            f"pairs ({', '.join(named[CHANGED]) or 'none'}); undecided at {len(named[UNDECIDED])} "
            f"({', '.join(named[UNDECIDED]) or 'none'})\n"
            + "\n".join(probes.change(old, new) for old, new, _ in pairs),
        )
        return EXIT_OK if named[CHANGED] and not named[UNDECIDED] else EXIT_FAILED
    try:
        found = bisect(probes.environments, probes.judge)
    except NoChange as stop:
        within = "the same" if quantity == "status" else f"within noise (no difference at ±{100 * margin:g}%)"
        why = within if stop.verdict == SAME else f"too noisy to tell apart ({MORE_RUNS})"
        report(
            probes,
            f"bisect: the {quantity} in {first} and in {last} is {why}: nothing to bisect ({assumes}: "
            f"a change between them that reverted is unseen)\n{probes.evidence(first, last)}",
        )
        return EXIT_FAILED
    except Undecided as stop:
        report(
            probes,
            f"bisect: the {quantity} in {stop.environment} can be told apart from neither "
            f"{first}'s nor {last}'s ({MORE_RUNS}): stopped",
        )
        return EXIT_FAILED
    except Drift as stop:
        alone = "no difference" if stop.verdict == SAME else "undecided"
        report(
            probes,
            f"bisect: the {quantity} in {stop.new} differs from {first}'s and in {stop.old} does not, but "
            f"{stop.old} → {stop.new} alone is {alone}: no one change between {first} and {last} "
            f"({assumes})\n{probes.evidence(stop.old, stop.new)}",
        )
        return EXIT_FAILED
    report(
        probes,
        f"bisect: the {quantity} changed from {found.old} to {found.new}: one change between "
        f"{first} and {last} ({assumes})\n{probes.evidence(*found.pair)}",
    )
    return EXIT_OK
