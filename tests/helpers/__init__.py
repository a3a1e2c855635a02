"""Helpers shared by the test modules: the orchestrator's command line in a fresh process, its
status table, waiting on a condition with a deadline, the local Slurm's queue.

No fixtures here: those shared by several modules are in tests/conftest.py, the local Slurm's
in the plugin tests/helpers/slurm/fixtures.py (conftest.py loads it). A test module imports from here,
from tests/helpers/analysis_sweeps.py and from tests/helpers/slurm/, never from another test module
(tests/unit/repository/test_test_tree_rules.py checks that).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd
import pytest

from workloads.cell.config import MeasureConfig
from workloads.cell.stop_rule import median_interval_ranks
from workloads.local import turns

if TYPE_CHECKING:
    from tests.helpers.slurm.cluster import LocalSlurm

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"

#: Overrides of a tiny CPU cell for the orchestrator's command line (the test cluster's GPUs are
#: placeholders: gres without devices). A paired cell measures its fewest pairs of one-step blocks:
#: 12 measured steps instead of the default blocks' 60, which halved a cell's CPU time (27 -> 13.5 s
#: of user time for gpt tiny aot_eager on the loaded 2-core machine).
TINY = [
    "model=gpt",
    "size=tiny",
    "precision=fp32",
    "device=cpu",
    "steps=2",
    "warmup_steps=1",
    "measure.min_seconds=0",
    "measure.block_steps=1",
    "measure.block_seconds=0",
]


def gemm_config(device: str = "cpu", **values: Any) -> dict[str, Any]:
    """A GEMM cell (model=gemm, tiny: 64 x 64 x 64, bf16) measured for exactly its `steps` steps."""
    return {
        "model": {"name": "gemm"},
        "size": "tiny",
        "precision": {"name": "bf16"},
        "device": device,
        "steps": 5,
        "warmup_steps": 2,
        "measure": {"min_seconds": 0.0},
        **values,
    }


def with_instruments(
    monkeypatch: pytest.MonkeyPatch, wrap: Callable[[Any], Any], kind: str = "training"
) -> None:
    """For this test, `kind`'s row of the kinds table (workloads/kinds.py) with its instruments passed
    through `wrap` (an `Instruments` in, one out: observers added around the real ones)."""
    import dataclasses

    from workloads import kinds

    def wrapped(row: Any) -> Any:
        return dataclasses.replace(row, instruments=lambda cell: wrap(row.instruments(cell)))

    rows = tuple(wrapped(row) if row.name == kind else row for row in kinds.KINDS)
    monkeypatch.setattr(kinds, "KINDS", rows)


#: What a cell's log says once its warm-up and first measured step are done (workloads/train_cell.py):
#: the cell is training, past start-up and compilation.
MEASURING = ": measuring (the "
#: `sweep --wait` as the tests run it: a look at the queue every second (the default, 30 s, spares
#: a shared scheduler; the tests' own Slurm answers at once).
WAIT = ("--wait", "--poll", "1")
#: How long a few tiny cells may take through the local Slurm. Generous: another test session may
#: keep both cores busy; inductor compiles C++ on the CPU.
SLURM_JOB_TIMEOUT_S = 400


def require_refused_allocations() -> None:
    """For a test of an allocation far beyond any node that the allocator refuses at once: skip it
    where Linux's overcommit mode 1 grants any allocation (the OOM killer would answer instead,
    after the process filled this machine's memory), fail it there under COMPILEBENCH_REQUIRE_SLURM
    (CI), where no fault of the table may go untested."""
    from tests.helpers.slurm.fixtures import REQUIRE_ENV, slurm_required

    path = Path("/proc/sys/vm/overcommit_memory")
    if path.exists() and path.read_text().strip() == "1":
        reason = "vm.overcommit_memory=1: a huge allocation would be granted, not refused"
        if slurm_required():
            pytest.fail(f"{reason}, and {REQUIRE_ENV} is set", pytrace=False)
        pytest.skip(reason)


def path_without_slurm() -> str:
    """PATH without the directories that hold Slurm's commands: a machine without Slurm (a laptop)."""
    return os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep) if not (Path(d) / "sinfo").exists()
    )


def wait_until(
    probe: Callable[[], T],
    timeout: float,
    describe: Callable[[T], str],
    *,
    done: Callable[[T], bool] = bool,
    interval: float = 0.5,
) -> T:
    """Call `probe` every `interval` seconds until `done` holds for what it returned, and return
    that; fail the test with `describe(last value)` when `timeout` seconds have passed."""
    end = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > end:
            pytest.fail(f"after {timeout:g} s: {describe(value)}")
        time.sleep(interval)


# --- the orchestrator's command line -------------------------------------------------------


#: The command line as a fresh process runs it (the console script `compilebench`).
CLI = (sys.executable, "-m", "orchestrator.cli.main")


def cli_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, PYTHONPATH at the checkout, `env` on top."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}


def as_foreground_job() -> None:
    """`preexec_fn`: SIGINT at its default, as an interactive shell gives its foreground job (so
    Python turns it into KeyboardInterrupt). A test run started in the background by a
    non-interactive shell, as a CI job may be, inherits SIGINT *ignored*, and Python keeps an
    ignored SIGINT ignored: the Ctrl-C a test sends would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_popen(cwd: Path, *args: str, env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """Start the command line with ARGS in `cwd`; `popen` goes to subprocess.Popen."""
    return subprocess.Popen([*CLI, *args], cwd=cwd, env=cli_env(env), **popen)


def cli(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """The command line with ARGS in `cwd`, run to its end; stdout and stderr captured as text."""
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=timeout
    )


def slurm_cli(
    cluster: LocalSlurm, cwd: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The real command line in a fresh process, talking to the test cluster."""
    return cli(cwd, *args, env={**cluster.env(), **(env or {})})


def table(stdout: str) -> dict[str, dict[str, str]]:
    """The table `status` (and `sweep --wait`) prints, as {cell_id: {column: value}}."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {row["cell_id"]: row for row in rows}


def manifest_jobs(sweep: Path) -> dict[str, str]:
    """{cell_id: job_id} of the sweep's manifest, in its order."""
    manifest = pd.read_parquet(sweep / "manifest.parquet")
    return dict(zip(manifest["cell_id"], manifest["job_id"]))


def attempts(sweep: Path) -> dict[str, list[str]]:
    """cell_id -> the statuses of its attempts, in order."""
    found = {}
    for path in sweep.glob("cells/*/run.parquet"):
        runs = pd.read_parquet(path).sort_values("attempt")
        found[path.parent.name] = list(runs["status"])
    return found


def wait_measuring(sweep: Path, cell_ids: list[str], timeout: float = 300) -> None:
    """Until each cell's process says in its log that it measures (warm-up and a measured step done)."""

    def log(cell: str) -> str:
        path = sweep / "cells" / cell / "logs" / "stdout.log"
        return path.read_text() if path.exists() else ""

    wait_until(
        lambda: [cell for cell in cell_ids if MEASURING not in log(cell)],
        timeout,
        lambda left: f"cells {left} not measuring",
        done=lambda left: not left,
        interval=0.2,
    )


# --- the local Slurm ---------------------------------------------------------------------------


def queue(cluster: LocalSlurm) -> set[str]:
    """The ids of the cluster's queued and running jobs (array tasks one by one)."""
    return set(cluster.run("squeue", "-h", "-r", "-o", "%i").stdout.split())


def job_states_from(cluster: LocalSlurm, workdir: Path) -> dict[str, str]:
    """{job id: Slurm state} of the queued and running jobs (array tasks one by one) submitted
    from `workdir` (squeue's WorkDir: the command line's directory, a test's tmp_path): the jobs
    that one test could have created, whatever other tests left in the session's shared queue."""
    lines = cluster.run("squeue", "-h", "-r", "-o", "%i|%T|%Z").stdout.splitlines()
    rows = (line.split("|", 2) for line in lines)
    return {job: state for job, state, where in rows if Path(where) == Path(workdir)}


def jobs_from(cluster: LocalSlurm, workdir: Path) -> set[str]:
    """The ids of `job_states_from`."""
    return set(job_states_from(cluster, workdir))


def wait_until_done(
    cluster: LocalSlurm, job_ids: set[str], cell_dirs: list[Path], timeout: float = SLURM_JOB_TIMEOUT_S
) -> None:
    """Poll the queue until none of the jobs is left, then every cell must have a result."""
    wait_until(
        lambda: job_ids & queue(cluster),
        timeout,
        lambda left: f"jobs {sorted(left)} still queued\n{cluster.logs()}",
        done=lambda left: not left,
        interval=1,
    )
    missing = [d.name for d in cell_dirs if not (d / "run.parquet").exists()]
    assert not missing, f"no run.parquet in {missing}: " + "".join(
        p.read_text() for d in cell_dirs for p in d.glob("logs/slurm-*.err") if p.exists()
    )


def slurm_runs_by_environment(cluster: LocalSlurm, sweep: Path) -> dict[str, pd.Series]:
    """Once the jobs of every cell in the sweep's manifest are done: each cell's last run row, keyed by
    its environment (a sweep over `environment=`, one cell per environment)."""
    manifest = pd.read_parquet(sweep / "manifest.parquet")
    cell_dirs = [sweep / "cells" / cell_id for cell_id in manifest["cell_id"]]
    wait_until_done(cluster, set(manifest["job_id"]), cell_dirs)
    return {run.environment: run for run in (pd.read_parquet(d / "run.parquet").iloc[-1] for d in cell_dirs)}


def reference_stop_reason(
    seconds: Sequence[float], fewest: int, m: MeasureConfig, values: Sequence[float] | None = None
) -> str | None:
    """docs/measurement.md's stop rule written from scratch, every time summed and sorted anew: after
    these measured steps' (or pairs') seconds, with the median's interval over `values` (default: the
    seconds themselves; a paired cell's pair ratios), why measuring stops, or None to go on."""
    n = len(seconds)
    if n < fewest:
        return None
    elapsed, before = math.fsum(seconds), math.fsum(seconds[:-1])
    precise = True
    if m.rel_ci is not None:
        s, ranks = sorted(seconds if values is None else values), median_interval_ranks(n)
        half_width = (s[ranks[1] - 1] - s[ranks[0] - 1]) / 2 if ranks is not None else math.inf
        precise = half_width <= m.rel_ci * statistics.median(s)
    if elapsed >= m.min_seconds and precise:
        if n == fewest:
            return "steps"
        return "rel_ci" if m.rel_ci is not None and before >= m.min_seconds else "min_seconds"
    if m.max_steps is not None and n >= m.max_steps:
        return "max_steps"
    if m.max_seconds is not None and elapsed >= m.max_seconds:
        return "max_seconds"
    return None


#: A process started ahead by the local executor, its turn given at once: `take_turn`, then how many
#: compile workers it has and the CPU seconds they used (their import of torch, before any compile).
TAKE_TURN = """
import json, os, sys
from workloads.cell.config_io import cell_config_from_dict
from workloads.instruments.compile_workers import compile_workers_cpu_s
from workloads.run import take_turn
take_turn(cell_config_from_dict(json.loads(sys.argv[1])))
workers = compile_workers_cpu_s(os.getpid())
print(len(workers), sum(workers))
"""


def take_turn_ahead(config: dict, turns_dir: Path) -> tuple[int, float]:
    """`take_turn` of a process started ahead whose turn has come; its compile workers, their CPU s."""
    (turns_dir / turns.TURN_FILE).write_text("0")
    (turns_dir / f"{turns.IMPORTING_PREFIX}0").write_text("")
    env = {**os.environ, turns.DIR_ENV: str(turns_dir), turns.INDEX_ENV: "0", "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run(
        [sys.executable, "-c", TAKE_TURN, json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert not (turns_dir / f"{turns.IMPORTING_PREFIX}0").exists()  # done importing
    workers, cpu_s = done.stdout.split()
    return int(workers), float(cpu_s)


def make_venv(path: Path, share_torch: bool = True) -> Path:
    """`python -m venv --system-site-packages PATH`; where this Python is itself a venv (its torch
    is not the system's), a .pth file adds this Python's site-packages, so the new one shares its
    torch. `share_torch=False`: a bare venv, without torch."""
    flags = ["--system-site-packages"] if share_torch else []
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(path)], check=True)
    if share_torch:
        purelib = sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"]
        Path(purelib, "compilebench_shared_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return path


def environments(**venvs: str) -> list[str]:
    """Overrides defining one environment per venv directory, named as the keyword."""
    return [f"+cluster.environments.{name}.venv={path}" for name, path in venvs.items()]
