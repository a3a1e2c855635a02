"""`pip install .` works anywhere: the wheel carries the configs and sbatch templates as package
data, and the `compilebench` it installs into a fresh virtual environment plans a Slurm sweep and
runs a tiny local one from another directory, without the checkout on its path.

Offline: the wheel is built without build isolation from a copy of the checkout (so the checkout
gets no build/ or egg-info), and the new venv sees the packages of the environment that runs the
tests (torch, Hydra, setuptools, ...) through a .pth file naming its site-packages; only
compilebench itself comes from the wheel. (`--system-site-packages` would name the *base*
interpreter's, which inside a venv, where most users run the tests, has none of them.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO_ROOT, TINY, path_without_slurm

#: The code packages of the checkout (every module must be in the wheel).
PACKAGES = ("orchestrator", "workloads", "analysis")
#: What is not part of a build of the checkout.
NOT_BUILT = shutil.ignore_patterns(
    ".git",
    "tests",
    "docs",
    "examples",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    "sweeps",
    ".pytest_cache",
    ".venv",
    ".carry",
    "multirun",
    "outputs",
)


def run(
    *command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def project_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert match, "no version in pyproject.toml"
    return match.group(1)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout, to build from."""
    copy = tmp_path_factory.mktemp("source") / "compilebench"
    shutil.copytree(REPO_ROOT, copy, ignore=NOT_BUILT)
    return copy


@pytest.fixture(scope="module")
def wheel(source: Path) -> Path:
    dist = source.parent / "dist"
    built = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        dist,
        source,
        cwd=source.parent,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = dist.glob("compilebench-*.whl")
    return path


def fresh_venv(root: Path, *install: str | Path) -> Path:
    """A virtual environment in `root` that sees this environment's packages, with `pip install
    --no-deps --no-index INSTALL...` done by this interpreter's pip (and build backend: the venv's
    own bundled setuptools may be too old for pyproject.toml); returns its bin/ directory.

    The .pth file adds this environment's site-packages after the venv's own, without running
    their .pth files: an editable install of the checkout stays invisible there."""
    made = run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root.parent)
    assert made.returncode == 0, made.stderr
    (site,) = (root / "lib").glob("python3*/site-packages")
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (site / "compilebench-tests-environment.pth").write_text("\n".join(ours) + "\n")
    installed = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        root / "bin" / "python",
        "install",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        *install,
        cwd=root,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return root / "bin"


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed."""
    return fresh_venv(tmp_path_factory.mktemp("venv"), "--force-reinstall", wheel)


def elsewhere_env() -> dict[str, str]:
    """This environment without PYTHONPATH (the checkout must not be found) and without Slurm's
    commands (the dry run plans from the profile alone, as on a laptop)."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PATH": path_without_slurm()}


def test_the_wheel_holds_every_module_config_and_template(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {
        p.relative_to(REPO_ROOT).as_posix()
        for package in PACKAGES
        for p in (REPO_ROOT / package).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules - names == set()
    configs = {
        f"orchestrator/{p.relative_to(REPO_ROOT).as_posix()}" for p in (REPO_ROOT / "conf").rglob("*.yaml")
    }
    templates = {
        f"orchestrator/sbatch_templates/{p.name}" for p in (REPO_ROOT / "sbatch_templates").iterdir()
    }
    assert configs - names == set() and templates - names == set()
    assert {"analysis/reference/seminar_2024.csv"} <= names
    # Nothing at the top of site-packages besides the three packages and the metadata.
    assert {name.split("/")[0] for name in names} == {
        *PACKAGES,
        f"compilebench-{project_version()}.dist-info",
    }


def test_installed_compilebench_runs_from_another_directory(venv: Path, tmp_path: Path) -> None:
    env = elsewhere_env()
    where = run(
        venv / "python",
        "-c",
        "import orchestrator, workloads.run, analysis; "
        "print(orchestrator.__file__, workloads.run.__file__, analysis.__file__)",
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    site = venv.parent / "lib"
    assert all(Path(path).is_relative_to(site) for path in where.stdout.split()), where.stdout

    version = run(venv / "compilebench", "--version", cwd=tmp_path, env=env)
    assert (version.returncode, version.stdout.strip()) == (0, f"compilebench {project_version()}")

    planned = run(
        venv / "compilebench",
        "sweep",
        "cluster=grete",
        "model=gpt",
        "backend=eager,inductor",
        "hydra.sweep.dir=planned",
        "--dry-run",
        cwd=tmp_path,
        env=env,
    )
    assert planned.returncode == 0, planned.stderr
    assert "2 cell(s): 2 in 1 job array(s)" in planned.stdout
    script = (tmp_path / "planned" / "sbatch" / "dryrun-00.sh").read_text()
    assert (
        "#SBATCH --partition=grete:shared" in script and "#SBATCH --job-name=compilebench-planned" in script
    )

    swept = run(
        venv / "compilebench", "sweep", *TINY, "backend=eager", "hydra.sweep.dir=local", cwd=tmp_path, env=env
    )
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert "1 completed, 0 already completed, 0 failed" in swept.stdout
    (config,) = (tmp_path / "local" / "cells").glob("*/config.yaml")
    assert yaml.safe_load(config.read_text())["cluster"]["name"] == "local"


def test_an_editable_install_uses_the_checkouts_configs(source: Path, tmp_path: Path) -> None:
    """README's `pip install -e .`: the code and conf/ stay where the checkout has them."""
    bin_dir = fresh_venv(tmp_path / "venv", "-e", source)
    env = elsewhere_env()
    where = run(
        bin_dir / "python",
        "-c",
        "from orchestrator.grid import package_data as p; print(p.__file__, p.CONF_DIR, p.TEMPLATES_DIR)",
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [
        str(source / "orchestrator" / "grid" / "package_data.py"),
        str(source / "conf"),
        str(source / "sbatch_templates"),
    ]
    planned = run(
        bin_dir / "compilebench",
        "sweep",
        "cluster=grete",
        "hydra.sweep.dir=planned",
        "--dry-run",
        cwd=tmp_path,
        env=env,
    )
    assert planned.returncode == 0 and (tmp_path / "planned" / "sbatch" / "dryrun-00.sh").is_file(), (
        planned.stderr
    )
