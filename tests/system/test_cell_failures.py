"""How a cell ends when it cannot complete, through `python -m workloads.run` as a Slurm job
runs it: a run row with the status and the error, the steps measured so far, and an exit
code that is 0 only for `completed` (2 for a config that cannot be read)."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import MEASURING, require_refused_allocations, wait_until
from workloads.cell.cell_id import config_digest
from workloads.cell.config_io import cell_config_from_dict

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_PARTITION")


def assert_ended(cli, status: str, exit_code: int = 1) -> dict:
    """The process exited with `exit_code`, said `status`, and left one run row saying it."""
    proc = cli.proc
    assert proc.returncode == exit_code, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f": {status}"), proc.stderr[-3000:]
    cli.cell.assert_exact_schemas()
    runs = cli.cell.runs
    assert [r["status"] for r in runs] == [status]
    return runs[0]


def short_token_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    np.arange(30, dtype=np.uint16).tofile(directory / "short.bin")
    return directory / "short.bin"


def test_exception_during_the_run_is_a_failed_row(tmp_path, workloads_cli, tiny_config):
    config = tiny_config("gpt", data={"source": "bin", "path": str(short_token_file(tmp_path / "data"))})
    expected = "ValueError: data has 30 tokens; need more than block_size + 1 = 65"
    cli = workloads_cli(config, tmp_path / "cell")
    run = assert_ended(cli, "failed")
    assert expected in run["error"]
    assert "Traceback" in cli.proc.stderr  # the full traceback goes to the job's log
    assert run["cell_id"] == config_digest(cell_config_from_dict(config))
    assert run["started_at"] <= run["finished_at"]
    assert cli.cell.steps == []


@pytest.mark.parametrize(
    "model, overrides, gigabytes",
    [
        pytest.param("resnet", {"model": {"image_size": 10**5}}, 480, id="resnet-4-images-of-100000x100000"),
        pytest.param("gpt", {"batch_size": 10**10}, 5200, id="gpt-batch-10**10"),
    ],
)
def test_out_of_memory_is_an_oom_row(model, overrides, gigabytes, tmp_path, workloads_cli, tiny_config):
    """Far more memory than any node has: the CPU allocator refuses at once."""
    require_refused_allocations()
    cli = workloads_cli(tiny_config(model, **overrides), tmp_path / "cell")
    run = assert_ended(cli, "oom")
    assert f"can't allocate memory: you tried to allocate {gigabytes * 10**9} bytes" in run["error"]
    assert run["model"] == model
    assert cli.cell.steps == []


def test_compile_disabled_is_not_compiled_and_keeps_its_steps(tmp_path, workloads_cli, tiny_config):
    config = tiny_config("gpt", "inductor")
    cli = workloads_cli(config, tmp_path / "cell", env={"TORCH_COMPILE_DISABLE": "1"})
    run = assert_ended(cli, "not_compiled")
    assert run["graph_count"] == 0
    assert "no graph was compiled" in run["error"] and "TORCH_COMPILE_DISABLE" in run["error"]
    steps = cli.cell.steps
    assert [s["phase"] for s in steps] == ["warmup"] * config["warmup_steps"] + ["measure"] * config["steps"]
    assert run["measured_steps"] == config["steps"] and run["median_step_ms"] > 0


_BASE = "model: {name: gpt}\ndevice: cpu\n"
#: name -> (config file text, what its one stderr line must name)
INVALID_CONFIGS = {
    "unknown-key": (_BASE + "stpes: 3\n", "stpes"),
    "unknown-nested-key": (_BASE + "backend: {name: inductor, fulgraph: true}\n", "fulgraph"),
    "no-warmup-for-a-compiled-backend": (
        _BASE + "backend: {name: inductor}\nwarmup_steps: 0\n",
        "warmup_steps >= 1",
    ),
    "missing-data-file": (
        _BASE + "data: {source: text, path: /nonexistent/compilebench/missing.txt}\n",
        "/nonexistent/compilebench/missing.txt",
    ),
    "not-a-mapping": ("- model\n- gpt\n", "mapping"),
    "steps-not-a-number": (_BASE + "steps: ten\n", "steps"),
    "broken-yaml": ("model: {name: gpt\n", "line 2"),  # the parser's position of the error
    # Errors that need the model/backend/data registries: still refused before any work.
    "text-data-for-resnet": (
        f"model: {{name: resnet}}\ndevice: cpu\ndata: {{source: text, path: {__file__}}}\n",
        "data.source=text does not fit model resnet",
    ),
    "unknown-size": (_BASE + "size: huge\n", "no size 'huge'"),
    "unknown-backend": (_BASE + "backend: {name: nosuchbackend}\n", "nosuchbackend"),
}


@pytest.mark.parametrize("case", list(INVALID_CONFIGS))
def test_invalid_config_exits_2_with_one_line(case, tmp_path, workloads_cli):
    text, named = INVALID_CONFIGS[case]
    cli = workloads_cli(text, tmp_path / "cell")
    assert cli.proc.returncode == 2, cli.proc.stderr[-3000:]
    lines = cli.proc.stderr.strip().splitlines()
    assert len(lines) == 1, cli.proc.stderr
    assert lines[0].startswith(f"compilebench: invalid cell config {tmp_path / 'cell' / 'config.yaml'}: ")
    assert named in lines[0]
    assert sorted(p.name for p in (tmp_path / "cell").iterdir()) == ["config.yaml"]  # no attempt recorded


def test_attempts_count_up_in_one_cell_directory(tmp_path, workloads_cli, tiny_config):
    """Run twice (a retry): both attempts' rows stay; the second carries its Slurm job."""
    config = tiny_config("gpt", steps=3, warmup_steps=1)
    cell_dir = tmp_path / "cell"
    first = workloads_cli(config, cell_dir, env={name: None for name in SLURM_VARIABLES})
    assert first.proc.returncode == 0, first.proc.stderr[-3000:]
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_ARRAY_JOB_ID": "4240",
        "SLURM_ARRAY_TASK_ID": "2",
        "SLURM_JOB_PARTITION": "grete-h100",
        "COMPILEBENCH_GIT_SHA": "0123abcd",
    }
    second = workloads_cli(config, cell_dir, env=slurm)
    assert second.proc.returncode == 0, second.proc.stderr[-3000:]

    runs = second.cell.runs
    assert [(r["attempt"], r["status"]) for r in runs] == [(1, "completed"), (2, "completed")]
    assert runs[0]["cell_id"] == runs[1]["cell_id"] == config_digest(cell_config_from_dict(config))
    assert runs[0]["finished_at"] <= runs[1]["started_at"]
    job = [(r["slurm_job_id"], r["slurm_array_task_id"], r["partition"]) for r in runs]
    # an array task is known by its array job's id and task index, as sacct shows it
    assert job == [(None, None, None), ("4240", "2", "grete-h100")]
    assert runs[1]["git_sha"] == "0123abcd"

    steps = second.cell.steps
    per_attempt = {a: [s["step"] for s in steps if s["attempt"] == a] for a in (1, 2)}
    assert per_attempt == {1: [0, 1, 2, 3], 2: [0, 1, 2, 3]}
    # the same seed trains the same curve again
    assert second.cell.losses(1) == second.cell.losses(2)


def lines_until(proc: subprocess.Popen, marker: str, timeout: float = 300) -> list[str]:
    """Read the process's stdout (a pipe, line by line, in a thread) until a line holds `marker`;
    the lines so far. Fails when the process ends or `timeout` passes first."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    wait_until(
        lambda: found.is_set() or proc.poll() is not None,
        timeout,
        lambda _: f"no {marker!r} on stdout",
        interval=0.05,
    )
    assert found.is_set(), f"the process ended ({proc.returncode}) before {marker!r}: {''.join(lines)}"
    return lines


def catches(pid: int, signum: signal.Signals) -> bool:
    """Whether the process has a handler for `signum` (/proc's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signum - 1) & 1)


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    """The rest of the process's stdout and stderr, once it ended (killed after 120 s)."""
    try:
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_sigterm_is_a_cancelled_row_with_the_steps_so_far(
    tmp_path, workloads_cli_start, tiny_config, token_bin_file
):
    """scancel and the time limit send SIGTERM: the cell records what it did and exits non-zero."""
    config = tiny_config("gpt", steps=10**6, data={"source": "bin", "path": str(token_bin_file)})
    proc, cell = workloads_cli_start(config, tmp_path / "cell")
    seen = lines_until(proc, MEASURING)  # the warm-up and one measured step are done
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = finish(proc)
    assert proc.returncode == 1, stderr[-3000:]
    assert ("".join(seen) + stdout).strip().endswith(": cancelled")
    cell.assert_exact_schemas()
    runs = cell.runs
    assert [r["status"] for r in runs] == ["cancelled"]
    assert "SIGTERM" in runs[0]["error"]
    steps = cell.steps
    assert len(steps) >= config["warmup_steps"] + 1
    assert [s["step"] for s in steps] == list(range(len(steps)))
    assert runs[0]["measured_steps"] == len(steps) - config["warmup_steps"]


def test_time_limit_warning_while_starting_is_a_timeout_row(tmp_path, workloads_cli_start, tiny_config):
    """Slurm's USR2 ahead of the time limit may come while the process still imports torch: it is
    remembered then and recorded as `timeout` (not the silent death USR2's default action is), with
    the job and node it came in (a row without them was seen in CI under load).
    The process is stopped (SIGSTOP) once it catches USR2; while torch is not loaded yet it gets
    the signal, then goes on."""
    config = tiny_config("gpt", steps=10**6)
    job = {"SLURM_JOB_ID": "4242", "SLURM_ARRAY_JOB_ID": None, "SLURM_JOB_PARTITION": "grete:shared"}
    proc, cell = workloads_cli_start(config, tmp_path / "cell", job)
    wait_until(
        lambda: proc.poll() is not None or catches(proc.pid, signal.SIGUSR2),
        120,
        lambda _: "the cell never set its SIGUSR2 handler",
        interval=0.01,
    )
    proc.send_signal(signal.SIGSTOP)
    try:
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "libtorch" not in maps, "torch was loaded before the process could be stopped"
        proc.send_signal(signal.SIGUSR2)  # Python is up, torch not imported yet
    finally:
        proc.send_signal(signal.SIGCONT)
    stdout, stderr = finish(proc)
    assert proc.returncode == 1, stderr[-3000:]
    runs = cell.runs
    assert [r["status"] for r in runs] == ["timeout"] and "SIGUSR2" in runs[0]["error"]
    assert (runs[0]["slurm_job_id"], runs[0]["partition"]) == ("4242", "grete:shared")
    assert runs[0]["hostname"] == socket.gethostname()
    assert cell.steps == []


def test_time_limit_warning_while_compiling_is_a_timeout_row(tmp_path, tiny_config):
    """USR2 that comes while dynamo compiles reaches us wrapped in dynamo's own exception (as
    inductor's InductorError wrapped it on the H100): still `timeout`, not `failed`. A dynamo
    backend that signals its own process makes the signal come during the compile."""
    import os

    import pyarrow.parquet as pq
    import torch._dynamo

    from workloads.cell import catalog
    from workloads.cell.config_io import cell_config_from_dict
    from workloads.run import run_cell

    @torch._dynamo.register_backend(name="time_limit_while_compiling")
    def compile_until_the_time_limit(gm, example_inputs):
        os.kill(os.getpid(), signal.SIGUSR2)  # the cell's handler raises inside the compile
        return gm.forward

    # The registry is read once per process (earlier tests may have read it): read it again.
    catalog.dynamo_backend_names.cache_clear()

    status = run_cell(
        cell_config_from_dict(tiny_config("gpt", "time_limit_while_compiling", steps=3)), tmp_path
    )
    (row,) = pq.read_table(tmp_path / "run.parquet").to_pylist()
    assert status == "timeout" and row["status"] == "timeout", row["error"]
    assert row["error"].startswith("received SIGUSR2")
    assert signal.getsignal(signal.SIGUSR2) is not None  # the handler the test process had is back
