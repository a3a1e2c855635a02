"""The local Slurm run from Debian packages unpacked into a directory: the way it runs on the
GPU machines, which have no package registry (tests/helpers/slurm/unpack_debs.sh,
tests/helpers/slurm/install.py).

The packages are fetched with `apt-get download` by the test itself (as tests/run.sh installs
the system's); needs root, like every local Slurm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.slurm.cluster import LocalSlurm
from tests.helpers.slurm.fixtures import REQUIRE_ENV, SlurmClusters, slurm_required
from tests.helpers.slurm.install import SlurmInstall

UNPACK = Path(__file__).resolve().parents[1] / "helpers" / "slurm" / "unpack_debs.sh"


@pytest.fixture(scope="module")
def unpacked_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0 or not (shutil.which("apt-get") and shutil.which("dpkg")):
        reason = "unpacking Slurm's Debian packages needs root, apt-get and dpkg"
        if slurm_required():
            pytest.fail(f"{reason} and {REQUIRE_ENV} is set", pytrace=False)
        pytest.skip(reason)
    prefix = tmp_path_factory.mktemp("slurm-debs") / "prefix"
    done = subprocess.run(["bash", str(UNPACK), str(prefix)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return prefix


def test_cluster_from_unpacked_debs_schedules_typed_gpus(
    unpacked_prefix: Path, slurm_clusters: SlurmClusters, tmp_path: Path
) -> None:
    install = SlurmInstall(unpacked_prefix)
    assert install.missing(accounting=False) == []
    assert install.command("slurmd") == str(unpacked_prefix / "usr/sbin/slurmd-wlm")  # no plain name there
    slurm_clusters.stop()  # one local Slurm at a time; the fixtures restart theirs when needed
    with LocalSlurm(tmp_path / "cluster", install=install, bind_cores=True) as cluster:
        # Started under its file name `slurmd-wlm`, slurmd ignored the node's gres: (null) here.
        assert cluster.run("sinfo", "-h", "-N", "-o", "%G").stdout.split()[0] == "gpu:A100:2,gpu:H100:2"
        out = tmp_path / "job.out"
        cluster.run(
            "sbatch",
            "--wait",
            "-p",
            "grete-h100",
            "-G",
            "H100:1",
            "-o",
            str(out),
            "--wrap",
            "echo $SLURM_JOB_PARTITION $SLURM_GPUS_ON_NODE; command -v sbatch",
            timeout=120,
        )
        partition, gpus, sbatch = out.read_text().split()
        assert (partition, gpus) == ("grete-h100", "1")
        assert sbatch == str(unpacked_prefix / "usr/bin/sbatch")  # the job sees the prefix's commands
        # As the GPU machines' sweeps run it: a job bound to the one core it asked for, not the node's.
        cluster.run(
            "sbatch",
            "--wait",
            "-c",
            "1",
            "-o",
            str(out),
            "--wrap",
            "python3 -c 'import os; print(len(os.sched_getaffinity(0)))'",
            timeout=120,
        )
        assert int(out.read_text()) == 1 < cluster.cpus, (out.read_text(), cluster.cpus)
