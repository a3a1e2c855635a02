"""Taking turns on one device with the replicate started ahead (the local executor's overlap).

Starting a cell's process costs seconds before it touches the GPU — the interpreter, torch,
the model's library (timm) — and ending one costs about a second more (CUDA's teardown, compile
workers); a local sweep runs dozens of such processes one after another. The local executor
(orchestrator/executors/local.py) therefore starts the next replicates' processes while the current one
runs, and gives the next its turn as soon as the current one has written its results. They take
turns through files in a directory the executor owns (named by COMPILEBENCH_TURNS, this
process's turn by COMPILEBENCH_TURN):

- `turn` holds the index of the process whose turn it is on the device; the executor writes it
  when the previous process has handed over (or exited). A process imports what it needs, then
  makes its CUDA context, then `wait_for_turn()` before it builds anything.
- `importing.<index>` exists while process <index> still imports (the executor creates it, then
  writes the process id into it); the process removes it in `done_importing()`.
- `leaving.<index>` holds the id of process <index> once it has written its results and freed
  its cached device memory (`hand_over()`); it exits after that, and the executor removes the
  file when it has.
- The process whose turn it is calls `wait_for_quiet()` before its last warm-up step (after its
  compile), so that no other process imports or exits — CPU and file system busy — while it
  measures; a process that died is not waited for.

Without COMPILEBENCH_TURNS (Slurm jobs, `python -m workloads.run` by hand) every call is a no-op.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from workloads.contract.atomic import atomic_output
from workloads.contract.file_lock import process_alive

DIR_ENV = "COMPILEBENCH_TURNS"
INDEX_ENV = "COMPILEBENCH_TURN"
TURN_FILE = "turn"
IMPORTING_PREFIX = "importing."
LEAVING_PREFIX = "leaving."
#: How often a waiting process looks at the directory (a stat or two: negligible next to a step).
POLL_S = 0.05
#: A process importing (or exiting) for longer than this is stuck: measure anyway rather than hang.
QUIET_TIMEOUT_S = 600.0


def _directory() -> tuple[Path, str] | None:
    directory, index = os.environ.get(DIR_ENV), os.environ.get(INDEX_ENV)
    return (Path(directory), index) if directory and index else None


def taking_turns() -> bool:
    """Whether this process was started by an executor that takes turns (else all is a no-op)."""
    return _directory() is not None


def done_importing() -> None:
    """This process has imported what it needs: the one measuring may go on."""
    if found := _directory():
        directory, index = found
        (directory / f"{IMPORTING_PREFIX}{index}").unlink(missing_ok=True)


def hand_over() -> None:
    """This process is done with the device (results written, cached memory freed): the next may
    start on it while this one exits."""
    if found := _directory():
        directory, index = found
        with atomic_output(directory / f"{LEAVING_PREFIX}{index}") as fh:  # never seen without its pid
            fh.write(str(os.getpid()).encode())


def wait_for_turn() -> float:
    """Block until it is this process's turn on the device; returns the seconds waited. Exits
    if the executor is gone (killed: nobody would ever give the turn)."""
    start = time.monotonic()
    if found := _directory():
        directory, index = found
        parent = os.getppid()
        while _read(directory / TURN_FILE) != index:
            if os.getppid() != parent or not directory.is_dir():
                raise SystemExit("compilebench: the sweep that started this process is gone; cell not run")
            time.sleep(POLL_S)
    return time.monotonic() - start


def wait_for_quiet() -> float:
    """Block until no other process of this executor is importing or exiting; returns the
    seconds waited."""
    start = time.monotonic()
    if found := _directory():
        directory, _ = found
        while _busy(directory) and time.monotonic() - start < QUIET_TIMEOUT_S:
            time.sleep(POLL_S)
    return time.monotonic() - start


def _busy(directory: Path) -> bool:
    """Whether a live process still imports or exits (a marker without a pid yet counts as one)."""
    for marker in (*directory.glob(f"{IMPORTING_PREFIX}*"), *directory.glob(f"{LEAVING_PREFIX}*")):
        pid = _read(marker)
        if pid is None:
            continue  # removed since the glob
        if not pid or process_alive(int(pid)):
            return True
    return False


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None
