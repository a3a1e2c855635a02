"""Named software environments (`cluster.environments`, the axis `environment=NAME`): the cell id,
the refusal of a name the profile does not define, and a real local sweep over virtual
environments this test makes, each cell running in its own and a broken one recorded as failed,
and the same through the tests' real Slurm (tests/helpers/slurm/).
The dry run's launchers on a Slurm profile are golden files (tests/system/test_slurm_executor.py)."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from orchestrator.cli.main import main
from orchestrator.grid.environments import environments_of
from orchestrator.grid.expand import GridError, expand
from orchestrator.grid.profile import ProfileError
from tests.conftest import Venvs
from tests.helpers import TINY, cli, environments, slurm_cli, slurm_runs_by_environment
from tests.helpers.analysis_sweeps import metrics_of, write_cell
from tests.helpers.slurm.cluster import LocalSlurm
from workloads.contract.vocabulary import COMPLETED, FAILED


def test_the_environment_is_part_of_the_cell_id() -> None:
    """Two environments, two cells; a sweep without one keeps the ids it had, and `environment=null`
    is that sweep."""
    defined = environments(a="/opt/a", b="/opt/b")
    swept = expand([*TINY, *defined, "environment=a,b"])
    assert [c.config["environment"] for c in swept.cells] == ["a", "b"]
    assert len({c.cell_id for c in swept.cells}) == 2
    plain, null = expand(TINY).cells, expand([*TINY, *defined, "environment=null"]).cells
    assert [c.cell_id for c in null] == [c.cell_id for c in plain]
    assert not {c.cell_id for c in plain} & {c.cell_id for c in swept.cells}
    assert [row["environment"] for row in swept.rows()] == ["a", "b"]  # the dry run's grid shows it
    assert [c.label for c in swept.cells] == ["gpt/tiny/eager/fp32 in a", "gpt/tiny/eager/fp32 in b"]
    assert plain[0].label == "gpt/tiny/eager/fp32"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["environment=torch299"], "environment=torch299 is not defined (it defines none"),
        (
            [*environments(a="/opt/a"), "environment=a,zz"],
            "environment=zz is not defined (its environments: a;",
        ),
        (["+cluster.environments.a.python=/usr/bin/python3"], "environments.a: unknown key(s) python"),
        (["+cluster.environments.a.env.X=1"], "environments.a says nothing"),
        (["+cluster.environments.a.modules=cuda"], "environments.a.modules must be a list"),
    ],
)
def test_a_bad_environment_is_refused_in_one_line_before_anything_is_written(
    capsys: pytest.CaptureFixture, tmp_path: Path, overrides: list[str], message: str
) -> None:
    sweep = tmp_path / "sweep"
    code = main(["sweep", *TINY, *overrides, f"hydra.sweep.dir={sweep}"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cluster local: ") and message in lines[0], err
    assert not sweep.exists()


def test_an_environment_without_a_name_of_a_file_is_refused() -> None:
    with pytest.raises(ProfileError, match="a name starts with a letter"):
        environments_of({"name": "x", "environments": {"../up": {"venv": "/opt/v"}}})
    with pytest.raises(GridError, match="must be str or null"):  # `environment=2.11` is a float to Hydra
        expand([*TINY, "+cluster.environments.a.venv=/v", "environment=2.11"])


def test_each_cell_runs_in_its_own_environment_and_a_broken_one_is_recorded(
    tmp_path: Path, venvs: Venvs
) -> None:
    """A local sweep over two venvs that share this machine's torch, one whose directory is not
    there and one without torch: each cell records its environment's Python (its sys.prefix), and the
    broken ones are failed attempts that say why."""
    one, two, bare = venvs.one, venvs.two, venvs.bare
    missing = tmp_path / "venv-missing"
    sweep = tmp_path / "sweep"
    result = cli(
        tmp_path,
        "sweep",
        *TINY,
        "backend=eager",
        *environments(one=one, two=two, missing=missing, bare=bare),
        "environment=one,two,missing,bare",
        f"hydra.sweep.dir={sweep}",
        timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # two cells failed
    assert re.search(r"gpt/tiny/eager/fp32 in missing \(\w+\) \.\.\. failed in .*: exit 1: ", result.stdout)
    runs = pd.concat(pd.read_parquet(path) for path in sweep.glob("cells/*/run.parquet"))
    rows = {row.environment: row for row in runs.itertuples()}
    assert sorted(rows) == ["bare", "missing", "one", "two"] and len(runs) == 4
    for name, venv in (("one", one), ("two", two)):
        assert rows[name].status == COMPLETED, rows[name].error
        assert rows[name].python_prefix == str(venv)
        assert rows[name].python_version == platform.python_version()  # the venvs' base is this Python
    assert rows["one"].torch_version == rows["two"].torch_version  # one torch, shared
    assert rows["missing"].status == FAILED
    assert f"{missing}/bin/activate: No such file or directory" in rows["missing"].error
    assert rows["bare"].status == FAILED and "No module named" in rows["bare"].error
    assert (sweep / "environments" / "one.sh").read_text().endswith('exec python "$@"\n')


def test_each_slurm_job_runs_its_cell_in_its_own_environment(
    slurm_cluster: LocalSlurm, tmp_path: Path, venvs: Venvs
) -> None:
    """The same through the tests' real Slurm: the cells of two venvs and of one whose directory is
    not there share one job array; each task runs its cell in its environment, the broken one's
    job fails with the reason recorded."""
    one, two = venvs.one, venvs.two
    missing = tmp_path / "venv-missing"
    args = [
        "sweep",
        "cluster=test_slurm",
        *TINY,
        *environments(one=one, two=two, missing=missing),
        "environment=one,two,missing",
        "hydra.sweep.dir=sw",
    ]
    submitted = slurm_cli(slurm_cluster, tmp_path, *args)
    assert submitted.returncode == 0, submitted.stderr
    assert "3 cell(s) on grete:shared" in submitted.stdout  # one array for all three
    runs = slurm_runs_by_environment(slurm_cluster, tmp_path / "sw")
    for name, venv in (("one", one), ("two", two)):
        assert runs[name].status == COMPLETED, runs[name].error
        assert runs[name].python_prefix == str(venv) and runs[name].slurm_job_id
    assert runs["missing"].status == FAILED
    assert f"{missing}/bin/activate: No such file or directory" in runs["missing"].error


def test_a_compiled_cell_is_compared_with_the_eager_cell_of_its_own_environment(tmp_path: Path) -> None:
    """Two environments, eager and inductor in each, eager twice as fast in the newer one: each
    speedup is over its own environment's eager; a sweep written before the column (no
    `environment` column) analyses as it did."""
    old, new = [20.0, 21.0, 22.0, 20.5], [10.0, 10.5, 11.0, 10.2]
    compiled = [8.0, 8.2, 8.4, 8.1]
    for environment, eager in (("torch211", old), ("torch215", new)):
        write_cell(tmp_path, f"e-{environment}", "eager", step_ms=eager, environment=environment)
        write_cell(tmp_path, f"i-{environment}", "inductor", step_ms=compiled, environment=environment)
    cells = metrics_of(tmp_path)
    for environment, eager in (("torch211", old), ("torch215", new)):
        speedup = cells[f"i-{environment}"]["speedup"]
        assert speedup == pytest.approx(np.median(eager) / np.median(compiled)), environment
    before = tmp_path / "before"
    for cell_id, backend, steps in (("e", "eager", old), ("i", "inductor", compiled)):
        path = write_cell(before, cell_id, backend, step_ms=steps) / "run.parquet"
        pq.write_table(
            pq.read_table(path).drop_columns(["environment", "python_version", "python_prefix"]), path
        )
    assert metrics_of(before)["i"]["speedup"] == pytest.approx(np.median(old) / np.median(compiled))
