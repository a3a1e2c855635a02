"""The local executor's turns on one device (workloads/local/turns.py), with real processes: the one
started ahead waits for its turn, the one measuring waits while another imports, and a process
that died while importing is not waited for."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import wait_until
from workloads.local import turns

#: A process of the protocol: it "imports" until the file `imported` appears, then takes its
#: turn, then waits for quiet before "measuring", writing a file at each point it reaches.
CHILD = """
import sys, time
from pathlib import Path
from workloads.local import turns
here = Path(sys.argv[1])
while not (here / "imported").exists():
    time.sleep(0.02)
turns.done_importing()
turns.wait_for_turn()
(here / "turn").touch()
(here / "measuring").write_text(str(turns.wait_for_quiet()))
"""


def _start(directory: Path, index: int, workdir: Path) -> subprocess.Popen:
    marker = directory / f"{turns.IMPORTING_PREFIX}{index}"
    marker.touch()
    env = {turns.DIR_ENV: str(directory), turns.INDEX_ENV: str(index), "PYTHONPATH": str(Path.cwd())}
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(workdir)], env=env)
    marker.write_text(str(process.pid))
    return process


def _give(directory: Path, index: int) -> None:
    (directory / turns.TURN_FILE).write_text(str(index))


def _reaches(path: Path) -> None:
    wait_until(path.exists, 60, lambda _: f"{path} never appeared", done=bool, interval=0.05)


def test_turns_keep_one_process_on_the_device_and_quiet_while_it_measures(tmp_path: Path) -> None:
    directory, first, second = tmp_path / "turns", tmp_path / "first", tmp_path / "second"
    for path in (directory, first, second):
        path.mkdir()
    one = _start(directory, 0, first)
    two = _start(directory, 1, second)  # started ahead: it imports while the first runs
    try:
        (first / "imported").touch()
        _give(directory, 0)
        _reaches(first / "turn")
        time.sleep(0.5)  # the second keeps importing a while after the first had its turn
        assert not (second / "turn").exists()
        assert not (first / "measuring").exists()  # it waits for quiet
        (second / "imported").touch()
        _reaches(first / "measuring")
        assert one.wait(60) == 0
        assert not (second / "turn").exists()  # done importing, the device not yet its own
        _give(directory, 1)
        _reaches(second / "measuring")  # nobody importing: no wait (QUIET_TIMEOUT_S is 600 s)
        assert two.wait(60) == 0
    finally:
        for process in (one, two):
            process.kill()


def test_a_process_that_died_importing_is_not_waited_for(tmp_path: Path) -> None:
    directory, first, dead = tmp_path / "turns", tmp_path / "first", tmp_path / "dead"
    for path in (directory, first, dead):
        path.mkdir()
    one = _start(directory, 0, first)
    (first / "imported").touch()
    _give(directory, 0)
    _reaches(first / "turn")
    gone = _start(directory, 1, dead)
    try:
        gone.kill()
        gone.wait()  # reaped: its marker stays, naming a process that no longer exists
        assert (directory / f"{turns.IMPORTING_PREFIX}1").exists()
        _reaches(first / "measuring")
        assert one.wait(60) == 0
    finally:
        one.kill()


def test_without_an_executor_nothing_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s without an executor")

    monkeypatch.setattr(turns.time, "sleep", never)
    assert not turns.taking_turns()
    turns.wait_for_turn()
    turns.wait_for_quiet()
    turns.done_importing()


#: A process that has measured: it hands the device over, then "exits" until the file `exit` appears.
LEAVING_CHILD = """
import sys, time
from pathlib import Path
from workloads.local import turns
here = Path(sys.argv[1])
turns.done_importing()
turns.wait_for_turn()
turns.hand_over()
while not (here / "exit").exists():
    time.sleep(0.02)
"""


def test_the_next_may_start_while_one_exits_but_measures_only_once_it_is_gone(tmp_path: Path) -> None:
    directory, leaving, next_one = tmp_path / "turns", tmp_path / "leaving", tmp_path / "next"
    for path in (directory, leaving, next_one):
        path.mkdir()
    env = {turns.DIR_ENV: str(directory), turns.INDEX_ENV: "0", "PYTHONPATH": str(Path.cwd())}
    one = subprocess.Popen([sys.executable, "-c", LEAVING_CHILD, str(leaving)], env=env)
    two = _start(directory, 1, next_one)
    try:
        (next_one / "imported").touch()
        _give(directory, 0)
        _reaches(directory / f"{turns.LEAVING_PREFIX}0")  # handed over, still running
        assert (directory / f"{turns.LEAVING_PREFIX}0").read_text() == str(one.pid) and one.poll() is None
        _give(directory, 1)
        _reaches(next_one / "turn")
        time.sleep(0.5)  # the first keeps exiting a while after the next had its turn
        assert not (next_one / "measuring").exists()  # not while the other exits
        (leaving / "exit").touch()
        assert one.wait(60) == 0
        _reaches(next_one / "measuring")
        assert two.wait(60) == 0
    finally:
        for process in (one, two):
            process.kill()
