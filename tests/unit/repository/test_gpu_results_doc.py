"""docs/gpu-results.md's derived blocks equal what the committed result packs give at HEAD
(examples/benchmarks/gpu_results_doc.py, on the CPU), and the check catches a block that drifted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "examples" / "benchmarks" / "gpu_results_doc.py"
DOC = REPO_ROOT / "docs" / "gpu-results.md"
#: The first provenance block: the cheapest to derive (run rows only, no analysis).
BLOCK = re.compile(r"<!-- derived: provenance .+? -->\n.*?<!-- /derived -->\n", re.DOTALL)


def gpu_results_doc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO_ROOT)


def test_the_committed_doc_is_what_its_packs_give() -> None:
    result = gpu_results_doc()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_derived_block_that_drifted_fails_the_check_and_write_restores_it(tmp_path: Path) -> None:
    committed = BLOCK.search(DOC.read_text()).group(0)
    marker, _, _ = committed.partition("\n")
    doc = tmp_path / "doc.md"
    doc.write_text(f"# prose\n\n{marker}\n| stale |\n<!-- /derived -->\n\nmore prose\n")
    drifted = gpu_results_doc("--doc", str(doc))
    assert drifted.returncode == 1
    assert "-| stale |" in drifted.stdout
    assert drifted.stdout.splitlines()[-1].endswith(
        "run python examples/benchmarks/gpu_results_doc.py --write"
    )
    assert gpu_results_doc("--doc", str(doc), "--write").returncode == 0
    assert doc.read_text() == f"# prose\n\n{committed}\nmore prose\n"
    assert gpu_results_doc("--doc", str(doc)).returncode == 0


def test_a_block_naming_a_missing_pack_fails_in_one_line(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- derived: provenance no_such_pack/sweep.tar.gz -->\n<!-- /derived -->\n")
    result = gpu_results_doc("--doc", str(doc))
    assert result.returncode != 0
    assert result.stderr.strip() == "gpu_results_doc: no pack docs/results/no_such_pack/sweep.tar.gz"
