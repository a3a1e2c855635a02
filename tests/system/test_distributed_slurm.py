"""Distributed cells, the orchestrator side: one Slurm task per process. What a cell of several
processes asks Slurm for, the script submitit renders for it, the local executor refusing it, and
two-task CPU cells (gloo) run through the real single-node Slurm of tests/helpers/slurm/, eager and
compiled, with both ranks' measurements in the cell's Parquet files.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.cli.main import main
from orchestrator.executors.slurm.plan import check_grid
from orchestrator.grid.expand import expand
from orchestrator.grid.profile import ProfileError
from tests.helpers import BASH, TINY, slurm_cli, wait_until_done
from tests.helpers.slurm.cluster import LocalSlurm

TWO_TASKS = "distributed.tasks_per_node=2"


def test_two_tasks_ask_for_a_node_share_and_one_task_per_process() -> None:
    grid = expand(["cluster=grete", TWO_TASKS])
    _, resources, params = check_grid(grid)
    ((cell_id, res),) = resources.items()
    assert (res.nodes, res.tasks_per_node, res.gres, res.cpus, res.mem_gb) == (1, 2, "gpu:A100:2", 16, 240)
    assert res.describe()["tasks"] == "1x2"
    (p,) = params.values()
    assert (p["nodes"], p["ntasks_per_node"], p["gres"], p["cpus_per_task"]) == (1, 2, "gpu:A100:2", 16)
    assert p["srun_args"] == ["--kill-on-bad-exit=1", "--cpus-per-task=16"]


def test_single_process_cells_ask_as_before() -> None:
    (params,) = check_grid(expand(["cluster=grete"]))[2].values()
    assert "ntasks_per_node" not in params and params["srun_args"] == ["--cpus-per-task=16"]


def test_more_gpus_than_a_node_has_is_refused() -> None:
    with pytest.raises(ProfileError, match="tasks_per_node=5 asks for 5 GPUs per node; a node has 4"):
        check_grid(expand(["cluster=grete", "distributed.tasks_per_node=5"]))


def test_dry_run_script_starts_one_task_per_process(capsys, no_slurm_here, tmp_path: Path) -> None:
    code = main(
        ["sweep", "cluster=grete", TWO_TASKS, "distributed.nodes=2", "hydra.sweep.dir=sw", "--dry-run"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    header, _, row = out.splitlines()[:3]
    columns = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert (columns["tasks"], columns["gres"], columns["cpus"], columns["mem"]) == (
        "2x2",
        "gpu:A100:2",
        "16",
        "240G",
    )
    script = (tmp_path / "sw" / "sbatch" / "dryrun-00.sh").read_text()
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --gres=gpu:A100:2",
        "#SBATCH --mem=240GB",
    ):
        assert line in script, script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert "--kill-on-bad-exit=1" in srun and "--cpus-per-task=16" in srun
    assert subprocess.run([BASH, "-n"], input=script, text=True).returncode == 0


def test_local_executor_refuses_a_distributed_cell(
    capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["sweep", *TINY, "backend=eager", TWO_TASKS, "hydra.sweep.dir=sw"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "train as several processes" in err[0] and "use a Slurm cluster profile" in err[0]
    assert not (tmp_path / "sw").exists()


def test_two_task_vision_cell_through_slurm(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """The vision workload under DDP too: a tiny timm ResNet, two gloo ranks, compiled (aot_eager)."""
    sweep = tmp_path / "sw"
    result = slurm_cli(
        slurm_cluster,
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        "model=resnet",
        "size=tiny",
        "precision=fp32",
        "device=cpu",
        "steps=2",
        "warmup_steps=1",
        "measure.min_seconds=0",
        "backend=aot_eager",
        TWO_TASKS,
        "hydra.sweep.dir=sw",
    )
    assert result.returncode == 0, result.stderr
    ((cell_id, job_id),) = pd.read_parquet(sweep / "manifest.parquet")[["cell_id", "job_id"]].itertuples(
        index=False
    )
    wait_until_done(slurm_cluster, {job_id}, [sweep / "cells" / cell_id])
    run = pd.read_parquet(sweep / "cells" / cell_id / "run.parquet").iloc[-1]
    assert run["status"] == "completed", run["error"]
    assert (run["world_size"], run["dist_backend"], run["model"]) == (2, "gloo", "resnet")
    assert run["items_per_step"] == 2 * run["batch_size"] and run["graph_count"] >= 1


def test_two_task_cells_through_slurm(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """Two cells (eager, aot_eager) of two gloo processes each: one Slurm job array, each task a
    rank; rank 0 writes one steps row per step with both ranks' times, and the run row has both
    ranks' medians, hosts and memory; the compiled cell counts DDP's graph breaks."""
    sweep = tmp_path / "sw"
    result = slurm_cli(
        slurm_cluster,
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "steps=3",
        "backend=eager,aot_eager",
        TWO_TASKS,
        "hydra.sweep.dir=sw",
    )
    assert result.returncode == 0, result.stderr
    manifest = pd.read_parquet(sweep / "manifest.parquet")
    assert len({job_id.split("_")[0] for job_id in manifest["job_id"]}) == 1  # one array
    shown = slurm_cluster.run("scontrol", "show", "job", manifest["job_id"].iloc[0]).stdout
    assert "NumTasks=2" in shown and "TresPerNode=gres:gpu:A100:2" in shown, shown

    cell_dirs = [sweep / "cells" / cell_id for cell_id in manifest["cell_id"]]
    wait_until_done(slurm_cluster, set(manifest["job_id"]), cell_dirs)
    for cell_dir, backend, job_id in zip(cell_dirs, manifest["backend"], manifest["job_id"]):
        run = pd.read_parquet(cell_dir / "run.parquet").iloc[-1]
        steps = pd.read_parquet(cell_dir / "steps.parquet")
        assert run["status"] == "completed", (
            run["error"],
            (cell_dir / "logs" / "stderr.rank1.log").read_text(),
        )
        assert (run["world_size"], run["nodes"], run["dist_backend"]) == (2, 1, "gloo")
        assert (
            len(run["rank_hostname"])
            == len(run["rank_median_step_ms"])
            == len(run["rank_peak_mem_bytes"])
            == 2
        )
        assert run["batch_size"] == 8 and run["items_per_step"] == 2 * 8 * 64  # two ranks' tokens
        assert list(steps["step"]) == list(range(4)) and set(steps["items"]) == {1024}
        for _, step in steps.iterrows():
            assert len(step["rank_step_time_ms"]) == 2 and step["step_time_ms"] == max(
                step["rank_step_time_ms"]
            )
        assert run["median_step_ms"] == steps.loc[steps["phase"] == "measure", "step_time_ms"].median()
        if backend == "aot_eager":
            assert run["graph_count"] >= 1 and len(run["rank_compile_time_s"]) == 2
            # DDP's forward (its reducer's bucket rebuilding) is where dynamo breaks the graph;
            # the tiny GPT fits one gradient bucket, so DDPOptimizer makes no cut.
            assert run["graph_break_count"] >= 1 and run["ddp_graph_splits"] == 0
            # ranks cannot agree on every block: measured unpaired, and the row says why
            assert not run["paired"] and run["paired_fallback"].startswith("distributed cell (2 processes)")
        else:
            assert pd.isna(run["graph_count"]) and run["rank_compile_time_s"] is None
        # Each rank's task left its trace: logs, the env:// variables it exported, its exit.
        logs = cell_dir / "logs"
        seen = dict(
            line.split("=", 1) for line in (logs / f"slurm-{job_id}.rank1.env").read_text().splitlines()
        )
        assert (seen["RANK"], seen["WORLD_SIZE"], seen["LOCAL_RANK"], seen["SLURM_PROCID"]) == (
            "1",
            "2",
            "1",
            "1",
        )
        assert f"cell {cell_dir.name}: completed" in (logs / f"slurm-{job_id}.rank1.out").read_text()
        assert (logs / "stdout.rank1.log").exists() and (logs / "stdout.log").exists()


def test_a_cell_failing_on_every_rank_fails_its_job(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """A token file shorter than one block: both ranks fail before training; rank 0 records the
    workload's reason, rank 1's log has its own, and the Slurm job ends FAILED (no rank waits)."""
    short_bin = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(short_bin)
    result = slurm_cli(
        slurm_cluster,
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "data.source=bin",
        f"data.path={short_bin}",
        TWO_TASKS,
        "hydra.sweep.dir=sw",
    )
    assert result.returncode == 0, result.stderr
    manifest = pd.read_parquet(tmp_path / "sw" / "manifest.parquet")
    (cell_id,), (job_id,) = manifest["cell_id"], manifest["job_id"]
    cell_dir = tmp_path / "sw" / "cells" / cell_id
    wait_until_done(slurm_cluster, {job_id}, [cell_dir])
    (run,) = pd.read_parquet(cell_dir / "run.parquet").to_dict("records")
    assert (run["status"], run["world_size"]) == ("failed", 2) and "block_size" in run["error"]
    assert "block_size" in (cell_dir / "logs" / "stderr.rank1.log").read_text()
    assert "JobState=FAILED" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout
