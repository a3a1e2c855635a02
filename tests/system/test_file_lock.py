"""The manifest lock where the filesystem refuses flock (Lustre or NFS without `-o flock`):
workloads/contract/file_lock.py falls back to a lock file made with link(), and breaks a stale one.

The refusal is forced: in each process `fcntl.flock` raises EOPNOTSUPP, as on such a mount (no
filesystem refusing flock could be mounted here: see docs/testing.md). Real processes write one
manifest at once; a holder killed with SIGKILL leaves its lock file behind, which the next writer
breaks; a lock file of another host is broken only once older than the bound.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import REPO_ROOT, wait_until
from workloads.contract import file_lock
from workloads.contract.sweep_dir import MANIFEST_LOCK, write_manifest

#: Prepended to each child's code: flock refused as by a filesystem without it.
REFUSE_FLOCK = textwrap.dedent("""
    import errno, fcntl
    def refused(fd, operation):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    fcntl.flock = refused
""")


def refuse_flock(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(fd, operation):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(fcntl, "flock", refused)


def child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", REFUSE_FLOCK + textwrap.dedent(code), *args],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def rows(writer: str, count: int) -> list[dict]:
    return [
        {"cell_id": f"{writer}-{i:03d}", "model": "gpt", "executor": "slurm", "job_id": str(i)}
        for i in range(count)
    ]


WRITER = """
    import sys, time
    from pathlib import Path
    from workloads.contract.sweep_dir import write_manifest
    sweep, name, times, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    while not start.exists():  # all writers begin together
        time.sleep(0.01)
    for count in range(1, times + 1):  # each write adds one row of this writer's to the merged manifest
        write_manifest(sweep, [{"cell_id": f"{name}-{i:03d}", "model": "gpt", "executor": "slurm",
                                "job_id": str(i)} for i in range(count)])
"""


def test_writers_without_flock_keep_every_row(tmp_path: Path) -> None:
    """Four processes merge rows into one manifest at once, 25 times each, under the lock file: a
    lost update (two read-merge-writes overlapping) would drop another writer's rows."""
    sweep, start, writers, times = tmp_path / "sw", tmp_path / "start", 4, 25
    procs = [child(WRITER, str(sweep), f"w{n}", str(times), str(start)) for n in range(writers)]
    start.touch()
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "warning" not in err, err  # nobody's lock was broken: each holder was alive and quick
    manifest = pd.read_parquet(sweep / "manifest.parquet")
    expected = sorted(row["cell_id"] for n in range(writers) for row in rows(f"w{n}", times))
    assert sorted(manifest["cell_id"]) == expected
    # The lock file was used and is gone; flock's file is there (it was opened to try flock).
    assert sorted(p.name for p in sweep.iterdir() if p.name.startswith(".manifest.lock")) == [MANIFEST_LOCK]


def test_lock_of_a_killed_holder_is_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    sweep = tmp_path / "sw"
    holder = child(
        """
        import sys, time
        from pathlib import Path
        from workloads.contract.sweep_dir import manifest_lock
        with manifest_lock(Path(sys.argv[1])):
            Path(sys.argv[2]).touch()
            time.sleep(600)  # killed here, holding the lock
    """,
        str(sweep),
        str(tmp_path / "held"),
    )
    lock = file_lock.lock_file_of(sweep / MANIFEST_LOCK)
    wait_until(
        lambda: (tmp_path / "held").exists() or holder.poll() is not None,
        120,
        lambda _: "the holder never took the lock",
    )
    assert holder.poll() is None, holder.communicate()
    assert json.loads(lock.read_text())["pid"] == holder.pid
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=60)  # reaped: its pid is gone

    refuse_flock(monkeypatch)
    write_manifest(sweep, rows("after", 2))
    err = capsys.readouterr().err
    assert err == (
        f"warning: broke the stale lock {lock}: its holder, process {holder.pid} on "
        f"{socket.gethostname()}, is gone\n"
    )
    assert list(pd.read_parquet(sweep / "manifest.parquet")["cell_id"]) == ["after-000", "after-001"]
    assert not lock.exists()


def test_lock_of_another_host_is_broken_only_after_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Whether a process on another node lives cannot be asked: its lock is waited for until it is
    older than the bound (here 2 s; STALE_AFTER_S in use)."""
    lock_name = tmp_path / "x.lock"
    lock = file_lock.lock_file_of(lock_name)
    lock.write_text(json.dumps({"host": "node-that-crashed", "pid": 4242, "token": "t"}))
    refuse_flock(monkeypatch)
    written = lock.stat().st_mtime
    with file_lock.exclusive(lock_name, stale_after_s=2):
        waited = time.time() - written
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert waited > 2  # not broken before it was older than the bound
    err = capsys.readouterr().err
    assert err.startswith(f"warning: broke the stale lock {lock}: held for ")
    assert err.endswith(" s (more than 2 s) by process 4242 on node-that-crashed\n")
    assert not lock.exists()


def test_a_live_holder_here_is_waited_for(tmp_path: Path) -> None:
    """This process holds a fresh lock file: it is not stale, whatever the bound's distance."""
    lock = tmp_path / "x.lock.held"
    me = file_lock.Holder.me()
    lock.write_text(json.dumps({"host": me.host, "pid": me.pid, "token": me.token}))
    assert file_lock.read_holder(lock) == me
    assert file_lock.stale(lock, me, stale_after_s=60) is None
    old = time.time() - 61
    os.utime(lock, (old, old))
    assert file_lock.stale(lock, me, stale_after_s=60).startswith("held for 61 s (more than 60 s)")


def test_flock_where_it_works_and_other_errors_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with file_lock.exclusive(tmp_path / "x.lock"):
        assert not file_lock.lock_file_of(tmp_path / "x.lock").exists()  # flock works here: no lock file

    def broken(fd, operation):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError, match="Input/output error"):
        with file_lock.exclusive(tmp_path / "x.lock"):
            pass
