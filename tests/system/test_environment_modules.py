"""The environment-modules kind of a named environment (`cluster.environments.NAME.modules`), run for
real: Environment Modules (Debian's `environment-modules`), a Tcl modulefile this test writes that
puts a venv's Python first on PATH, and cells whose process inherits no `module` function (as one
started by no login shell), so that the launcher sources the modules' bash init itself. Locally and
through the tests' real Slurm (tests/helpers/slurm/). Skips without Environment Modules, unless
COMPILEBENCH_REQUIRE_MODULES is set (.ci/run sets it; tests/run.sh installs them as root)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.grid.environments import MODULES_HOME
from tests.helpers import BASH, TINY, cli, environments, make_venv, slurm_cli, slurm_runs_by_environment
from tests.helpers.slurm.cluster import LocalSlurm
from workloads.contract.vocabulary import COMPLETED, FAILED

REQUIRE_ENV = "COMPILEBENCH_REQUIRE_MODULES"
#: The module this test writes, and one that no MODULEPATH has.
MODULE, UNKNOWN = "torchmod/2.0", "nosuchtorch/1.0"


@pytest.fixture
def module_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A venv sharing this machine's torch, reachable only through MODULE: a modulefile in a
    directory on MODULEPATH prepends its bin to PATH. No `module` function is inherited."""
    init = Path(os.environ.get("MODULESHOME") or MODULES_HOME, "init", "bash")
    if not init.is_file():
        message = (
            f"no Environment Modules here (no {init}; Debian: apt-get install environment-modules, "
            "which tests/run.sh does as root)"
        )
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    for key in [key for key in os.environ if key.startswith("BASH_FUNC_")]:  # `module`, `ml`, ...
        monkeypatch.delenv(key)
    venv = make_venv(tmp_path / "venv-module")
    modulefile = tmp_path / "modulefiles" / MODULE
    modulefile.parent.mkdir(parents=True)
    modulefile.write_text(f"#%Module1.0\nprepend-path PATH {venv}/bin\n")
    monkeypatch.setenv("MODULEPATH", str(tmp_path / "modulefiles"))
    return venv


def modules_environments(**modules: str) -> list[str]:
    """Overrides defining one environment per module, named as the keyword."""
    return [f"+cluster.environments.{name}.modules=[{module}]" for name, module in modules.items()]


def test_a_cell_runs_in_its_modules_python_and_an_unknown_module_is_recorded(
    tmp_path: Path, module_venv: Path
) -> None:
    """A local sweep over a venv environment, a modules one and one naming a module that is not
    there: the first two cells each ran in their own Python (sys.prefix), the third is a failed
    attempt whose error names the module; without the modules' init the launcher says so."""
    plain = make_venv(tmp_path / "venv-plain")
    sweep = tmp_path / "sweep"
    result = cli(
        tmp_path,
        "sweep",
        *TINY,
        "backend=eager",
        *environments(plain=plain),
        *modules_environments(mod=MODULE, unknown=UNKNOWN),
        "environment=plain,mod,unknown",
        f"hydra.sweep.dir={sweep}",
        timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # one cell failed
    assert re.search(r"gpt/tiny/eager/fp32 in unknown \(\w+\) \.\.\. failed in .*: exit 1: ", result.stdout)
    runs = pd.concat(pd.read_parquet(path) for path in sweep.glob("cells/*/run.parquet"))
    rows = {row.environment: row for row in runs.itertuples()}
    assert sorted(rows) == ["mod", "plain", "unknown"] and len(runs) == 3
    for name, venv in (("plain", plain), ("mod", module_venv)):
        assert rows[name].status == COMPLETED, rows[name].error
        assert rows[name].python_prefix == str(venv)
    assert rows["unknown"].status == FAILED
    assert f"Unable to locate a modulefile for '{UNKNOWN}'" in rows["unknown"].error
    nowhere = tmp_path / "no-modules"  # a MODULESHOME without an init: one line, the Python not run
    launcher = sweep / "environments" / "mod.sh"
    ended = subprocess.run(
        [BASH, str(launcher), "-c", "print('ran')"],
        env={**os.environ, "MODULESHOME": str(nowhere)},
        capture_output=True,
        text=True,
    )
    assert (ended.returncode, ended.stdout) == (1, ""), ended.stderr
    assert ended.stderr.splitlines()[-1] == f"module: not defined, nor {nowhere}/init/bash"


def test_each_slurm_job_loads_its_cells_modules(
    slurm_cluster: LocalSlurm, tmp_path: Path, module_venv: Path
) -> None:
    """The same through the tests' real Slurm: a modules cell and an unknown module's cell share
    one job array; the task runs the first in its module's Python, the second's job fails with the
    module named."""
    args = [
        "sweep",
        "cluster=test_slurm",
        *TINY,
        *modules_environments(mod=MODULE, unknown=UNKNOWN),
        "environment=mod,unknown",
        "hydra.sweep.dir=sw",
    ]
    submitted = slurm_cli(slurm_cluster, tmp_path, *args)
    assert submitted.returncode == 0, submitted.stderr
    assert "2 cell(s) on grete:shared" in submitted.stdout  # one array for both
    runs = slurm_runs_by_environment(slurm_cluster, tmp_path / "sw")
    assert runs["mod"].status == COMPLETED, runs["mod"].error
    assert runs["mod"].python_prefix == str(module_venv) and runs["mod"].slurm_job_id
    assert runs["unknown"].status == FAILED
    assert f"Unable to locate a modulefile for '{UNKNOWN}'" in runs["unknown"].error
