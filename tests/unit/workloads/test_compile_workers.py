"""workloads/instruments/compile_workers.py: the cell waits for its own compile workers to go idle before
measuring, against real child processes that spin and sleep, started from a compile_worker/__main__.py
as inductor starts its side process, and a spinning child that is no compile worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import take_turn_ahead
from workloads.instruments.compile_workers import (
    IDLE_CPUS,
    QUIET_POLLS,
    CompileWorkersIdle,
    compile_workers_cpu_s,
    wait_until_idle,
)

#: A worker that spins until told to stop, then says so and sleeps until killed: idle, still alive.
SPIN_THEN_SLEEP = """
import sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
while not stop.is_set():
    pass
print("stopped", flush=True)
time.sleep(600)
"""
SLEEP = "import time; time.sleep(600)"
#: The cell (a process of its own, so that the test's other children are none of its): it starts one
#: child running the script named in its environment (not on its own command line, which would then
#: name a compile worker), on the cell's stdin and stdout, says the child's pid and sleeps.
CELL = """
import os, subprocess, sys, time
print(subprocess.Popen([sys.executable, os.environ["CHILD_SCRIPT"]]).pid, flush=True)
time.sleep(600)
"""


@pytest.fixture
def start_cell(tmp_path: Path):
    """start_cell(code, worker=True) -> (cell, child pid): the child runs `code` from
    _inductor/compile_worker/__main__.py (else from loader.py); both are killed at the end."""
    started: list[tuple[subprocess.Popen, int]] = []

    def start(code: str, worker: bool = True) -> tuple[subprocess.Popen, int]:
        script = (
            tmp_path / str(len(started)) / ("_inductor/compile_worker/__main__.py" if worker else "loader.py")
        )
        script.parent.mkdir(parents=True)
        script.write_text(code)
        cell = subprocess.Popen(
            [sys.executable, "-c", CELL],
            env={**os.environ, "CHILD_SCRIPT": str(script)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append((cell, int(cell.stdout.readline())))
        return started[-1]

    yield start
    for cell, child in started:
        os.kill(child, signal.SIGKILL)
        cell.kill()
        cell.wait()


def test_compile_workers_are_found_other_children_are_not(start_cell) -> None:
    cell, worker = start_cell(SLEEP)
    assert len(compile_workers_cpu_s(cell.pid)) == 1
    assert len(compile_workers_cpu_s(os.getpid())) == 1  # a grandchild, found through the cell
    assert compile_workers_cpu_s(worker) == []
    loader_cell, _ = start_cell(SLEEP, worker=False)
    assert compile_workers_cpu_s(loader_cell.pid) == []


def test_no_compile_workers_no_wait(start_cell) -> None:
    """A busy child that is no compile worker (a DataLoader's) is not waited for."""
    cell, _ = start_cell(SPIN_THEN_SLEEP, worker=False)
    polls: list[float] = []
    wait_until_idle(cell.pid, on_poll=polls.append)
    assert polls == []


def test_the_wait_lasts_while_a_worker_works_and_ends_once_it_sleeps(start_cell) -> None:
    cell, _ = start_cell(SPIN_THEN_SLEEP)
    polls: list[float] = []

    def on_poll(cpus: float) -> None:
        polls.append(cpus)
        if len(polls) == QUIET_POLLS + 2:  # seen working for longer than the quiet it needs
            cell.stdin.write("stop\n")
            cell.stdin.flush()

    waited, _ = wait_until_idle(cell.pid, on_poll=on_poll)
    # The wait outlasted the work: it saw the worker busy until told to stop. Asserted before reading
    # the worker's "stopped", which a worker never told to stop would never write (the read would hang).
    assert len(polls) > QUIET_POLLS + 2, f"the wait ended while the worker spun: {polls}"
    assert cell.stdout.readline().strip() == "stopped"
    assert all(cpus > IDLE_CPUS for cpus in polls[: QUIET_POLLS + 2])
    assert all(cpus <= IDLE_CPUS for cpus in polls[-QUIET_POLLS:])
    assert len(compile_workers_cpu_s(cell.pid)) == 1  # it did not wait for the worker's exit: idle is enough
    instrument = CompileWorkersIdle(root=cell.pid)
    instrument.before_measuring()  # the worker sleeps: a short wait, and a window opened
    row = instrument.after_loop()
    assert 0 <= row["compile_workers_wait_s"] < waited and 0 <= row["compile_workers_cpus"] <= IDLE_CPUS


def test_a_window_never_opened() -> None:
    assert CompileWorkersIdle().after_loop() == {"compile_workers_wait_s": None, "compile_workers_cpus": None}


@pytest.mark.parametrize("backend", ["inductor", "eager"])
def test_a_cpu_replicate_started_ahead_starts_no_compile_workers(
    backend: str, tiny_config, tmp_path: Path
) -> None:
    """On the CPU inductor compiles C++ in the cell's process: no pool is started ahead for it
    (tests/gpu/test_gpu_tier.py starts one for a CUDA cell)."""
    assert take_turn_ahead(tiny_config("gpt", backend), tmp_path) == (0, 0.0)


def test_inductors_compile_workers_started_by_hand_are_waited_for() -> None:
    """The one private inductor API used, for real: `start_compile_workers` starts inductor's pool (on
    the CPU too, where its compile would not), and the wait ends once the pool has imported torch (its
    CPU time says so). Needs 2 CPUs: inductor starts no pool for one compile thread."""
    code = (
        "import os\n"
        "from workloads.instruments.compile_workers import compile_workers_cpu_s, start_compile_workers, "
        "wait_until_idle\n"
        "start_compile_workers()\n"
        "found = len(compile_workers_cpu_s(os.getpid()))\n"
        "wait_until_idle(os.getpid())\n"
        "print(found, sum(compile_workers_cpu_s(os.getpid())))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found, cpu_s = done.stdout.split()
    assert int(found) >= 1 and float(cpu_s) >= 0.2  # torch imported: 1-3 s of CPU on these machines
