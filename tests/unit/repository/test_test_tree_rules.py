"""Rules of the test tree, checked on its source with `ast` (nothing is imported or run).

- Every test module lives in a room: tests/unit/<package>/, tests/system/ or tests/gpu/
  (docs/testing.md says what each holds).
- No module under tests/ imports a test module (`tests/**/test_*.py`): a helper that several
  test modules need lives in the package tests/helpers/, a fixture in tests/conftest.py.
  Importing a test module runs it a second time under another name and ties one module's tests
  to another's internals.
- Fixtures are never imported, by name or with `*`: conftest.py and its plugin
  (tests/helpers/slurm/fixtures.py, through `pytest_plugins`) make them visible to every test module,
  and an imported fixture would be registered again in the importing module.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
#: Where fixtures are defined for the whole suite.
FIXTURE_MODULES = {
    "tests.conftest": TESTS / "conftest.py",
    "tests.helpers.slurm.fixtures": TESTS / "helpers" / "slurm" / "fixtures.py",
}


def python_files() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def suite_test_modules() -> set[str]:
    """The stems of the suite's test modules: `test_status`, ..."""
    return {path.stem for path in python_files() if path.stem.startswith("test_")}


def imports(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import: `import a.b` gives ("a.b", None), `from a import b`
    ("a", "b"); a relative module keeps its leading dots (`from .x import y`: (".x", "y"))."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found += [(node.lineno, module, alias.name) for alias in node.names]
    return found


def imports_of_test_modules(source: str, test_modules: set[str]) -> list[str]:
    """`line N imports X` for each import in `source` of a module named in `test_modules`,
    however it is spelt (`tests.test_x`, `test_x`, `from tests import test_x`, `from .test_x`)."""
    problems = []
    for line, module, name in imports(ast.parse(source)):
        dotted = f"{module}.{name}" if name else module
        parts = [part for part in dotted.split(".") if part]
        hit = next((part for part in parts if part in test_modules), None)
        if hit is not None:
            problems.append(f"line {line} imports the test module {hit} ({dotted})")
    return problems


def fixture_names(path: Path) -> set[str]:
    """Functions of `path` decorated `@pytest.fixture` or `@pytest.fixture(...)`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if ast.unparse(target) in ("pytest.fixture", "fixture"):
                    names.add(node.name)
    return names


def suite_module(module: str) -> str:
    """The dotted name from the checkout's root of a module of tests/, however an import spells
    it: `conftest`, `helpers.slurm.fixtures` (tests/ on sys.path) and `.helpers.slurm.fixtures` (from
    tests/conftest.py) are under `tests.`."""
    module = module.lstrip(".")
    return module if module == "tests" or module.startswith("tests.") else f"tests.{module}"


def fixture_imports(source: str, fixtures: dict[str, set[str]]) -> list[str]:
    """`line N ...` for each star import in `source`, and each import of a fixture by name from
    the module (in `fixtures`: dotted name -> its fixture functions) that defines it."""
    problems = []
    for line, module, name in imports(ast.parse(source)):
        if name == "*":
            problems.append(f"line {line} imports * from {module}")
        elif name is not None and name in fixtures.get(suite_module(module), set()):
            problems.append(f"line {line} imports the fixture {name} from {module}")
    return problems


def problems_in_tree(check: Callable[[str], list[str]]) -> list[str]:
    """What `check` finds in the source of each Python file of tests/, each line naming its file."""
    return [
        f"{path.relative_to(TESTS.parent)}: {problem}"
        for path in python_files()
        for problem in check(path.read_text())
    ]


def test_no_module_imports_a_test_module() -> None:
    test_modules = suite_test_modules()
    problems = problems_in_tree(lambda source: imports_of_test_modules(source, test_modules))
    assert not problems, (
        "a test module is imported; move what it shares to tests/helpers/ "
        "(a fixture: tests/conftest.py):\n" + "\n".join(problems)
    )


def test_fixtures_are_never_imported() -> None:
    fixtures = {module: fixture_names(path) for module, path in FIXTURE_MODULES.items()}
    assert fixtures["tests.helpers.slurm.fixtures"] >= {
        "slurm_clusters",
        "slurm_cluster",
        "slurm_cluster_accounting",
    }
    problems = problems_in_tree(lambda source: fixture_imports(source, fixtures))
    assert not problems, (
        "fixtures come from tests/conftest.py and its plugins by name, "
        "never from an import:\n" + "\n".join(problems)
    )


def test_the_checks_see_every_spelling() -> None:
    """The checks above would pass on a tree they cannot read: each way of breaking the rules is
    found, and what is allowed is not."""
    modules = {"test_status", "test_faults"}
    for source in (
        "from tests.test_status import cli",
        "import tests.test_status",
        "import test_status",
        "from test_status import cli",
        "from tests import test_faults",
        "from . import test_status",
        "from .test_status import cli",
        "import tests.test_status as s",
        "def f():\n    from tests.test_faults import x",
    ):
        assert imports_of_test_modules(source, modules), source
    for source in (
        "from tests.helpers import cli",
        "import pytest",
        "from tests.helpers.slurm.fixtures import SlurmClusters",
        "from torch.testing import assert_close",
        "from tests import helpers",
    ):
        assert imports_of_test_modules(source, modules) == [], source

    fixtures = {"tests.helpers.slurm.fixtures": {"slurm_cluster"}, "tests.conftest": {"tiny_cells"}}
    for source in (
        "from tests.helpers.slurm.fixtures import *",
        "from tests.helpers.slurm.fixtures import slurm_cluster",
        "from tests.helpers.slurm.fixtures import SlurmClusters, slurm_cluster",
        "from conftest import tiny_cells",
        "from .helpers.slurm.fixtures import slurm_cluster",
        "from tests.conftest import *",
    ):
        assert fixture_imports(source, fixtures), source
    assert (
        fixture_imports("from tests.helpers.slurm.fixtures import REQUIRE_ENV, SlurmClusters", fixtures) == []
    )


#: Where test modules live (docs/testing.md, "The rooms of tests/").
ROOMS = {("unit", "analysis"), ("unit", "workloads"), ("unit", "contract"), ("unit", "orchestrator"),
         ("unit", "repository"), ("system",), ("gpu",)}  # fmt: skip


def test_every_test_module_lives_in_a_room() -> None:
    found = [path.relative_to(TESTS) for path in python_files() if path.stem.startswith("test_")]
    assert len(found) > 80  # the search sees the suite
    outside = [str(path) for path in found if path.parent.parts not in ROOMS]
    assert not outside, "test modules outside tests/unit/<package>/, tests/system/, tests/gpu/: " + ", ".join(
        outside
    )
