"""The Slurm executor: cluster profiles, grouping cells into job arrays, the sbatch scripts that
submitit renders (golden files), `sweep --dry-run`, and bad input refused before anything runs.

The planning tests need no Slurm (conftest's `no_slurm_here` fixture hides any cluster of the machine);
the end-to-end tests at the end run small sweeps of tiny CPU cells through the real single-node
Slurm of tests/helpers/slurm/ (its session fixtures; skipped where it cannot start).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.cli.main import main
from orchestrator.executors.slurm.plan import check_grid, group_arrays, plan
from orchestrator.executors.slurm.sbatch import job_name
from orchestrator.executors.slurm.scheduler import minutes
from orchestrator.grid.expand import expand
from orchestrator.grid.profile import ProfileError, load_profile, resources_for
from tests.helpers import BASH, REPO_ROOT, TINY, jobs_from, slurm_cli, wait_until_done
from tests.helpers.slurm.cluster import LocalSlurm

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
#: Set to rewrite the golden files from what the code renders now (then review the diff).
UPDATE_ENV = "COMPILEBENCH_UPDATE_GOLDEN"


def sweep_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["sweep", *args])
    out, err = capsys.readouterr()
    return code, out, err


def normalise(text: str, sweep_dir: Path) -> str:
    """Only what differs between machines and runs: the sweep directory and the Python binary."""
    return text.replace(str(sweep_dir), "SWEEP_DIR").replace(sys.executable, "PYTHON")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get(UPDATE_ENV):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with {UPDATE_ENV}=1 to write it"
    assert text == path.read_text(), (
        f"{name} differs from the golden file (rerun with {UPDATE_ENV}=1 and review)"
    )


# --- grouping ------------------------------------------------------------------------------


def test_group_arrays_keeps_order_and_splits_at_max_size() -> None:
    items = ["a1", "b1", "a2", "a3", "b2", "a4", "a5", "a6", "a7"]
    groups = group_arrays(items, key=lambda s: s[0], max_size=3)
    assert groups == [
        ("a", ["a1", "a2", "a3"]),
        ("a", ["a4", "a5", "a6"]),
        ("a", ["a7"]),
        ("b", ["b1", "b2"]),
    ]
    assert group_arrays(items, key=lambda s: s[0], max_size=100) == [
        ("a", ["a1", "a2", "a3", "a4", "a5", "a6", "a7"]),
        ("b", ["b1", "b2"]),
    ]
    assert [len(g) for _, g in group_arrays(list(range(2001)), key=lambda i: 0, max_size=1000)] == [
        1000,
        1000,
        1,
    ]
    assert group_arrays([], key=lambda s: s, max_size=5) == []
    with pytest.raises(ValueError):
        group_arrays(items, key=lambda s: s, max_size=0)


def test_cells_sharing_resources_share_an_array() -> None:
    grid = expand(["cluster=grete", "model=gpt,resnet", "backend=eager,inductor", "seed=1,2"])
    _, resources, params = check_grid(grid)
    by_model = {}
    for cell in grid.cells:
        by_model.setdefault(cell.axes["model"], set()).add(resources[cell.cell_id])
    assert {model: len(r) for model, r in by_model.items()} == {"gpt": 1, "resnet": 1}  # 4 cells each
    assert len(params) == 2
    (gpt,), (resnet,) = by_model["gpt"], by_model["resnet"]
    assert (gpt.partition, gpt.gres, gpt.cpus, gpt.mem_gb, gpt.time_min) == (
        "grete:shared",
        "gpu:A100:1",
        16,
        120,
        60,
    )
    assert (resnet.partition, resnet.gres) == ("grete-h100", "gpu:H100:1")


def test_array_task_imports_no_torch() -> None:
    """The functions a Slurm task unpickles (a cell's, a packed task's) load without Hydra and torch:
    on a busy node that start-up would come on top of the cell's own (which imports torch in its
    subprocess)."""
    code = (
        "import sys, orchestrator.executors.slurm.job, orchestrator.executors.slurm.packed_task; "
        "print(sorted({'torch', 'hydra'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --- profiles ------------------------------------------------------------------------------


@functools.cache
def _grete(overrides: tuple[str, ...]) -> str:
    return json.dumps(expand(["cluster=grete", *overrides]).cluster)


def grete(*overrides: str) -> dict:
    """The composed grete profile (a fresh copy; composing takes a second, so it is cached)."""
    return json.loads(_grete(overrides))


@pytest.mark.parametrize(
    "overrides, model, partition, gres",
    [
        ([], "gpt", "grete:shared", "gpu:A100:1"),
        ([], "resnet", "grete-h100", "gpu:H100:1"),
        ([], "timm", "grete-h100", "gpu:H100:1"),
        (["cluster.gpu_type=H100"], "gpt", "grete-h100", "gpu:H100:1"),
        (["cluster.gpu_type_by_model.resnet=A100"], "resnet", "grete:shared", "gpu:A100:1"),
        (["cluster.gpu_type_by_model.default=H100"], "some_new_model", "grete-h100", "gpu:H100:1"),
        (["cluster.gpus=2"], "gpt", "grete:shared", "gpu:A100:2"),
        (["cluster.gpus=0"], "gpt", "grete:shared", None),
        (["cluster.partition=grete-h100"], "gpt", "grete-h100", "gpu:A100:1"),
    ],
)
def test_resources_from_profile_and_model(
    overrides: list[str], model: str, partition: str, gres: str | None
) -> None:
    res = resources_for(load_profile(grete(*overrides)), model)
    assert (res.partition, res.gres) == (partition, gres)
    assert res.cpus == 16 * max(res.gpus, 1) and res.mem_gb == 120 * max(res.gpus, 1)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"gpu_type": "V100"},
            "unknown GPU type 'V100' (for model gpt); the profile's partitions have: A100, H100",
        ),
        (
            {"partition": "nope"},
            "unknown partition 'nope'; the profile's partitions: grete-h100, grete:shared",
        ),
        ({"compile_cache": "sometimes"}, "compile_cache must be one of shared, per_job"),
        ({"time_min": None}, "time_min (required for Slurm: minutes per job) must be a positive integer"),
        ({"gpus": 5}, "gpus=5 is more than a node has (gpus_per_node=4)"),
        ({"max_array_size": 0}, "max_array_size must be a positive integer"),
        ({"partitions": {}}, "partitions is empty"),
        ({"typo_key": 1}, "unknown key(s) typo_key"),
        ({"setup": ["ok", "two\nlines"]}, "setup must be a list of one-line strings"),
        ({"env": {"not a name": "x"}}, "env must map variable names to values"),
    ],
)
def test_bad_profile_is_one_line_error(change: dict, message: str) -> None:
    cluster = {**grete(), **change}
    with pytest.raises(ProfileError) as info:
        resources_for(load_profile(cluster), "gpt")
    assert str(info.value).startswith("cluster grete: ")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_no_gpu_type_for_a_model() -> None:
    cluster = {**grete(), "gpu_type_by_model": {"resnet": "H100"}}
    with pytest.raises(ProfileError, match="no GPU type for model gpt: set cluster.gpu_type"):
        resources_for(load_profile(cluster), "gpt")


@pytest.mark.parametrize(
    "override, message",
    [
        ("cluster.gpu_type=V100", "unknown GPU type 'V100'"),
        ("cluster.partition=nope", "unknown partition 'nope'"),
        ("cluster.compile_cache=sometimes", "compile_cache must be one of"),
        ("+cluster.typo=1", "unknown key(s) typo"),
        ("cluster.sbatch_template=nope", "sbatch_template 'nope' not found"),
        ("cluster.executor=pbs", "unknown executor 'pbs'"),
    ],
)
def test_cli_bad_cluster_input_exits_2_before_anything(
    capsys, no_slurm_here, tmp_path: Path, override: str, message: str
) -> None:
    code, out, err = sweep_cli(capsys, "cluster=grete", override, "hydra.sweep.dir=sw")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "sw").exists()  # nothing written, nothing submitted


# --- dry run and golden scripts ------------------------------------------------------------


def test_dry_run_grid_and_golden_scripts(capsys, no_slurm_here, tmp_path: Path) -> None:
    """Two models, two backends on Grete: LLM cells in one A100 array, CNN cells in one H100 array."""
    sweep = tmp_path / "sweep"
    code, out, err = sweep_cli(
        capsys,
        "cluster=grete",
        "model=gpt,resnet",
        "backend=eager,inductor",
        f"hydra.sweep.dir={sweep}",
        "--dry-run",
    )
    assert code == 0, err
    header = [c.strip() for c in out.splitlines()[0].strip("|").split("|")]
    assert header == [
        "cell_id",
        "model",
        "size",
        "backend",
        "compile_mode",
        "precision",
        "partition",
        "tasks",
        "gres",
        "cpus",
        "mem",
        "time",
        "array",
        "state",
    ]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in out.splitlines()[2:6]
    }
    cells = expand(["cluster=grete", "model=gpt,resnet", "backend=eager,inductor"]).cells
    assert sorted(rows) == sorted(c.cell_id for c in cells)
    for cell_id, model in ((c.cell_id, c.axes["model"]) for c in cells):
        gpu, partition, array = (
            ("A100", "grete:shared", "0") if model == "gpt" else ("H100", "grete-h100", "1")
        )
        assert rows[cell_id][6:] == [
            partition,
            "1x1",
            f"gpu:{gpu}:1",
            "16",
            "120G",
            "60 min",
            array,
            "submit",
        ]
    assert "4 cell(s): 4 in 2 job array(s)" in out and "nothing submitted (--dry-run)" in out
    scripts = sorted((sweep / "sbatch").iterdir())
    assert [p.name for p in scripts] == ["dryrun-00.sh", "dryrun-01.sh"]
    check_golden("grete_a100_array.sh", normalise(scripts[0].read_text(), sweep))
    check_golden("grete_h100_array.sh", normalise(scripts[1].read_text(), sweep))
    assert [p.name for p in sweep.iterdir()] == ["sbatch"]  # no configs, no manifest, no submitit pickles


def test_dry_run_plan_golden(capsys, no_slurm_here, tmp_path: Path) -> None:
    """The printed plan of a grid with each kind of swept value: group options, a float range, an
    interpolation (Hydra applies it), a quoted string, a plain override. Each cell's overrides come
    from the sweep's one parse (orchestrator/grid/private_apis.py job_overrides): a value that
    differed from what parsing the cell's string gives would change its id or row here."""
    sweep = tmp_path / "sweep"
    code, out, err = sweep_cli(
        capsys,
        "cluster=grete",
        "model=gpt,resnet",
        "optim.lr=range(0.1,0.3,0.1)",
        "warmup_steps=${steps},1",
        "device='cuda',cpu",
        "backend.dynamic=true",
        f"hydra.sweep.dir={sweep}",
        "--dry-run",
    )
    assert code == 0, err
    check_golden("grete_dry_run_plan.txt", normalise(out, sweep))


def _setup_section(script: str) -> list[str]:
    lines = script.splitlines()
    return lines[lines.index("# setup") + 1 : lines.index("# command")]


def test_dry_run_writes_the_launcher_of_each_environment(capsys, no_slurm_here, tmp_path: Path) -> None:
    """environment=... on Grete: the cells of three environments share their job array (equal
    resources), whose setup is the job's own; what sets each environment up is its launcher, the
    script a cell's process runs (golden files): modules and a venv, a conda environment with a
    variable, a container image."""
    sweep = tmp_path / "sweep"
    code, out, err = sweep_cli(
        capsys,
        "cluster=grete",
        "model=gpt",
        "+cluster.environments.torch211.modules=[cuda/12.4,python/3.11]",
        "+cluster.environments.torch211.venv=/user/me/venvs/torch 2.11",
        "+cluster.environments.torch215.conda_env=torch215",
        "+cluster.environments.torch215.env.PYTHONNOUSERSITE=1",
        "+cluster.environments.ngc.image=/images/pytorch 25.09.sif",
        "+cluster.environments.ngc.setup=['export APPTAINER_BIND=/scratch']",
        "environment=torch211,torch215,ngc",
        f"hydra.sweep.dir={sweep}",
        "--dry-run",
    )
    assert code == 0, err
    assert "3 cell(s): 3 in 1 job array(s)" in out and "ngc.sh, torch211.sh, torch215.sh" in out
    script = (sweep / "sbatch" / "dryrun-00.sh").read_text()
    assert _setup_section(script) == _setup_section((GOLDEN_DIR / "grete_a100_array.sh").read_text())
    launchers = sorted((sweep / "environments").iterdir())
    assert [p.name for p in launchers] == ["ngc.sh", "torch211.sh", "torch215.sh"]
    for path in launchers:
        check_golden(f"grete_environment_{path.name}", path.read_text())


def test_job_names_carry_the_sweep_name() -> None:
    """squeue tells sweeps apart (the golden scripts show `compilebench-sweep`; tests/system/test_status.py
    finds the name in the local Slurm's queue); no space or shell character gets into the name."""
    assert job_name(Path("/work/sweeps/2026-11-21_10-00-00")) == "compilebench-2026-11-21_10-00-00"
    assert job_name(Path("/work/my sweep; rm -rf ~")) == "compilebench-my_sweep_rm_-rf"
    assert len(job_name(Path("/work") / ("a" * 200))) == 64 and job_name(Path("/")) == "compilebench"


def test_site_setup_is_quoted(capsys, no_slurm_here, tmp_path: Path) -> None:
    """Every profile value that reaches the script is shell-quoted; `setup` lines stand verbatim."""
    sweep = tmp_path / "sweep"
    code, out, err = sweep_cli(
        capsys,
        "cluster=grete",
        "cluster.compile_cache=shared",
        "cluster.account='proj; touch pwned'",
        "cluster.qos=normal",
        "cluster.modules=[cuda/12.1,gcc 12]",
        "cluster.venv=/opt/venv with space",
        "+cluster.env.NCCL_DEBUG=WARN",
        "+cluster.env.WHO='$(whoami)'",
        "cluster.setup=[module purge,nvidia-smi -L]",
        "+cluster.sbatch_extra.constraint=80gb",
        "+cluster.sbatch_extra.mail-type=FAIL",
        f"hydra.sweep.dir={sweep}",
        "--dry-run",
    )
    assert code == 0, err
    script = (sweep / "sbatch" / "dryrun-00.sh").read_text()
    check_golden("grete_site_setup.sh", normalise(script, sweep))  # one cell: a plain job, no --array
    assert "#SBATCH --account='proj; touch pwned'" in script
    assert "export WHO='$(whoami)'" in script
    syntax = subprocess.run([BASH, "-n"], input=script, text=True, capture_output=True)
    assert syntax.returncode == 0, syntax.stderr


def test_big_sweep_splits_at_max_array_size(capsys, no_slurm_here, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    code, out, err = sweep_cli(
        capsys,
        "cluster=grete",
        "seed=range(0,7)",
        "cluster.max_array_size=3",
        "cluster.array_parallelism=2",
        f"hydra.sweep.dir={sweep}",
        "--dry-run",
    )
    assert code == 0, err
    assert "7 cell(s): 7 in 3 job array(s)" in out
    arrays = [
        re.search(r"#SBATCH --array=(\S+)", p.read_text()) for p in sorted((sweep / "sbatch").iterdir())
    ]
    assert [a.group(1) if a else None for a in arrays] == [
        "0-2%2",
        "0-2%2",
        None,
    ]  # the last one is a lone cell
    # A second, smaller dry run leaves no stale script of the first behind.
    code, out, err = sweep_cli(
        capsys, "cluster=grete", "seed=range(0,7)", f"hydra.sweep.dir={sweep}", "--dry-run"
    )
    assert [p.name for p in (sweep / "sbatch").iterdir()] == ["dryrun-00.sh"]
    assert "--array=0-6%7" in (sweep / "sbatch" / "dryrun-00.sh").read_text()


def test_packed_dry_run_shows_tasks_and_their_time(capsys, no_slurm_here, tmp_path: Path) -> None:
    """cluster.cells_per_task=3: seven cells in tasks of three (the last of one), two tasks to an array
    (max_array_size=2); each array asks for its fullest task's time, 3 x 60 min or 60 min; a DDP cell
    is not packed."""
    sweep = tmp_path / "sweep"
    args = ["cluster=grete", "seed=range(0,7)", "cluster.cells_per_task=3", "cluster.max_array_size=2"]
    code, out, err = sweep_cli(capsys, *args, f"hydra.sweep.dir={sweep}", "--dry-run")
    assert code == 0, err
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()[:9]]
    header, cells = rows[0], rows[2:]
    assert header[-3:] == ["array", "task", "state"] and header[-4] == "time"
    assert [(row[-3], row[-2]) for row in cells] == [
        ("0", "0.0"),
        ("0", "0.1"),
        ("0", "0.2"),
        ("0", "1.0"),
        ("0", "1.1"),
        ("0", "1.2"),
        ("1", "0.0"),
    ]
    assert "7 cell(s): 7 in 2 job array(s) (3 cell(s) per task; array 0: 2 task(s) of 180 min, " in out
    assert "array 1: 1 task(s) of 60 min)" in out
    scripts = sorted((sweep / "sbatch").iterdir())
    check_golden("grete_packed_array.sh", normalise(scripts[0].read_text(), sweep))
    assert "--array" not in scripts[1].read_text() and "#SBATCH --time=60\n" in scripts[1].read_text()

    code, out, err = sweep_cli(
        capsys, *args, "distributed.tasks_per_node=2", f"hydra.sweep.dir={tmp_path / 'ddp'}", "--dry-run"
    )
    assert code == 0, err
    assert "(3 cell(s) per task" not in out and "7 cell(s): 7 in 4 job array(s)" in out  # one per task


def test_packed_replicates_keep_the_sweeps_order(no_slurm_here, tmp_path: Path) -> None:
    """Tasks are filled in run order: a cell's replicates stay apart, the backends alternate, eager first
    in odd rounds and compiled first in even ones (Grid.round_order)."""
    overrides = ["cluster=grete", "backend=eager,inductor", "repeats=3", "cluster.cells_per_task=4"]
    the_plan = plan(expand([*overrides, f"hydra.sweep.dir={tmp_path / 'sw'}"]), query_cluster=False)
    (array,) = the_plan.arrays
    assert [[(cell.axes["backend"], repeat) for cell, repeat in task] for task in array.tasks] == [
        [("eager", 0), ("inductor", 0), ("inductor", 1), ("eager", 1)],
        [("eager", 2), ("inductor", 2)],
    ]
    assert array.params["time"] == 4 * 60 and array.packed


def test_slurm_time_limits_in_minutes() -> None:
    assert [minutes(t) for t in ("infinite", "30", "30:00", "1:00:00", "2-00:00:00", "1-12", "1-12:30")] == [
        None,
        30,
        30,
        60,
        2880,
        2160,
        2190,
    ]
    assert minutes("UNLIMITED") is None and minutes("") is None


# --- through the real single-node Slurm ------------------------------------------------------

#: What a shell inside an allocation (or a careless profile) would hand to sbatch and the jobs.
LEAKY_ENV = {
    "SLURM_JOB_ID": "999999",
    "SLURM_CPUS_PER_TASK": "7",
    "SLURM_COMPILEBENCH_LEAK": "1",
    "SBATCH_PARTITION": "debug",  # sbatch reads SBATCH_* before #SBATCH lines: this would move the jobs
    "TORCHINDUCTOR_CACHE_DIR": "/leaked/inductor",
    "TRITON_CACHE_DIR": "/leaked/triton",
}


def test_sweep_through_job_arrays(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    # Two cells, one array task each (on CI's 2 cores four ran two at a time, twice as long).
    args = ["sweep", "cluster=test_slurm", *TINY, "backend=eager,aot_eager", "hydra.sweep.dir=sw"]
    sweep = tmp_path / "sw"

    planned = slurm_cli(slurm_cluster, tmp_path, *args, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert "2 cell(s): 2 in 1 job array(s)" in planned.stdout
    assert (
        jobs_from(slurm_cluster, tmp_path) == set() and not (sweep / "submitit").exists()
    )  # nothing submitted
    dry_script = (sweep / "sbatch" / "dryrun-00.sh").read_text()

    submitted = slurm_cli(slurm_cluster, tmp_path, *args, env=LEAKY_ENV)
    assert submitted.returncode == 0, submitted.stderr
    manifest = pd.read_parquet(sweep / "manifest.parquet")
    array_ids = {job_id.split("_")[0] for job_id in manifest["job_id"]}
    assert len(array_ids) == 1, manifest  # one array job, one sbatch call
    array_id = array_ids.pop()
    assert sorted(manifest["job_id"]) == [f"{array_id}_{i}" for i in range(2)]
    assert f"submitted {array_id}_[0-1]: 2 cell(s) on grete:shared, gpu:A100:1" in submitted.stdout
    # What ran is what the dry run showed, to the byte (submitit's own file of the submission).
    assert (sweep / "sbatch" / f"{array_id}.sh").read_text() == dry_script
    assert "#SBATCH --partition=grete:shared" in dry_script and "#SBATCH --gres=gpu:A100:1" in dry_script
    shown = slurm_cluster.run("scontrol", "show", "job", array_id).stdout
    assert "Partition=grete:shared" in shown and "TresPerNode=gres:gpu:A100:1" in shown, shown

    # Re-running at once submits nothing: every cell is completed, or queued or running.
    again = slurm_cli(slurm_cluster, tmp_path, *args)
    assert again.returncode == 0 and "nothing to submit: 2 cell(s) completed or still queued" in again.stdout

    cell_dirs = [sweep / "cells" / cell_id for cell_id in manifest["cell_id"]]
    wait_until_done(slurm_cluster, set(manifest["job_id"]), cell_dirs)
    for cell_dir, job_id in zip(cell_dirs, manifest["job_id"]):
        run = pd.read_parquet(cell_dir / "run.parquet").iloc[-1]
        assert run["status"] == "completed", run["error"]
        assert (run["partition"], run["slurm_job_id"], f"{array_id}_{run['slurm_array_task_id']}") == (
            "grete:shared",
            array_id,
            job_id,
        )
        assert (cell_dir / "steps.parquet").exists()
        # The job is findable from the cell: submitit's log of the task, and what the task saw.
        assert f"cell {cell_dir.name}: completed" in (cell_dir / "logs" / f"slurm-{job_id}.out").read_text()
        seen = dict(
            line.split("=", 1)
            for line in (cell_dir / "logs" / f"slurm-{job_id}.env").read_text().splitlines()
        )
        assert "SLURM_COMPILEBENCH_LEAK" not in seen and "SBATCH_PARTITION" not in seen
        assert (seen["SLURM_JOB_PARTITION"], seen["SLURM_CPUS_PER_TASK"]) == ("grete:shared", "1")
        assert seen["SLURM_ARRAY_JOB_ID"] == array_id and seen["SLURM_JOB_ID"] != LEAKY_ENV["SLURM_JOB_ID"]
        cache = Path(
            seen["COMPILEBENCH_COMPILE_CACHE"]
        )  # per_job (the default): fresh, and removed at the end
        assert cache.name.startswith("compilebench-compile-cache.") and not cache.exists()
        assert (
            "TORCHINDUCTOR_CACHE_DIR" not in seen and "TRITON_CACHE_DIR" not in seen
        )  # the leaked ones unset

    # Re-running the finished sweep skips every cell and submits nothing.
    final = slurm_cli(slurm_cluster, tmp_path, *args)
    assert final.returncode == 0 and "nothing to submit: 2 cell(s) completed" in final.stdout
    assert jobs_from(slurm_cluster, tmp_path) == set()
    assert list(pd.read_parquet(sweep / "manifest.parquet")["job_id"]) == list(manifest["job_id"])
    assert sorted(p.name for p in (sweep / "sbatch").iterdir()) == sorted(["dryrun-00.sh", f"{array_id}.sh"])


def test_shared_compile_cache_makes_the_next_job_start_warm(
    slurm_cluster: LocalSlurm, tmp_path: Path
) -> None:
    """Two replicates of an inductor cell on the H100 partition, one array task after the other
    (%1), with cluster.compile_cache=shared: the first compiles cold into the sweep's cache, in a
    directory keyed by what it ran on, and the second job finds it there and starts warm, as its
    run row says (dynamo's own cache hit counters, and the cache held entries when it began)."""
    sweep = tmp_path / "sw"
    result = slurm_cli(
        slurm_cluster,
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "backend=inductor",
        "repeats=2",
        "cluster.gpu_type=H100",
        "cluster.array_parallelism=1",
        "++cluster.compile_cache=shared",
        "hydra.sweep.dir=sw",
    )
    assert result.returncode == 0, result.stderr
    job_ids = set(pd.read_parquet(sweep / "manifest.parquet")["job_id"])
    (array_id,) = {job_id.split("_")[0] for job_id in job_ids}
    script = (sweep / "sbatch" / f"{array_id}.sh").read_text()
    assert "#SBATCH --array=0-1%1" in script and "#SBATCH --partition=grete-h100" in script
    assert f"export COMPILEBENCH_COMPILE_CACHE={sweep}/compile_cache" in script
    shown = slurm_cluster.run("scontrol", "show", "job", array_id).stdout
    assert "Partition=grete-h100" in shown and "TresPerNode=gres:gpu:H100:1" in shown, shown

    (cell_dir,) = (sweep / "cells").iterdir()
    wait_until_done(slurm_cluster, {f"{array_id}_{i}" for i in range(2)}, [cell_dir])
    runs = pd.read_parquet(cell_dir / "run.parquet").sort_values("repeat")
    assert list(runs["status"]) == ["completed", "completed"], list(runs["error"])
    assert list(runs["partition"]) == ["grete-h100"] * 2 and runs["graph_count"].min() >= 1
    cold, warm = runs.iloc[0], runs.iloc[1]
    (keyed,) = (sweep / "compile_cache").iterdir()  # one machine, one key
    assert set(runs["compile_cache_dir"]) == {str(keyed / "inductor")}
    assert json.loads((keyed / "key.json").read_text())["device"].startswith("cpu: ")
    assert (
        not cold["compile_cache_warm"]
        and cold["fx_graph_cache_hits"] == 0
        and cold["fx_graph_cache_misses"] > 0
    )
    assert (
        warm["compile_cache_warm"] and warm["fx_graph_cache_hits"] > 0 and warm["fx_graph_cache_misses"] == 0
    )
    assert warm["aot_autograd_cache_hits"] > 0 and warm["aot_autograd_cache_misses"] == 0


def test_partition_the_cluster_lacks_is_refused(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    result = slurm_cli(
        slurm_cluster,
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "cluster.partitions.A100=gpu-a100",
        "hydra.sweep.dir=sw",
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: partition 'gpu-a100' does not exist on this cluster "
        "(sinfo lists: debug, grete-h100, grete:shared)"
    )
    assert not (tmp_path / "sw").exists() and jobs_from(slurm_cluster, tmp_path) == set()


def test_failed_cell_fails_its_job_and_is_resubmitted(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """A cell that fails in the workload (a token file shorter than one block) ends its Slurm job
    FAILED with the reason in the cell's logs; a re-run submits that cell again and only it."""
    short_bin = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(short_bin)
    args = [
        "sweep",
        "cluster=test_slurm",
        *TINY,
        "data.source=bin,synthetic",
        f"data.path={short_bin}",
        "hydra.sweep.dir=sw",
    ]
    sweep = tmp_path / "sw"
    first = slurm_cli(slurm_cluster, tmp_path, *args)
    assert first.returncode == 0, first.stderr  # submitted; the failure comes later, in the job
    manifest = pd.read_parquet(sweep / "manifest.parquet")
    cell_dirs = [sweep / "cells" / cell_id for cell_id in manifest["cell_id"]]
    wait_until_done(slurm_cluster, set(manifest["job_id"]), cell_dirs)
    status = {d.name: pd.read_parquet(d / "run.parquet").iloc[-1]["status"] for d in cell_dirs}
    assert sorted(status.values()) == ["completed", "failed"]
    failed = next(d for d in cell_dirs if status[d.name] == "failed")
    failed_job = manifest.set_index("cell_id").loc[failed.name, "job_id"]
    assert "JobState=FAILED" in slurm_cluster.run("scontrol", "show", "job", failed_job).stdout
    assert "block_size" in (failed / "logs" / "stderr.log").read_text()  # the workload's own error
    assert "CellFailed" in (failed / "logs" / f"slurm-{failed_job}.err").read_text()

    second = slurm_cli(slurm_cluster, tmp_path, *args)
    assert second.returncode == 0, second.stderr
    assert "1 cell(s) submitted in 1 job array(s), 1 not submitted" in second.stdout
    resubmitted = pd.read_parquet(sweep / "manifest.parquet").set_index("cell_id")["job_id"]
    assert resubmitted[failed.name] != failed_job
    assert (resubmitted.drop(failed.name) == manifest.set_index("cell_id")["job_id"].drop(failed.name)).all()
    wait_until_done(slurm_cluster, {resubmitted[failed.name]}, [failed])
    assert len(pd.read_parquet(failed / "run.parquet")) == 2  # a second attempt, failed again


def test_a_task_longer_than_its_partition_allows_is_refused(
    slurm_cluster: LocalSlurm, tmp_path: Path
) -> None:
    """The test cluster's `debug` partition allows an hour: six cells of 10 minutes to a task fit,
    seven do not, refused in one line before anything is written or submitted (a dry run too)."""
    args = ["sweep", "cluster=test_slurm", *TINY, "seed=range(0,7)", "cluster.partitions.A100=debug"]
    fits = slurm_cli(
        slurm_cluster, tmp_path, *args, "cluster.cells_per_task=6", "hydra.sweep.dir=a", "--dry-run"
    )
    assert fits.returncode == 0 and "array 0: 2 task(s) of 60 min" in fits.stdout, fits.stdout + fits.stderr
    for extra in ([], ["--dry-run"]):
        refused = slurm_cli(
            slurm_cluster, tmp_path, *args, "cluster.cells_per_task=7", "hydra.sweep.dir=b", *extra
        )
        assert refused.returncode == 2
        assert refused.stderr.strip() == (
            "error: a task of 7 cell(s) x time_min 10 = 70 min is more than partition 'debug' allows "
            "(60 min, sinfo); lower cluster.cells_per_task"
        )
        assert not (tmp_path / "b").exists() and jobs_from(slurm_cluster, tmp_path) == set()
