"""The test setup's single-node Slurm (tests/helpers/slurm/) runs real jobs, in both variants.

What later orchestrator tests rely on: the seminar-like partitions, typed GPU requests shown in
`scontrol show job`, submitit job arrays, `sacct` with accounting and its failure without, and a
`stop()` that leaves no daemon behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.helpers.slurm.cluster import LocalSlurm
from tests.helpers.slurm.fixtures import SlurmClusters

#: Generous: another test session may keep both cores busy.
JOB_TIMEOUT = 120


def wait_for_job(cluster: LocalSlurm, job_id: str, timeout: float = JOB_TIMEOUT) -> str:
    """Poll `scontrol show job` until the job has ended; returns its full description."""

    def state(shown: str) -> str:
        return shown.split("JobState=", 1)[1].split()[0]

    return wait_until(
        lambda: cluster.run("scontrol", "show", "job", job_id).stdout,
        timeout,
        lambda shown: f"job {job_id} still {state(shown)}\n{shown}\n{cluster.logs()}",
        done=lambda shown: state(shown) not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"),
        interval=0.2,
    )


def sacct_until(cluster: LocalSlurm, job_id: str, done, timeout: float = JOB_TIMEOUT) -> list[list[str]]:
    """`sacct -X -P` rows (JobID, State, Partition, AllocTRES) of a job, polled until `done(rows)`:
    a job's record reaches slurmdbd in parts, a moment after the job has ended."""

    def rows() -> list[list[str]]:
        out = cluster.run(
            "sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,Partition,AllocTRES"
        ).stdout
        return [line.split("|") for line in out.splitlines() if line]

    return wait_until(rows, timeout, lambda last: f"sacct -j {job_id}: {last}", done=done)


def sbatch(cluster: LocalSlurm, out_dir: Path, *args: str) -> str:
    return (
        cluster.run("sbatch", "--parsable", "-o", str(out_dir / "%j.out"), *args).stdout.strip().split(";")[0]
    )


def test_partition_and_typed_gpu_request(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    job_id = sbatch(
        slurm_cluster, tmp_path, "-p", "grete:shared", "-G", "A100:1", "--wrap", "echo $SLURM_JOB_PARTITION"
    )
    shown = wait_for_job(slurm_cluster, job_id)
    assert "JobState=COMPLETED" in shown, shown
    assert (tmp_path / f"{job_id}.out").read_text().strip() == "grete:shared"
    assert "Partition=grete:shared" in shown
    assert "TresPerJob=gres:gpu:A100:1" in shown
    assert (
        int(job_id) >= slurm_cluster.first_job_id
    )  # ids of its own (FirstJobId), not from 1 as the last cluster's


def test_gpu_types_are_separate(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """Two H100s exist: asking for three of them is refused at submission."""
    refused = slurm_cluster.run(
        "sbatch", "-p", "grete-h100", "-G", "H100:3", "-o", str(tmp_path / "x"), "--wrap", "true", check=False
    )
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr


def test_sacct_disabled_without_accounting(slurm_cluster: LocalSlurm) -> None:
    assert not slurm_cluster.has_accounting
    sacct = slurm_cluster.run("sacct", "-n", check=False)
    assert sacct.returncode != 0
    assert "accounting storage is disabled" in sacct.stderr


@pytest.mark.parametrize("accounting", [False, True], ids=["no-accounting", "accounting"])
def test_submitit_job_array(slurm_clusters: SlurmClusters, tmp_path: Path, accounting: bool) -> None:
    import submitit

    def task(x: int) -> tuple[int, str, str, str]:
        """Runs in the job; a nested function, so cloudpickle sends it by value (this test module
        is not importable there)."""
        import os

        return (
            x * x,
            os.environ["SLURM_ARRAY_TASK_ID"],
            os.environ["SLURM_JOB_PARTITION"],
            os.environ.get("SLURM_GPUS_ON_NODE", ""),
        )

    cluster = slurm_clusters.get(accounting)
    with cluster.activated():
        executor = submitit.AutoExecutor(folder=tmp_path / "submitit")
        assert executor.cluster == "slurm"
        executor.update_parameters(
            slurm_partition="grete-h100",
            slurm_gres="gpu:H100:1",
            timeout_min=5,
            cpus_per_task=1,
            slurm_array_parallelism=4,
        )
        jobs = executor.map_array(task, [1, 2, 3, 4])
        # job.result() alone would wait forever for a job that never ends
        wait_until(
            lambda: [job.job_id for job in jobs if not job.done()],
            JOB_TIMEOUT,
            lambda left: f"jobs {left} not done\n{cluster.logs()}",
            done=lambda left: not left,
            interval=1,
        )
        results = [job.result() for job in jobs]
    assert [r[0] for r in results] == [1, 4, 9, 16]
    assert [r[1] for r in results] == ["0", "1", "2", "3"]
    assert {r[2] for r in results} == {"grete-h100"}
    assert {r[3] for r in results} == {"1"}
    array_ids = {job.job_id.split("_")[0] for job in jobs}
    assert len(array_ids) == 1, [job.job_id for job in jobs]  # one array job, four tasks
    shown = cluster.run("scontrol", "show", "job", jobs[0].job_id).stdout
    assert "TresPerNode=gres:gpu:H100:1" in shown, shown
    if accounting:  # the array's tasks, one row each
        rows = sacct_until(
            cluster,
            jobs[0].job_id.split("_")[0],
            lambda rows: len(rows) == 4 and all(r[1] == "COMPLETED" and r[2] for r in rows),
        )
        assert sorted(r[0] for r in rows) == sorted(job.job_id for job in jobs)
        assert {r[2] for r in rows} == {"grete-h100"}


def test_sacct_with_accounting(slurm_cluster_accounting: LocalSlurm, tmp_path: Path) -> None:
    cluster = slurm_cluster_accounting
    assert cluster.has_accounting
    job_id = sbatch(cluster, tmp_path, "-p", "grete-h100", "-G", "H100:1", "--wrap", "true")
    assert "JobState=COMPLETED" in wait_for_job(cluster, job_id)
    [(job, state, partition, tres)] = sacct_until(
        cluster, job_id, lambda rows: rows and rows[0][1] == "COMPLETED" and rows[0][2]
    )
    assert (job, state, partition) == (job_id, "COMPLETED", "grete-h100")
    assert "gres/gpu:h100=1" in tres


@pytest.mark.parametrize("accounting", [True, False], ids=["accounting", "no-accounting"])
def test_stop_leaves_no_process(slurm_clusters: SlurmClusters, tmp_path: Path, accounting: bool) -> None:
    """Daemons and a job still running when the cluster stops: all of them end."""
    cluster = slurm_clusters.get(accounting)
    job_id = sbatch(cluster, tmp_path, "--wrap", "sleep 300")
    expected = {"munged", "slurmctld", "slurmd", "slurmstepd", "sleep"}  # sleep: the job script runs
    expected |= {"slurmdbd", "mariadbd", "mysqld_safe"} if accounting else set()

    def running() -> dict[int, str]:
        names = {}
        for pid in cluster.processes():
            try:
                names[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
            except FileNotFoundError:  # ended since it was listed
                pass
        return names

    names = wait_until(
        running,
        JOB_TIMEOUT,
        lambda last: f"job {job_id}: not all of {sorted(expected)} in {last}",
        done=lambda found: expected <= set(found.values()),
        interval=0.2,
    )
    pids = list(names)
    cluster.stop()
    alive = [
        pid
        for pid in pids
        if Path(f"/proc/{pid}").exists()
        and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ]
    assert not alive, {pid: names[pid] for pid in alive}
    assert cluster.processes() == []
    assert not cluster.running
