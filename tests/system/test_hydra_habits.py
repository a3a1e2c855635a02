"""What a Hydra user types works: `-m`, `--cfg job`, `--help` with the config groups, a site's own
profiles in a `--config-dir` outside the repository; Hydra's launcher and sweeper are refused with
one line that says what to use instead."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.grid.expand import expand
from tests.helpers import TINY, cli

#: A site's Slurm profile and a local one, as a user writes them outside the repository.
SITE_SLURM = """\
defaults:
  - /cluster_base@_here_
  - _self_
name: mysite
partitions: {A100: gpu-a100}
gpu_type_by_model: {default: A100}
cpus_per_gpu: 4
time_min: 30
"""
SITE_LOCAL = """\
defaults:
  - /cluster_base@_here_
  - _self_
name: mylaptop
executor: local
partitions: {}
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    directory = tmp_path / "site-profiles"
    (directory / "cluster").mkdir(parents=True)
    (directory / "cluster" / "mysite.yaml").write_text(SITE_SLURM)
    (directory / "cluster" / "mylaptop.yaml").write_text(SITE_LOCAL)
    return directory


def sweep(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["sweep", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_multirun_flag_is_accepted(capsys, no_slurm_here, tmp_path: Path) -> None:
    plain = sweep(capsys, "backend=eager,inductor", "hydra.sweep.dir=a", "--dry-run")
    for flag in ("-m", "--multirun"):
        code, out, err = sweep(capsys, flag, "backend=eager,inductor", "hydra.sweep.dir=a", "--dry-run")
        assert (code, err) == (0, "") and out == plain[1]
    assert "2 cell(s) for" in plain[1]


def test_cfg_job_prints_every_cell_config_and_runs_nothing(capsys, no_slurm_here, tmp_path: Path) -> None:
    args = ["cluster=grete", "backend=eager,inductor", "size=tiny,small", "hydra.sweep.dir=sw"]
    code, out, err = sweep(capsys, *args, "--cfg", "job")
    assert (code, err) == (0, "")
    documents = list(yaml.safe_load_all(out))
    cells = expand(args).cells
    assert documents == [cell.config for cell in cells]  # what each config.yaml would hold, in grid order
    headers = [line for line in out.splitlines() if line.startswith("---")]
    assert (
        headers[1] == f"--- # cell 2/4 {cells[1].cell_id} ({cells[1].label}): {' '.join(cells[1].overrides)}"
    )
    assert not (tmp_path / "sw").exists()  # nothing written, run or submitted

    code, out, err = sweep(capsys, *args, "-c", "job", "--first", "1")
    assert code == 0 and list(yaml.safe_load_all(out)) == [cells[0].config]
    assert err.strip() == "# 1 of 4 cells shown (--first 1); nothing run"

    for other in ("--dry-run", "--smoke", "--wait"):
        code, _, err = sweep(capsys, *args, "--cfg", "job", other)
        assert code == 2 and err.startswith("error: --cfg job prints the cells' configs and runs nothing"), (
            other
        )
    assert sweep(capsys, *args, "--first", "2")[0] == 2  # --first without --cfg job
    code, _, err = sweep(capsys, *args, "--poll", "5")  # --poll without --wait
    assert code == 2 and err.startswith("error: --poll SECONDS goes with --wait")


@pytest.mark.parametrize(
    "override, says",
    [
        (
            "hydra/launcher=submitit_slurm",
            "compilebench launches the cells itself; choose where with cluster=NAME",
        ),
        (
            "hydra.launcher.partition=gpu",
            "compilebench launches the cells itself; choose where with cluster=NAME",
        ),
        ("hydra/sweeper=optuna", "compilebench expands the grid itself"),
    ],
)
def test_hydra_launcher_and_sweeper_are_refused(
    capsys, no_slurm_here, tmp_path: Path, override: str, says: str
) -> None:
    code, out, err = sweep(capsys, "backend=eager,inductor", override, "hydra.sweep.dir=sw")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {override}: {says}")
    assert "(grete, local, test_slurm;" in err  # the clusters there are to choose from
    assert list(tmp_path.iterdir()) == []


def test_help_lists_the_config_groups_of_every_config_dir(site: Path, tmp_path: Path) -> None:
    shown = cli(tmp_path, "sweep", "--help")
    assert shown.returncode == 0, shown.stderr
    listing = shown.stdout[shown.stdout.index("\nconfig groups (") :].strip().splitlines()[1:]
    groups = dict(line.split(None, 1) for line in listing)
    assert groups["cluster"] == "grete, local*, test_slurm"
    assert groups["backend"] == "aot_eager, cudagraphs, eager*, inductor, torchscript"
    assert groups["+experiment"] == "fp8_gemm, quickstart, seminar_cnn, seminar_llm"
    assert {"model", "size", "precision"} <= set(groups)
    assert (
        "--cfg {job}" in shown.stdout and "-m, --multirun" in shown.stdout and "(default: 30" in shown.stdout
    )

    with_site = cli(tmp_path, "sweep", "--config-dir", str(site), "--help")
    assert with_site.returncode == 0, with_site.stderr
    assert "  cluster      grete, local*, mylaptop, mysite, test_slurm\n" in with_site.stdout
    assert str(site) in with_site.stdout


def test_a_site_profile_outside_the_repository(capsys, no_slurm_here, site: Path, tmp_path: Path) -> None:
    """A dry run with the site's Slurm profile, then a tiny local sweep with its local profile."""
    code, out, err = sweep(
        capsys,
        "--config-dir",
        str(site),
        "cluster=mysite",
        "backend=eager,inductor",
        "hydra.sweep.dir=planned",
        "--dry-run",
    )
    assert code == 0, err
    assert "| gpu-a100 " in out and "2 cell(s): 2 in 1 job array(s)" in out
    script = (tmp_path / "planned" / "sbatch" / "dryrun-00.sh").read_text()
    assert "#SBATCH --partition=gpu-a100" in script and "#SBATCH --cpus-per-task=4" in script

    swept = cli(
        tmp_path,
        "sweep",
        "--config-dir",
        str(site),
        "cluster=mylaptop",
        *TINY,
        "backend=eager",
        "hydra.sweep.dir=ran",
    )
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert "(executor local)" in swept.stdout and "1 completed, 0 already completed, 0 failed" in swept.stdout
    (config,) = (tmp_path / "ran" / "cells").glob("*/config.yaml")
    assert yaml.safe_load(config.read_text())["cluster"]["name"] == "mylaptop"

    code, _, err = sweep(capsys, "cluster=mysite", "hydra.sweep.dir=x", "--dry-run")  # without the directory
    assert code == 2 and "Could not find 'cluster/mysite'" in err


def test_unusable_config_dirs_are_refused(capsys, no_slurm_here, site: Path, tmp_path: Path) -> None:
    code, _, err = sweep(capsys, "--config-dir", str(tmp_path / "nope"), "hydra.sweep.dir=x", "--dry-run")
    assert code == 2 and err == f"error: --config-dir {tmp_path / 'nope'}: not a directory\n"
    (site / "cluster" / "grete.yaml").write_text(textwrap.dedent(SITE_SLURM).replace("mysite", "grete"))
    code, _, err = sweep(capsys, "--config-dir", str(site), "cluster=grete", "hydra.sweep.dir=x", "--dry-run")
    assert code == 2 and err.startswith(
        f"error: --config-dir {site}: cluster/grete.yaml has the name of a shipped"
    )
    assert not (tmp_path / "x").exists()
