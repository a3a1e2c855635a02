"""Rules between the packages and the rooms of `workloads`, checked on the source with `ast`
(nothing is imported; an import inside a function or under TYPE_CHECKING counts like any other).
docs/architecture.md draws them.

- One way: orchestrator -> analysis -> workloads; workloads imports neither of the others, and
  analysis does not import the orchestrator. Of workloads, analysis reads the contract only (the
  files' schema and vocabulary): what a cell runs is no business of its tables.
- The rooms of workloads: each imports only the rooms beneath it (ROOMS); `contract` none but
  itself, and no torch.
- The rooms of orchestrator: each imports only the rooms beneath it (ORCHESTRATOR_ROOMS); the
  executors (and what runs a cell) import nothing of analysis: the sweep driver above them prints
  the tables.
- The rooms of analysis: each imports only the rooms beneath it (ANALYSIS_ROOMS).
- One door into a sweep: only analysis/cells/loaded.py (`open_sweep`) imports the sweep readers and
  `cell_metrics` (DOORS), in the packages and examples/, so every table of a sweep is drawn with the
  settings it resolves.
- No circles: no module imports, directly or through others, a module that imports it.
- Queue state behind the executor seam: only orchestrator/executors/slurm/ speaks Slurm.
- The tree is as `ruff format` writes it, and `ruff check` finds nothing (pyproject.toml).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT

PACKAGES = ("orchestrator", "analysis", "workloads")
#: Room of workloads -> the rooms it may import (itself included). `run` is the cell's entry point
#: (`python -m workloads.run`), `train_cell` builds a cell and runs its loop with its instruments
#: (all the rooms beneath it). The users' interface for their own models (`CustomModel`) is a model
#: (`models.custom`), so `data` sits above `models`: a custom model's batches are its own.
ROOMS = {
    "contract": {"contract"},
    "local": {"contract", "local"},
    "cell": {"contract", "cell"},
    "models": {"contract", "cell", "models"},
    "data": {"contract", "cell", "models", "data"},
    "instruments": {"contract", "cell", "local", "instruments"},
    "train_cell": {"contract", "cell", "models", "data", "instruments", "local", "train_cell"},
}
#: `gemm` is the GEMM cell (model=gemm), train_cell's counterpart: the cell's parts, the instruments.
ROOMS["gemm"] = {"contract", "cell", "local", "instruments", "gemm"}
#: `kinds` is the table of the kinds of cell (train_cell's and gemm's cells with their instruments),
#: `run` the one attempt that runs any of them.
ROOMS["kinds"] = ROOMS["train_cell"] | {"gemm", "kinds"}
ROOMS["run"] = ROOMS["kinds"] | {"run"}


#: Room of orchestrator -> the rooms it may import: the command line over the sweep driver over the
#: executors (and what runs a cell) over the grid and its configuration.
ORCHESTRATOR_ROOMS = {
    "grid": {"grid"},
    "executors": {"grid", "executors"},
    "sweep": {"grid", "executors", "sweep"},
    "cli": {"grid", "executors", "sweep", "cli"},
}


def module_files() -> dict[str, Path]:
    """Dotted name -> file of every module of the three packages (a package by its __init__)."""
    found = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(source: str, module: str, known: set[str]) -> set[str]:
    """The modules of `known` that `source` (the module `module`) imports, anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*module.split(".")[: -node.level], *filter(None, [base])])
            names |= {
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            }
    return {name for name in names if name in known}


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    known = set(sources)
    return {module: imported(source, module, known) - {module} for module, source in sources.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def room(module: str) -> str | None:
    """`workloads.cell.train` -> `cell`; None outside workloads."""
    parts = module.split(".")
    return parts[1] if parts[0] == "workloads" and len(parts) > 1 else None


def room_problems(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        package = module.split(".")[0]
        for target in sorted(targets):
            if PACKAGES.index(target.split(".")[0]) < PACKAGES.index(package):
                problems.append(
                    f"{module} imports {target}: the packages import one way, {' -> '.join(PACKAGES)}"
                )
            elif package == "analysis" and target.split(".")[0] == "workloads" and room(target) != "contract":
                problems.append(f"{module} imports {target}: analysis reads workloads.contract only")
            elif package == target.split(".")[0] == "workloads" and room(target) not in ROOMS[room(module)]:
                problems.append(
                    f"{module} imports {target}: the room {room(module)} may import "
                    f"{sorted(ROOMS[room(module)])}"
                )
    return problems


def sources() -> dict[str, str]:
    return {module: path.read_text() for module, path in module_files().items()}


def test_packages_and_rooms_import_one_way() -> None:
    graph = import_graph(sources())
    assert set(filter(None, map(room, graph))) == set(ROOMS), "a room of workloads is missing from ROOMS"
    problems = room_problems(graph)
    assert not problems, "\n".join(problems)


def orchestrator_room(module: str) -> str | None:
    """`orchestrator.executors.slurm.plan` -> `executors`; None outside orchestrator's rooms."""
    parts = module.split(".")
    return parts[1] if parts[0] == "orchestrator" and len(parts) > 1 else None


def test_the_orchestrator_rooms_import_downwards_and_no_executor_imports_analysis() -> None:
    graph = import_graph(sources())
    modules = [m for m in graph if m.split(".")[0] == "orchestrator" and m != "orchestrator"]
    assert {orchestrator_room(m) for m in modules} == set(ORCHESTRATOR_ROOMS), "a module outside the rooms"
    problems = [
        f"{module} imports {target}: the room {orchestrator_room(module)} may import "
        f"{sorted(ORCHESTRATOR_ROOMS[orchestrator_room(module)])}"
        for module in sorted(modules)
        for target in sorted(graph[module])
        if orchestrator_room(target)
        and orchestrator_room(target) not in ORCHESTRATOR_ROOMS[orchestrator_room(module)]
    ]
    problems += [
        f"{module} imports {target}: an executor runs what it is given; the sweep driver prints the tables"
        for module in sorted(modules)
        if orchestrator_room(module) == "executors"
        for target in sorted(graph[module])
        if target.split(".")[0] == "analysis"
    ]
    assert not problems, "\n".join(problems)


def test_the_contract_imports_no_torch() -> None:
    contract = {m: s for m, s in sources().items() if room(m) == "contract"}
    torch_users = [
        m
        for m, s in contract.items()
        if any(
            isinstance(n, (ast.Import, ast.ImportFrom)) and "torch" in ast.unparse(n).split()[1].split(".")[0]
            for n in ast.walk(ast.parse(s))
        )
    ]
    assert len(contract) >= 5 and torch_users == []


def test_no_module_imports_a_module_that_imports_it() -> None:
    found = circles(import_graph(sources()))
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(group) for group in found)


def test_the_checks_see_what_breaks_them() -> None:
    """A circle through an import inside a function, an import up the packages and one across the
    rooms are each found; what is allowed is not."""
    hidden = {
        "workloads.cell.a": "def f():\n    from workloads.cell import b\n",
        "workloads.cell.b": "from workloads.cell.a import f\n",
    }
    assert circles(import_graph(hidden)) == [["workloads.cell.a", "workloads.cell.b"]]
    relative = {
        "workloads.cell.a": "from .b import g\n",
        "workloads.cell.b": "from . import a\n",
        "workloads.cell": "",
    }
    assert circles(import_graph(relative)) == [["workloads.cell.a", "workloads.cell.b"]]
    wrong = {
        "workloads.contract.x": "from workloads.cell.y import z\n",
        "workloads.cell.y": "",
        "analysis.p": "import orchestrator.q\n",
        "orchestrator.q": "from analysis import p\n",
        "workloads.local.t": "from workloads.contract import x\n",
        "analysis.r": "from workloads.cell.y import z\nfrom workloads.contract.x import w\n",
    }
    problems = room_problems(import_graph(wrong))
    assert [p.split(":")[0] for p in problems] == [
        "analysis.p imports orchestrator.q",
        "analysis.r imports workloads.cell.y",
        "workloads.contract.x imports workloads.cell.y",
    ]


def test_the_tree_is_formatted_and_linted_by_ruff() -> None:
    for command in (["format", "--check", "."], ["check", "."]):
        ruff = [sys.executable, "-m", "ruff", *command]
        done = subprocess.run(ruff, cwd=REPO_ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"


#: Room of analysis -> the rooms it may import (itself included): `rendering` (how a result looks) at
#: the bottom with the sweep read (`reading`) on it, the `statistics` beside them (values and codes, no
#: words: the tables word them), each cell's numbers (`cells`) on those, the `studies` on top. The
#: commands' modules (report, compare, frames) may import any.
ANALYSIS_ROOMS = {
    "rendering": {"rendering"},
    "reading": {"rendering", "reading"},
    "statistics": {"statistics"},
    "cells": {"rendering", "reading", "statistics", "cells"},
    "compare": {"rendering", "reading", "statistics", "cells", "compare"},
    "studies": {"rendering", "reading", "statistics", "cells", "studies"},
}


def test_the_rooms_of_analysis_import_downwards() -> None:
    graph = import_graph(sources())
    room_of = lambda module: module.split(".")[1] if module.count(".") >= 2 else None  # noqa: E731
    rooms = {room_of(m) for m in graph if m.startswith("analysis.")} - {None}
    assert rooms == set(ANALYSIS_ROOMS), "a room of analysis is missing from ANALYSIS_ROOMS"
    problems = [
        f"{module} imports {target}: {room_of(module)} may import {sorted(ANALYSIS_ROOMS[room_of(module)])}"
        for module, targets in sorted(graph.items())
        if module.startswith("analysis.") and room_of(module)
        for target in sorted(targets)
        if target.startswith("analysis.") and room_of(target) not in ANALYSIS_ROOMS[room_of(module)]
    ]
    assert not problems, "\n".join(problems)


#: The one module outside orchestrator/executors/slurm/ that may import it: where executors register.
SLURM = "orchestrator.executors.slurm"


def test_only_the_slurm_executor_speaks_slurm() -> None:
    """Queue state is behind the seam: outside orchestrator/executors/slurm/ no module of the
    orchestrator mentions squeue or sacct (in code, messages or prose) nor imports the Slurm executor
    (but the choice of executors), and `status` and the driver hold no Slurm word in any string."""
    found = sources()
    orchestrator = {m: s for m, s in found.items() if m.split(".")[0] == "orchestrator"}
    slurm = {m for m in orchestrator if m == SLURM or m.startswith(f"{SLURM}.")}
    speaks = re.compile(r"squeue|sacct", re.IGNORECASE)
    assert sum(bool(speaks.search(orchestrator[m])) for m in slurm) >= 2  # the search sees them there
    assert sorted(m for m in orchestrator.keys() - slurm if speaks.search(orchestrator[m])) == []
    graph = import_graph(found)
    importers = {m for m in orchestrator.keys() - slurm if graph[m] & slurm}
    assert importers == {"orchestrator.executors.choice"}
    states = next(  # Slurm's job states as it spells them: the keys of scheduler.py's SLURM_STATES
        ast.literal_eval(node.value)
        for node in ast.walk(ast.parse(orchestrator[f"{SLURM}.scheduler"]))
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "SLURM_STATES"
    )
    slurm_word = re.compile(rf"(?i:slurm)|\b({'|'.join(states)})\b")
    for module in ("orchestrator.executors.status", "orchestrator.sweep.driver"):
        strings = [
            node.value
            for node in ast.walk(ast.parse(orchestrator[module]))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        assert len(strings) > 5 and [text for text in strings if slurm_word.search(text)] == [], module


#: What reads a sweep's files and measures its cells (module, name), and the one module that may import it.
DOORS = {
    ("analysis.reading.collect", "load_sweep"),
    ("analysis.reading.collect", "load_cells"),
    ("analysis.reading.collect", "read_cell"),
    ("analysis.cells.metrics", "cell_metrics"),
}
OPEN_SWEEP = "analysis.cells.loaded"


def door_problems(sources: dict[str, str]) -> list[str]:
    """`module imports load_sweep` for every module but OPEN_SWEEP that imports one of DOORS."""
    return [
        f"{module} imports {name}: open a sweep with {OPEN_SWEEP}.open_sweep"
        for module, source in sorted(sources.items())
        if module != OPEN_SWEEP
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        for name in (alias.name for alias in node.names)
        if (node.module, name) in DOORS
    ]


def test_a_sweep_is_opened_by_one_function_only() -> None:
    examples = {
        ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts): path.read_text()
        for path in (REPO_ROOT / "examples").rglob("*.py")
    }
    assert door_problems({**sources(), **examples}) == []
    side_door = {"orchestrator.sweep.x": "def f():\n    from analysis.cells.metrics import cell_metrics\n"}
    assert door_problems({**side_door, OPEN_SWEEP: "from analysis.reading.collect import load_sweep\n"}) == [
        f"orchestrator.sweep.x imports cell_metrics: open a sweep with {OPEN_SWEEP}.open_sweep"
    ]
