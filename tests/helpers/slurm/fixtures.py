"""pytest fixtures for the local Slurm: `slurm_cluster` (no accounting), `slurm_cluster_accounting`.

A pytest plugin: tests/conftest.py loads it (`pytest_plugins`), so every test module can ask for
the fixtures by name, without importing them:

    def test_something(slurm_cluster):
        slurm_cluster.run("sbatch", "--wrap", "true")          # client commands, SLURM_CONF set
        with slurm_cluster.activated():                         # in-process callers (submitit)
            ...

Both are session-scoped. Only one of the two clusters runs at a time: asking for the other
variant stops the running one completely first, and the `_slurm_variant_running` guard
restarts the right one for a test whose fixture was stopped by an earlier test of the other
variant (the state directory is kept, so finished jobs and accounting records survive a
restart; stopping cancels unfinished jobs). The guard is an autouse fixture: it runs before
every test of the suite and, for one that asks for neither cluster fixture, does nothing.
A module- or session-scoped fixture that needs a cluster should call `slurm_clusters.get(accounting)`
itself: the guard runs per test, after such fixtures are set up.

Without root or without the Debian packages (tests/helpers/slurm/install.sh) the fixtures skip; when
COMPILEBENCH_REQUIRE_SLURM is set (CI sets it), that is an error instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.slurm.cluster import LocalSlurm, missing_commands

#: What test modules may import; the fixtures come from the plugin, never from an import.
__all__ = ["SlurmClusters", "REQUIRE_ENV", "slurm_required"]

#: Set (to anything but "" or "0") to turn "no Slurm here" from a skip into an error.
REQUIRE_ENV = "COMPILEBENCH_REQUIRE_SLURM"

_FIXTURE_VARIANT = {"slurm_cluster": False, "slurm_cluster_accounting": True}


def slurm_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def unavailable_reason(accounting: bool) -> str | None:
    """Why a local Slurm of this kind cannot start on this machine, or None when it can."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not running as root")
    missing = missing_commands(accounting)
    if missing:
        problems.append(f"missing {' '.join(missing)} (install with: bash tests/helpers/slurm/install.sh)")
    if not problems:
        return None
    kind = "with accounting" if accounting else "without accounting"
    return f"local Slurm {kind} unavailable: {'; '.join(problems)}"


class SlurmClusters:
    """The session's two local clusters, at most one of them running."""

    def __init__(self, base: Path):
        self.base = base
        self.clusters: dict[bool, LocalSlurm] = {}
        self.current: LocalSlurm | None = None
        self.start_seconds: dict[bool, list[float]] = {False: [], True: []}

    def get(self, accounting: bool) -> LocalSlurm:
        """The running cluster of this variant, started (and the other one stopped) if need be."""
        reason = unavailable_reason(accounting)
        if reason:
            if slurm_required():
                pytest.fail(f"{reason} and {REQUIRE_ENV} is set", pytrace=False)
            pytest.skip(reason)
        cluster = self.clusters.setdefault(
            accounting,
            LocalSlurm(self.base / ("accounting" if accounting else "plain"), accounting=accounting),
        )
        if self.current is not None and self.current is not cluster:
            self.current.stop()
            self.current = None
        if not cluster.running:
            began = time.monotonic()
            cluster.start()
            self.start_seconds[accounting].append(time.monotonic() - began)
        self.current = cluster
        return cluster

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        self.current = None


@pytest.fixture(scope="session")
def slurm_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmClusters]:
    clusters = SlurmClusters(tmp_path_factory.mktemp("slurm"))
    try:
        yield clusters
    finally:
        clusters.stop()


@pytest.fixture(scope="session")
def slurm_cluster(slurm_clusters: SlurmClusters) -> LocalSlurm:
    """A running single-node Slurm without accounting (`sacct` fails there, as on some sites)."""
    return slurm_clusters.get(accounting=False)


@pytest.fixture(scope="session")
def slurm_cluster_accounting(slurm_clusters: SlurmClusters) -> LocalSlurm:
    """A running single-node Slurm with slurmdbd and MariaDB: `sacct` works."""
    return slurm_clusters.get(accounting=True)


@pytest.fixture(autouse=True)
def _slurm_variant_running(request: pytest.FixtureRequest) -> None:
    """Before a test that uses one of the clusters: make sure that one runs (it may have been
    stopped for the other variant since its session fixture was set up). Before any other test
    (autouse: every test of the suite) it returns at once, starting nothing."""
    wanted = {variant for name, variant in _FIXTURE_VARIANT.items() if name in request.fixturenames}
    if not wanted:
        return
    if len(wanted) > 1:
        pytest.fail(
            "a test can use slurm_cluster or slurm_cluster_accounting, not both: "
            "only one local Slurm runs at a time",
            pytrace=False,
        )
    request.getfixturevalue("slurm_clusters").get(wanted.pop())
