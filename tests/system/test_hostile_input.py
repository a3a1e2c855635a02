"""Hostile and mistaken input: one clear error line, a non-zero exit, nothing written, nothing submitted.

Each case runs the real command line (its `main`, or a fresh process). Without Slurm the cases use the Grete
profile (`cluster=grete`); on the tests' real local Slurm they use `cluster=test_slurm` and the
queue must stay empty. Shell metacharacters in values must never reach a shell: a marker file
that a `touch` in such a value would create must never appear.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from tests.helpers import cli, jobs_from
from tests.helpers.slurm.cluster import LocalSlurm

MARKER = "PWNED"


def hostile_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (overrides, what the one error line must say)."""
    touch = f"touch {tmp / MARKER}"
    return {
        "unknown group value": (["model=nope"], "Could not find 'model/nope'"),
        "malformed override": (["size=small,"], "cannot parse override"),
        "unknown key": (["stepz=3"], "Could not override 'stepz'"),
        "zero steps": (["steps=0"], "steps must be positive"),
        "negative steps": (["steps=-5"], "steps must be positive"),
        "zero batch": (["batch_size=0"], "batch_size must be positive"),
        "negative batch": (["batch_size=-8"], "batch_size must be positive"),
        "wrong type": (["seed=abc"], "seed must be int"),
        "a bool for an int": (["steps=true"], "config key steps must be int, got True"),
        "an int for a bool": (["backend.fullgraph=1"], "config key backend.fullgraph must be bool, got 1"),
        "missing data path": (
            ["data.source=text", f"data.path={tmp / 'no_such_file.txt'}"],
            "does not exist",
        ),
        "a directory as a text file": (["data.source=text", f"data.path={tmp}"], "needs a file as data.path"),
        "a GPT arch that names no GPT": (
            ["model.arch=gpt2-medium"],
            "model.arch=gpt-<layers>x<heads>x<width>",
        ),
        "a GPT width its heads do not divide": (
            ["model.arch=gpt-2x3x64"],
            "a positive multiple of the heads",
        ),
        "negative data workers": (["data.workers=-2"], "data.workers must be >= 0"),
        "model name with a shell command": ([f"model.name='x; {touch}'"], "unknown model 'x; touch"),
        "backend name with a shell command": ([f"backend.name='$({touch})'"], "unknown backend '$(touch"),
        "size with a shell command": ([f"size='`{touch}`'"], "Could not find 'size/`touch"),
    }


CLUSTER_CASES = {
    "partition not in the profile": (["cluster.partition=nope"], "unknown partition 'nope'"),
    "GPU type not in the profile": (["cluster.gpu_type=V100"], "unknown GPU type 'V100'"),
}


def assert_refused(result: subprocess.CompletedProcess, message: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0], lines[0]


@pytest.mark.parametrize("case", [*hostile_cases(Path("/x")), *CLUSTER_CASES])
def test_refused_before_anything_is_written(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process (the command line's own `main`), in both modes; the real queue is below."""
    overrides, message = {**hostile_cases(tmp_path), **CLUSTER_CASES}[case]
    monkeypatch.chdir(tmp_path)
    for mode in ([], ["--dry-run"]):
        code = main(["sweep", "cluster=grete", *overrides, "hydra.sweep.dir=sw", *mode])
        captured = capsys.readouterr()
        assert_refused(subprocess.CompletedProcess([], code, captured.out, captured.err), message)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no sweep directory, no marker


def test_a_directory_that_is_not_a_sweep_is_not_written_into(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    result = cli(tmp_path, "sweep", f"hydra.sweep.dir={home}")
    assert_refused(result, "is not a compilebench sweep directory (it holds thesis.tex)")
    assert_refused(cli(tmp_path, "status", str(home)), "not a sweep directory")
    analyzed = cli(tmp_path, "analyze", str(home))  # 1: a directory without cells, no report
    assert analyzed.returncode == 1 and len(analyzed.stderr.strip().splitlines()) == 1, analyzed.stderr
    assert sorted(p.name for p in home.iterdir()) == ["thesis.tex"]


def test_nothing_reaches_the_real_queue(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    cases = {**hostile_cases(tmp_path), **CLUSTER_CASES}
    for name in (
        "unknown group value",
        "zero steps",
        "model name with a shell command",
        "partition not in the profile",
        "GPU type not in the profile",
    ):
        overrides, message = cases[name]
        result = cli(
            tmp_path, "sweep", "cluster=test_slurm", *overrides, "hydra.sweep.dir=sw", env=slurm_cluster.env()
        )
        assert_refused(result, message)
    assert jobs_from(slurm_cluster, tmp_path) == set()  # nothing submitted from this test's directory
    assert not (tmp_path / "sw").exists() and not (tmp_path / MARKER).exists()
