"""`compilebench status SWEEP_DIR [--retry-failed]` and `sweep --wait`: cell states from the
result files, then squeue/sacct; running the failed cells again; following a sweep to its end.

Without Slurm: a real local sweep (one cell completes, one fails, then only that one runs again)
and a directory that is no sweep. With the tests' real local Slurm, no accounting: a submitted
sweep is pending or running, then completed; a job id the scheduler never knew is `lost`;
`--wait` follows a sweep to its end and Ctrl-C leaves its jobs running. With accounting: a job
that failed before its cell wrote a result and one cancelled before it ran, seen through sacct
alone, and `--retry-failed` resubmitting just those two."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd
import pytest

from orchestrator.executors.slurm.packing import place_state, split_place
from orchestrator.executors.slurm.scheduler import expand_job_ids, parse_states
from orchestrator.executors.status import follow
from tests.helpers import TINY, WAIT, as_foreground_job, cli, cli_popen, manifest_jobs, table, wait_until
from tests.helpers.analysis_sweeps import write_cell, write_manifest
from tests.helpers.slurm.cluster import LocalSlurm
from workloads.contract.vocabulary import ERROR_WIDTH

EAGER = [*TINY, "backend=eager"]
JOB_TIMEOUT_S = 300


def test_job_id_and_state_parsing() -> None:
    assert expand_job_ids("12_[0-2,5%2]") == ["12_0", "12_1", "12_2", "12_5"]
    assert expand_job_ids("12_4") == ["12_4"] and expand_job_ids("13") == ["13"]
    assert parse_states("12_[0-1]|PENDING\n13|CANCELLED by 0\n14_0|RUNNING\n14_0|COMPLETED\n") == {
        "12_0": "PENDING",
        "12_1": "PENDING",
        "13": "CANCELLED",
        "14_0": "COMPLETED",
    }
    # sacct after tasks 0 and 1 of an array ran and task 2 was cancelled while pending (seen on Slurm 22.05)
    assert parse_states("15_0|COMPLETED\n15_1|FAILED\n15_[0-2%3]|CANCELLED by 0\n") == {
        "15_0": "COMPLETED",
        "15_1": "FAILED",
        "15_2": "CANCELLED",
    }


def test_a_packed_replicate_has_the_state_of_its_place() -> None:
    """`<task>.<place>`: a running task's place pends until the task gives it the device (task 12_0
    is at place 1), runs while it has it, and is done (`COMPLETED`) once passed; any other task's
    state is its places' (orchestrator/executors/slurm/packing.py)."""
    assert split_place("12_4.2") == ("12_4", 2) and split_place("12_4") == ("12_4", None)
    tasks = {"12_0": "RUNNING", "12_1": "RUNNING", "12_2": "PENDING", "13": "CANCELLED"}
    at = {"12_0": 1}.get  # 12_1 has given no turn yet
    jobs = ["12_0.0", "12_0.1", "12_0.2", "12_1.0", "12_2.3", "13.2", "12_0", "99.0"]
    assert [place_state(job, tasks, at) for job in jobs] == [
        "COMPLETED",
        "RUNNING",
        "PENDING",
        "PENDING",
        "PENDING",
        "CANCELLED",
        "RUNNING",
        None,
    ]


def test_local_sweep_completed_and_failed(tmp_path: Path) -> None:
    short_bin = tmp_path / "short.bin"  # shorter than one block: that cell fails in the workload
    np.arange(10, dtype=np.uint16).tofile(short_bin)
    swept = cli(
        tmp_path, "sweep", *EAGER, "data.source=bin,synthetic", f"data.path={short_bin}", "hydra.sweep.dir=sw"
    )
    assert swept.returncode == 1, swept.stderr

    result = cli(tmp_path, "status", "sw")
    assert result.returncode == 1, result.stderr
    rows = table(result.stdout)
    assert sorted(row["state"] for row in rows.values()) == ["completed", "failed"]
    failed = next(row for row in rows.values() if row["state"] == "failed")
    assert "block_size" in failed["error"] and len(failed["error"]) <= ERROR_WIDTH
    assert all(row["attempts"] == "1" and row["job_id"] == "" for row in rows.values())
    assert {(row["model"], row["size"], row["backend"], row["precision"]) for row in rows.values()} == {
        ("gpt", "tiny", "eager", "fp32")
    }
    assert result.stdout.rstrip().splitlines()[-1] == "2 cell(s): 1 completed, 1 failed"

    as_json = cli(tmp_path, "status", "sw", "--json")
    assert as_json.returncode == 1 and as_json.stderr == ""  # the same exit code as the table
    document = json.loads(as_json.stdout)
    assert document["sweep_dir"] == str(tmp_path / "sw") and document["all_completed"] is False
    assert document["counts"] == {"completed": 1, "failed": 1}
    cells = {cell["cell_id"]: cell for cell in document["cells"]}
    assert set(cells) == set(rows)
    for cell_id, cell in cells.items():
        assert (cell["state"], cell["attempts"], cell["repeats"], cell["job_ids"]) == (
            rows[cell_id]["state"],
            1,
            1,
            [],
        )
        assert {k: cell["axes"][k] for k in ("model", "size", "backend", "precision", "seed")} == {
            "model": "gpt",
            "size": "tiny",
            "backend": "eager",
            "precision": "fp32",
            "seed": 1337,
        }
        assert (cell["error"] or "") == rows[cell_id]["error"]
    assert cli(tmp_path, "status", "sw", "--json", "--retry-failed").returncode == 2

    # The cause goes away (the token file is long enough now): only the failed cell runs again.
    np.random.default_rng(0).integers(0, 50, size=5000).astype(np.uint16).tofile(short_bin)
    retried = cli(tmp_path, "status", "sw", "--retry-failed")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "retrying 1 cell(s): 1 failed" in retried.stdout
    assert re.search(r"^\[1/1\] gpt/tiny/eager/fp32 \(\w+\) \.\.\. completed in", retried.stdout, flags=re.M)
    attempts = {cell: len(pd.read_parquet(tmp_path / "sw" / "cells" / cell / "run.parquet")) for cell in rows}
    assert attempts == {cell: 1 if row["state"] == "completed" else 2 for cell, row in rows.items()}
    assert cli(tmp_path, "status", "sw").returncode == 0


@pytest.mark.parametrize("make", [lambda p: p, lambda p: p / "missing"])
@pytest.mark.parametrize("retry", [[], ["--retry-failed"]])
def test_not_a_sweep_exits_2_with_one_line(tmp_path: Path, make, retry: list[str]) -> None:
    (tmp_path / "something.txt").write_text("x")
    result = cli(tmp_path, "status", str(make(tmp_path)), *retry)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: not a sweep directory: ")


def test_wait_and_dry_run_exclude_each_other(tmp_path: Path) -> None:
    result = cli(tmp_path, "sweep", "cluster=test_slurm", "--dry-run", "--wait", "hydra.sweep.dir=sw")
    assert result.returncode == 2 and result.stdout == "" and not any(tmp_path.iterdir())
    assert result.stderr.strip() == (
        "error: --wait and --dry-run exclude each other: a dry run submits nothing to wait for"
    )


# --- through the real single-node Slurm (no accounting) --------------------------------------


def sweep_with_jobs(sweep: Path, job_ids: list[str]) -> Path:
    """A sweep directory of a manifest alone whose cells were submitted as `job_ids` (no results)."""
    from workloads.contract.schema import MANIFEST_SCHEMA, table_from_rows, write_parquet_atomic
    from workloads.contract.sweep_dir import MANIFEST_FILE

    sweep.mkdir(parents=True)
    rows = [
        {
            "cell_id": f"cell{i:08d}",
            "model": "gpt",
            "size": "tiny",
            "backend": "eager",
            "precision": "fp32",
            "executor": "slurm",
            "job_id": job_id,
        }
        for i, job_id in enumerate(job_ids)
    ]
    write_parquet_atomic(table_from_rows(rows, MANIFEST_SCHEMA), sweep / MANIFEST_FILE)
    return sweep


def test_status_of_a_slurm_sweep(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """Submitted on hold: the first look must see both cells pending; released, they complete."""
    env = slurm_cluster.env()
    submitted = cli(
        tmp_path,
        "sweep",
        "cluster=test_slurm",
        *EAGER,
        "seed=1,2",
        "+cluster.sbatch_extra.hold=true",
        "hydra.sweep.dir=sw",
        env=env,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_ids = set(pd.read_parquet(tmp_path / "sw" / "manifest.parquet")["job_id"])

    def look() -> tuple[subprocess.CompletedProcess, dict[str, dict[str, str]]]:
        result = cli(tmp_path, "status", "sw", env=env, timeout=120)
        assert result.stderr == "", result.stderr  # sacct is disabled here: silently not used
        rows = table(result.stdout)
        assert {row["job_id"] for row in rows.values()} == job_ids
        assert {row["state"] for row in rows.values()} <= {"pending", "running", "completed"}, result.stdout
        assert result.returncode == (0 if {row["state"] for row in rows.values()} == {"completed"} else 1)
        return result, rows

    held, rows = look()
    assert {row["state"] for row in rows.values()} == {"pending"}, held.stdout  # held: certainly still queued
    slurm_cluster.run("scontrol", "release", *sorted(job_ids))
    result, rows = wait_until(
        look,
        JOB_TIMEOUT_S,
        lambda last: f"not completed:\n{last[0].stdout}\n{slurm_cluster.logs()}",
        done=lambda last: last[0].returncode == 0,
        interval=1,
    )
    assert result.stdout.rstrip().endswith("2 cell(s): 2 completed")
    assert all(row["attempts"] == "1" for row in rows.values())

    # A recorded job that the scheduler never knew, and no result: lost.
    sweep = sweep_with_jobs(tmp_path / "other", ["999999"])
    result = cli(tmp_path, "status", str(sweep), env=env, timeout=60)
    assert result.returncode == 1 and result.stderr == ""
    (row,) = table(result.stdout).values()
    assert (row["job_id"], row["state"]) == ("999999", "lost")
    assert re.search(r"1 cell\(s\): 1 lost$", result.stdout.rstrip())


def progress_lines(text: str) -> list[str]:
    """The lines `--wait` printed while following, e.g. `[5s] 1 running`."""
    return re.findall(r"^\[\d+(?:s|m\d\ds)\] .+$", text, flags=re.M)


def start_waiting(
    cwd: Path, args: list[str], env: dict[str, str], out: TextIO, log: Path
) -> subprocess.Popen:
    """`compilebench ARGS` (a `--wait`) started as a shell's foreground job, its stdout to `out`
    (the file `log`), once it has printed its first look at the queue."""
    proc = cli_popen(
        cwd, *args, env=env, stdout=out, stderr=subprocess.PIPE, text=True, preexec_fn=as_foreground_job
    )
    wait_until(
        lambda: proc.poll() is not None or progress_lines(log.read_text()),
        120,
        lambda _: f"no progress line: {log.read_text()}",
        interval=0.2,
    )
    return proc


def cli_on_terminal(cwd: Path, *args: str, env: dict[str, str]) -> tuple[int, str]:
    """The command line with its stdout on a pseudo-terminal (as in an interactive shell): exit
    code and everything it wrote there."""
    master, slave = pty.openpty()
    proc = cli_popen(cwd, *args, env=env, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(slave)
    output = b""
    end = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < end:
        if select.select([master], [], [], 1)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed its side
                chunk = b""
            if not chunk:
                break
            output += chunk
    os.close(master)
    return proc.wait(timeout=60), output.decode()


def test_wait_follows_the_sweep_and_ctrl_c_leaves_the_jobs(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """No accounting (sacct refuses): `--wait` still ends. Ctrl-C stops the waiting, not the job
    (held, so certainly still queued when the signal comes); once released, running the sweep
    again with --wait submits nothing and follows the same job to its end, its first look at once
    and then one every `--poll` seconds. The job carries the sweep's name."""
    env = slurm_cluster.env()
    poll = 2
    args = [
        "sweep",
        "cluster=test_slurm",
        *EAGER,
        "+cluster.sbatch_extra.hold=true",
        "hydra.sweep.dir=sw",
        "--wait",
        "--poll",
        str(poll),
    ]
    log = tmp_path / "wait.log"
    with open(log, "w") as out:
        proc = start_waiting(tmp_path, args, env, out, log)
        assert proc.poll() is None, log.read_text()
        (job_id,) = pd.read_parquet(tmp_path / "sw" / "manifest.parquet")["job_id"]
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert progress_lines(log.read_text())[0].startswith("[0s] "), log.read_text()  # the first look at once
    assert (
        f"stopped waiting; the jobs keep running. Check them with: compilebench status {tmp_path / 'sw'}"
        in stderr
    )
    assert progress_lines(log.read_text())[-1].endswith("] 1 pending")
    shown = slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    assert "JobState=PENDING" in shown and "Reason=JobHeldUser" in shown, shown  # not cancelled
    queued = dict(
        line.split() for line in slurm_cluster.run("squeue", "-h", "-o", "%i %j").stdout.splitlines()
    )
    assert queued.get(job_id) == "compilebench-sw", queued  # named after the sweep

    slurm_cluster.run("scontrol", "release", job_id)
    code, shown = cli_on_terminal(tmp_path, *args, env=env)
    assert code == 0, shown
    assert "nothing to submit: 1 cell(s) completed or still queued" in shown
    # On a terminal the count is one line rewritten in place (carriage return, erase to its end).
    looks = re.findall(r"\r\[(\d+)s\] ([^\r\n]*?)\x1b\[K", shown)
    counts = [count for _, count in looks]
    assert counts and counts[-1] == "1 completed" and set(counts[:-1]) <= {"1 pending", "1 running"}, shown
    seconds = [int(elapsed) for elapsed, _ in looks]
    assert seconds[0] == 0 and all(b - a >= poll for a, b in zip(seconds, seconds[1:])), shown
    assert shown.rstrip().endswith("1 cell(s): 1 completed")
    assert pd.read_parquet(tmp_path / "sw" / "manifest.parquet")["job_id"].tolist() == [job_id]


def not_running(pid: int) -> bool:
    """Whether the process is gone or a zombie (killed, its exit not yet collected by whoever
    inherited it when its parent ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def hanging_squeue(directory: Path, real: str) -> Path:
    """A `squeue` for PATH that runs the real one until `directory/hang` exists, then writes its pid
    to `directory/pid` and never answers (a controller that has stopped responding)."""
    directory.mkdir()
    script = directory / "squeue"
    script.write_text(
        f"#!/bin/sh\nif [ -e {directory}/hang ]; then echo $$ > {directory}/pid; exec sleep 100000; fi\n"
        f'exec {real} "$@"\n'
    )
    script.chmod(0o755)
    return directory


def test_ctrl_c_stops_the_waiting_while_squeue_hangs(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    """Ctrl-C while `--wait` waits for a squeue that does not answer ends it at once: exit 130, the
    one line, no further look (the query's own 10 s timeout was not waited out), and the hung
    squeue is killed rather than left behind."""
    env = slurm_cluster.env()
    fake = hanging_squeue(tmp_path / "bin", slurm_cluster.install.command("squeue"))
    env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"
    args = [
        "sweep",
        "cluster=test_slurm",
        *EAGER,
        "+cluster.sbatch_extra.hold=true",
        "hydra.sweep.dir=sw",
        "--wait",
        "--poll",
        "1",
    ]
    log = tmp_path / "wait.log"
    try:
        with open(log, "w") as out:
            proc = start_waiting(tmp_path, args, env, out, log)
            (fake / "hang").touch()
            wait_until(
                lambda: proc.poll() is not None or (fake / "pid").exists() and (fake / "pid").read_text(),
                120,
                lambda _: "squeue was not asked again",
                interval=0.2,
            )
            looks = progress_lines(log.read_text())
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 130, stderr
        assert "stopped waiting; the jobs keep running" in stderr
        assert progress_lines(log.read_text()) == looks and "unknown" not in log.read_text()
        # SIGKILL takes effect when the killed process next runs: on a busy host, after the orchestrator
        # has exited (seen once in a run of 113 tests). Killed means gone or a zombie, soon; a squeue
        # left hanging stays sleeping, and this fails.
        hung = int((fake / "pid").read_text())
        wait_until(lambda: not_running(hung), 30, lambda _: f"the hung squeue {hung} is still running")
    finally:
        (fake / "hang").unlink(missing_ok=True)
        if (tmp_path / "sw" / "manifest.parquet").exists():
            slurm_cluster.run("scancel", *manifest_jobs(tmp_path / "sw").values())


# --- through the real single-node Slurm with accounting ---------------------------------------


def wait_for_states(cwd: Path, env: dict[str, str], expected: dict[str, str]) -> dict[str, dict[str, str]]:
    """Poll `status` until every cell has its expected state (sacct learns of a job's end a
    moment after it ended); returns the table."""

    def look() -> dict[str, dict[str, str]]:
        result = cli(cwd, "status", "sw", env=env, timeout=120)
        assert result.stderr == "", result.stderr
        return table(result.stdout)

    return wait_until(
        look,
        JOB_TIMEOUT_S,
        lambda rows: f"states {rows}, expected {expected}",
        interval=1,
        done=lambda rows: {cell: row["state"] for cell, row in rows.items()} == expected,
    )


def test_sacct_states_and_retry_failed(slurm_cluster_accounting: LocalSlurm, tmp_path: Path) -> None:
    """Three cells submitted on hold: one runs and completes, one fails before its workload could
    write a result (its config is gone), one is cancelled before it ran. `status` tells them apart
    through sacct; `--retry-failed` resubmits the two, and only them, with the sweep's profile."""
    cluster = slurm_cluster_accounting
    env = cluster.env()
    args = [
        "sweep",
        "cluster=test_slurm",
        *EAGER,
        "seed=1,2,3",
        "+cluster.sbatch_extra.hold=true",
        "hydra.sweep.dir=sw",
    ]
    submitted = cli(tmp_path, *args, env=env)
    assert submitted.returncode == 0, submitted.stderr
    first_jobs = manifest_jobs(tmp_path / "sw")
    done, broken, cancelled = first_jobs
    config = tmp_path / "sw" / "cells" / broken / "config.yaml"
    config_text = config.read_text()
    config.unlink()
    # Released first: that splits the two tasks off the array's pending record, and the task left
    # in it, cancelled then, keeps a record of its own (cancelled while it still shared the record,
    # it would leave none, in squeue or sacct: `lost`).
    cluster.run("scontrol", "release", f"{first_jobs[done]},{first_jobs[broken]}")
    cluster.run("scancel", first_jobs[cancelled])

    expected = {done: "completed", broken: "failed", cancelled: "cancelled"}
    rows = wait_for_states(tmp_path, env, expected)
    # squeue run for another user lists none of these jobs: what status sees once the controller
    # has forgotten them (MinJobAge, 5 minutes here), so the states below come from sacct alone.
    rows_from_sacct = wait_for_states(tmp_path, {**env, "USER": "nobody", "LOGNAME": "nobody"}, expected)
    for view in (rows, rows_from_sacct):
        assert (view[broken]["error"], view[broken]["attempts"]) == ("job FAILED, no result (see logs/)", "0")
        assert (view[cancelled]["error"], view[cancelled]["attempts"]) == (
            "job CANCELLED, no result (see logs/)",
            "0",
        )
        assert (view[done]["job_id"], view[done]["attempts"]) == (first_jobs[done], "1")

    config.write_text(config_text)  # the cause goes away
    retried = cli(tmp_path, "status", "sw", "--retry-failed", env=env)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert "retrying 2 cell(s): 1 failed, 1 cancelled" in retried.stdout
    jobs = manifest_jobs(tmp_path / "sw")
    assert jobs[done] == first_jobs[done] and jobs[broken] != first_jobs[broken]
    array = jobs[broken].split("_")[0]
    assert sorted([jobs[broken], jobs[cancelled]]) == [f"{array}_0", f"{array}_1"]  # one array of two
    assert f"submitted {array}_[0-1]: 2 cell(s) on grete:shared" in retried.stdout
    assert (
        "Reason=JobHeldUser" in cluster.run("scontrol", "show", "job", jobs[broken]).stdout
    )  # the sweep's profile

    again = cli(tmp_path, "status", "sw", "--retry-failed", env=env)  # queued now: not submitted twice
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        "nothing to retry: no cell is failed, oom, timeout, cancelled, not_compiled, lost or not run"
        in again.stdout
    )
    assert manifest_jobs(tmp_path / "sw") == jobs

    cluster.run("scontrol", "release", array)
    waited = cli(tmp_path, *args, *WAIT, env=env)  # the same sweep: nothing to submit, then follow it
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "nothing to submit: 3 cell(s) completed or still queued" in waited.stdout
    lines = progress_lines(waited.stdout)
    assert lines and lines[-1].endswith("] 3 completed"), waited.stdout
    assert waited.stdout.rstrip().endswith("3 cell(s): 3 completed")
    attempts = {cell: len(pd.read_parquet(tmp_path / "sw" / "cells" / cell / "run.parquet")) for cell in jobs}
    assert attempts == {done: 1, broken: 1, cancelled: 1}  # the completed cell never ran again
    assert cli(tmp_path, "status", "sw", env=env).returncode == 0


def test_follow_writes_to_the_stdout_of_its_call(tmp_path: Path) -> None:
    """`follow` (like `run_replicates` and `submit`) prints to sys.stdout as it is when called, so that a
    caller that redirects it gets the lines: a default bound when the module was imported would
    write to whatever sys.stdout was then."""
    write_cell(tmp_path, "e", "eager", step_ms=[1.0, 1.0])
    write_manifest(tmp_path, [{"cell_id": "e"}])
    caught = io.StringIO()
    with contextlib.redirect_stdout(caught):
        rows = follow(tmp_path, interval_s=0)
    assert [row.state for row in rows] == ["completed"]
    assert caught.getvalue() == "[0s] 1 completed\n"
