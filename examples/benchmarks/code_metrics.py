"""Size and shape of the code at a commit: lines per package, the largest module, the widest fan-out
(project modules one module imports) and the docstring+comment lines per code line; with --rooms, a
Markdown table of each package's rooms per commit (folders, the most modules in one folder, modules
over 350 lines, import arrows between its modules, and the executors' imports of `analysis`).

    python examples/benchmarks/code_metrics.py [COMMIT ...]            # default: the working tree
    python examples/benchmarks/code_metrics.py --rooms BEFORE AFTER    # the table of docs/architecture.md

A commit is read with `git show`, nothing is checked out. Lines are physical lines; "code" lines are
those that are neither blank, nor comment, nor docstring.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

PACKAGES = ("orchestrator", "analysis", "workloads")
REPO = Path(__file__).resolve().parents[2]


def sources(commit: str | None) -> dict[str, str]:
    """module path -> its text, for every .py file of the packages."""
    if commit is None:
        return {
            str(p.relative_to(REPO)): p.read_text() for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")
        }
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit, *PACKAGES], cwd=REPO, capture_output=True, text=True
    )
    paths = [p for p in listed.stdout.split() if p.endswith(".py")]
    return {
        p: subprocess.run(["git", "show", f"{commit}:{p}"], cwd=REPO, capture_output=True, text=True).stdout
        for p in paths
    }


def line_kinds(text: str) -> tuple[int, int]:
    """(code lines, docstring + comment lines) of one module."""
    prose: set[int] = set()
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                prose.update(range(value.lineno, value.end_lineno + 1))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            prose.add(token.start[0])
    lines = text.splitlines()
    blank = {i for i, line in enumerate(lines, 1) if not line.strip()}
    code = sum(1 for i in range(1, len(lines) + 1) if i not in prose and i not in blank)
    return code, len(prose - blank)


def fan_out(text: str) -> int:
    """How many project modules `path` imports (anywhere in it)."""
    imported = set()
    for node in ast.walk(ast.parse(text)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module
            else []
        )
        imported.update(n for n in names if n.split(".")[0] in PACKAGES)
    return len(imported)


def report(commit: str | None) -> str:
    files = sources(commit)
    lines = {p: len(t.splitlines()) for p, t in files.items()}
    per_package = {pkg: sum(n for p, n in lines.items() if p.startswith(pkg + "/")) for pkg in PACKAGES}
    largest = max(lines, key=lines.__getitem__)
    fans = {p: fan_out(t) for p, t in files.items()}
    widest = max(fans, key=fans.__getitem__)
    code, prose = map(sum, zip(*(line_kinds(t) for t in files.values())))
    over = sum(len(line) > 110 for t in files.values() for line in t.splitlines())
    return (
        f"{commit or 'working tree'}: {len(files)} modules; lines "
        + ", ".join(f"{k} {v}" for k, v in per_package.items())
        + f"; largest {largest} ({lines[largest]}); widest fan-out {widest} ({fans[widest]} project modules);"
        f" docstring+comment lines per code line {prose / code:.2f}; lines over 110 chars {over}"
    )


def module_name(path: str) -> str:
    """`analysis/cells/metrics.py` -> `analysis.cells.metrics` (a package by its __init__)."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(text: str, known: set[str]) -> set[str]:
    """The project modules of `known` that a module imports (the longest known prefix of each name)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            hit = next(
                (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in known), None
            )
            if hit:
                found.add(hit)
    return found


def rooms(commit: str | None) -> dict[str, dict[str, int]]:
    """Per package: modules, folders, the most modules in one folder, modules over 350 lines and the
    import arrows between its own modules; for orchestrator also its executors' imports of analysis
    (the modules that run or submit cells: today's orchestrator/executors/, before it the flat
    executor, local, slurm* and packed-task modules)."""
    files = sources(commit)
    known = {module_name(p) for p in files}
    graph = {module_name(p): imports_of(t, known) - {module_name(p)} for p, t in files.items()}
    executor_stems = ("executor", "executors", "local", "slurm", "slurm_plan", "slurm_submit", "slurm_job")
    executors = {
        m
        for m in graph
        if m.startswith("orchestrator.executors") or m.split(".")[-1] in executor_stems + ("packed_task",)
    }
    table: dict[str, dict[str, int]] = {}
    for pkg in PACKAGES:
        paths = [p for p in files if p.startswith(pkg + "/") and not p.endswith("__init__.py")]
        folders: dict[str, int] = {}
        for p in paths:
            folders[p.rsplit("/", 1)[0]] = folders.get(p.rsplit("/", 1)[0], 0) + 1
        mods = {module_name(p) for p in files if p.startswith(pkg + "/")}
        table[pkg] = {
            "modules": len(paths),
            "folders": len(folders),
            "most modules in one folder": max(folders.values()),
            "modules over 350 lines": sum(len(files[p].splitlines()) > 350 for p in paths),
            "import arrows between its modules": sum(len(graph[m] & mods) for m in mods),
        }
    table["orchestrator"]["executor modules importing analysis"] = sum(
        any(t.startswith("analysis") for t in graph[m]) for m in executors
    )
    return table


def rooms_markdown(commits: list[str | None]) -> str:
    """The rooms of each commit side by side, one row per package and measure."""
    found = [rooms(c) for c in commits]
    head = "| | " + " | ".join(c or "working tree" for c in commits) + " |"
    lines = [head, "|---" * (len(commits) + 1) + "|"]
    for pkg in PACKAGES:
        for key in found[-1][pkg]:
            lines.append(f"| {pkg}: {key} | " + " | ".join(str(f[pkg].get(key, "")) for f in found) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--rooms"]:
        print(rooms_markdown(args[1:] or [None]))
    else:
        for commit in args or [None]:
            print(report(commit))
