"""Size and shape of the code at a commit: lines per package, the largest module, the widest fan-out
(project modules one module imports) and the docstring+comment lines per code line.

    python tests/benchmarks/code_metrics.py [COMMIT ...]    # default: the working tree

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


if __name__ == "__main__":
    for commit in sys.argv[1:] or [None]:
        print(report(commit))
