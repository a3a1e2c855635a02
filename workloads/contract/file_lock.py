"""An exclusive lock on a shared file that also works where `flock` does not.

`flock` is the lock of choice: the kernel drops it when its holder dies. Sweep directories often
lie on Lustre or NFS scratch, where flock fails with ENOSYS, EOPNOTSUPP or ENOLCK unless the
filesystem is mounted with `-o flock`. There the lock is a lock file instead, `<path>.held`,
created atomically with `link()` (atomic on NFS too, unlike O_EXCL on old NFS clients): it holds
its holder's host, pid and a token. A lock file outlives a holder that died, so a waiter breaks
it, with a warning, when the holder's process is gone on this host, or when the file is older
than `STALE_AFTER_S` (a holder on another host cannot be asked whether it lives).

Not covered: a directory that one client locks with a working flock while another client of the
same directory gets no flock (mounts that differ per node) — those two do not see each other.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

#: What flock answers on a filesystem that does not support it (Lustre without `-o flock`, NFS
#: without a lock manager, some FUSE filesystems).
NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOLCK})
#: A lock file older than this is broken whoever holds it. The locks here guard one
#: read-merge-write of a small file (seconds even for a 10,000-cell manifest on a slow
#: filesystem): a holder still at it after five minutes hangs, or died on another host.
STALE_AFTER_S = 300.0
#: Say once that we wait, after this long, so that a user sees why the command sits there.
ANNOUNCE_WAIT_S = 10.0


@dataclass(frozen=True)
class Holder:
    """Who holds a lock file: its content."""

    host: str
    pid: int
    token: str

    @classmethod
    def me(cls) -> Holder:
        return cls(socket.gethostname(), os.getpid(), uuid.uuid4().hex)

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}"


@contextlib.contextmanager
def exclusive(path: Path, stale_after_s: float = STALE_AFTER_S) -> Iterator[None]:
    """Hold an exclusive lock named `path` while inside: flock on `path`, or, where the
    filesystem refuses flock, the lock file `<path>.held` (see the module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        flocked = True
    except OSError as exc:
        if exc.errno not in NO_FLOCK:
            handle.close()
            raise
        flocked = False
    if flocked:
        try:
            yield
        finally:
            handle.close()
        return
    handle.close()
    lock = lock_file_of(path)
    me = Holder.me()
    _acquire(lock, me, stale_after_s)
    try:
        yield
    finally:
        _release(lock, me)


def lock_file_of(path: Path) -> Path:
    """The lock file used for `path` where flock is refused."""
    return Path(path).with_name(Path(path).name + ".held")


def _acquire(lock: Path, me: Holder, stale_after_s: float) -> None:
    """Link a file naming `me` to `lock`, waiting for (or breaking) the holder before us."""
    mine = lock.with_name(f"{lock.name}.{me.host}.{me.pid}.{me.token}")
    mine.write_text(json.dumps(asdict(me)))
    began, announced, delay = time.monotonic(), False, 0.01
    try:
        while True:
            with contextlib.suppress(FileExistsError):
                os.link(mine, lock)
            if os.stat(mine).st_nlink >= 2:  # linked (an NFS retry may answer EEXIST to a link that was made)
                return
            holder = read_holder(lock)
            why = stale(lock, holder, stale_after_s) if holder is not None else None
            if why is not None:
                _break(lock, holder, why)
                continue
            if not announced and time.monotonic() - began > ANNOUNCE_WAIT_S and holder is not None:
                print(
                    f"waiting for the lock {lock}, held by {holder.describe()} "
                    f"(broken once older than {stale_after_s:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
                announced = True
            time.sleep(delay)
            delay = min(2 * delay, 0.5)
    finally:
        mine.unlink(missing_ok=True)


def read_holder(lock: Path) -> Holder | None:
    """Who holds the lock file; None when there is none (released meanwhile). A file that does
    not parse (written by hand, or cut short by a broken filesystem) has an unknown holder, and
    is broken once older than the bound."""
    try:
        text = lock.read_text()
    except FileNotFoundError:
        return None
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):
        return Holder("?", 0, text[:40])


def stale(lock: Path, holder: Holder, stale_after_s: float) -> str | None:
    """Why the lock file of `holder` may be broken, or None while it must be waited for."""
    if holder.host == socket.gethostname() and not process_alive(holder.pid):
        return f"its holder, {holder.describe()}, is gone"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    if age > stale_after_s:
        return f"held for {age:.0f} s (more than {stale_after_s:.0f} s) by {holder.describe()}"
    return None


def process_alive(pid: int) -> bool:
    """A running process of this host (an exited one that its parent has not reaped yet, a zombie,
    is not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: alive as far as we can tell


def _break(lock: Path, holder: Holder, why: str) -> None:
    """Remove the stale lock file of `holder`. Renamed aside first, then checked: if another
    waiter broke it and took the lock between our look and the rename, that new lock is put back."""
    aside = lock.with_name(f"{lock.name}.stale.{uuid.uuid4().hex}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:  # released, or broken by another waiter
        return
    if read_holder(aside) != holder:
        with contextlib.suppress(FileExistsError):
            os.link(aside, lock)
        aside.unlink(missing_ok=True)
        return
    aside.unlink(missing_ok=True)
    print(f"warning: broke the stale lock {lock}: {why}", file=sys.stderr, flush=True)


def _release(lock: Path, me: Holder) -> None:
    if read_holder(lock) == me:
        lock.unlink(missing_ok=True)
    else:
        print(
            f"warning: the lock {lock} was broken while {me.describe()} held it (held too long?)",
            file=sys.stderr,
            flush=True,
        )
