"""A real single-node Slurm for the tests: munged, slurmctld, slurmd, and optionally slurmdbd on MariaDB.

Everything the cluster writes lies under one directory: keys, configs, state, pid files, logs,
the MariaDB data directory, placeholder GPU "devices" (only the sockets lie in a short directory of
their own in /tmp: munged's, and slurmd's spool, where slurmstepd makes one per job step, named
after the node, the job and the step: under pytest-xdist's longer temporary paths that name passed
the 107 bytes a socket's path may have, and the job never started). Ports are picked free at each
start, and the cluster's processes are found by their pid files and by markers in their command
line or environment, never by name, so two test sessions on one machine do not meet. The Debian
packages come from `tests/helpers/slurm/install.sh`.

    cluster = LocalSlurm(tmp_dir / "slurm", accounting=False)
    cluster.start()                  # returns when `sinfo` shows the node idle
    subprocess.run(["sbatch", "-p", "grete:shared", "-G", "A100:1", "--wrap", "hostname"],
                   env={**os.environ, **cluster.env()})
    cluster.stop()                   # cancels the jobs; no process of this cluster is left running

The client commands (sbatch, squeue, sacct, scontrol, srun) and everything that calls them
(submitit) find the cluster through `SLURM_CONF`, which `env()` gives; `activated()` sets it in
this process for code that calls the commands itself.

Why the settings are as they are (no systemd, no cgroups in containers and on CI machines):
see docs/testing.md and docs/clusters.md ("A real Slurm on the GPU machines").
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.slurm.install import SlurmInstall
from tests.helpers.slurm.slurm_conf import (
    CLUSTER_NAME,
    PARTITIONS,
    NodeSpec,
    cgroup_conf,
    gres_conf,
    slurm_conf,
    slurmdbd_conf,
)

#: Typed placeholder GPUs of a node without GPUs: type -> count.
PLACEHOLDER_GPUS = {"A100": 2, "H100": 2}

#: Set in the daemons' environment (inherited by slurmstepd), so that `processes()` finds them.
MARKER_ENV = "COMPILEBENCH_LOCAL_SLURM"

DB_NAME = "slurm_acct_db"
DB_USER = "slurm"

#: The longest path a Unix socket may have (sun_path is 108 bytes with the terminating NUL).
MAX_SOCKET_PATH = 107


class SlurmStartError(RuntimeError):
    """A daemon did not come up; the message carries the tail of the logs."""


def missing_commands(accounting: bool, install: SlurmInstall = SlurmInstall()) -> list[str]:
    """The commands this machine lacks for a cluster of this kind (empty when it can start one)."""
    return install.missing(accounting)


def _first_job_id() -> int:
    """A first job id of this cluster's own: 1,000 ids per second of the clock, so that clusters
    started a second or more apart hand out different ids; wraps every 60,000 s, below Slurm's
    largest job id (MaxJobId, 67,043,328)."""
    return 1001 + 1000 * (int(time.time()) % 60_000)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _parent(pid: int) -> int | None:
    """The parent's pid of a process, None once it has ended."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"--- {path}: (no file)"
    return f"--- {path} (last {min(lines, len(text))} lines):\n" + "\n".join(text[-lines:])


class LocalSlurm:
    """One single-node Slurm cluster living under `root_dir`; `accounting` adds slurmdbd + MariaDB.

    `gpus` (GPU type -> device files) describes real GPUs; by default the node has typed
    placeholder GPUs (PLACEHOLDER_GPUS, files under the root). `install` says where the programs
    are: the system's packages, or an unpacked-.deb prefix (tests/helpers/slurm/install.py).
    """

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        accounting: bool = False,
        gpus: dict[str, list[str]] | None = None,
        install: SlurmInstall = SlurmInstall(),
        bind_cores: bool = False,
    ):
        self.root = Path(root_dir).resolve()
        self.bind_cores = bind_cores
        self.accounting = accounting
        self.install = install
        self.gpus = gpus
        self.hostname = socket.gethostname().split(".")[0]
        self.cpus = os.cpu_count() or 1
        self.conf = self.root / "etc" / "slurm.conf"
        # munged wants every directory above its socket open to all (x), which pytest's
        # temporary directories (mode 700) are not: the sockets get a directory of their own.
        self._socket_dir: Path | None = None
        self.mysql_socket = self.root / "run" / "mysqld.sock"
        self.ports: dict[str, int] = {}
        self._mysqld_safe: subprocess.Popen | None = None
        self._started_pids: list[int] = []
        self.running = False
        self.first_job_id = _first_job_id()

    # --- what callers use ---------------------------------------------------------------------

    @property
    def munge_socket(self) -> Path:
        return self._sockets() / "munge.socket"

    @property
    def spool_dir(self) -> Path:
        """slurmd's spool: the batch scripts and the job steps' sockets."""
        return self._sockets() / "spool"

    def _sockets(self) -> Path:
        if self._socket_dir is None:
            raise RuntimeError("the cluster is not started")
        return self._socket_dir

    @property
    def has_accounting(self) -> bool:
        return self.accounting

    @property
    def partitions(self) -> dict[str, str]:
        """GPU type -> partition name, as in conf/cluster/test_slurm.yaml."""
        return dict(PARTITIONS)

    def env(self) -> dict[str, str]:
        """Environment variables a process needs to talk to this cluster (add them to os.environ)."""
        return {"SLURM_CONF": str(self.conf), **self.install.env()}

    @contextlib.contextmanager
    def activated(self) -> Iterator[LocalSlurm]:
        """Sets `env()` in os.environ of this process (for submitit & co. called in-process)."""
        saved = {key: os.environ.get(key) for key in self.env()}
        os.environ.update(self.env())
        try:
            yield self
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run a client command (`cluster.run("squeue", "-h")`) against this cluster, text output."""
        return subprocess.run(
            list(args),
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def logs(self, lines: int = 25) -> str:
        """The tails of the daemons' log files, for error messages."""
        names = ["munged.log", "slurmctld.log", "slurmd.log"]
        if self.accounting:
            names[1:1] = ["mysqld.err", "slurmdbd.log"]
        return "\n".join(_tail(self.root / "log" / name, lines) for name in names)

    # --- start ----------------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> LocalSlurm:
        """Start every daemon and return once the node is idle; on failure stop what was started."""
        if self.running:
            return self
        missing = self.install.missing(self.accounting)
        if missing:
            raise SlurmStartError(
                f"commands not found: {' '.join(missing)} (run tests/helpers/slurm/install.sh as root)"
            )
        if os.geteuid() != 0:
            raise SlurmStartError("a local Slurm needs root (SlurmUser=root, munged and slurmd as root)")
        self.install.link_slurmstepd()
        deadline = time.monotonic() + timeout
        for sub in ("etc", "run", "log", "state", "dev", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if len(str(self.mysql_socket)) > MAX_SOCKET_PATH:
            raise SlurmStartError(f"{self.root} is too long a path for a Unix socket")
        self._socket_dir = Path(tempfile.mkdtemp(prefix="compilebench-slurm-"))
        self._socket_dir.chmod(0o755)
        self.spool_dir.mkdir()
        self.ports = {"slurmctld": _free_port(), "slurmd": _free_port()}
        if self.accounting:
            self.ports.update(slurmdbd=_free_port(), mysqld=_free_port())
        self._write_configs()
        self.running = True  # from here on stop() has something to clean up
        try:
            self._start_munged(deadline)
            if self.accounting:
                self._start_mariadb(deadline)
                self._start_slurmdbd(deadline)
            self._daemon("slurmctld", "slurmctld.pid")
            self._daemon("slurmd", "slurmd.pid")
            self._wait_idle(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _write_configs(self) -> None:
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        node = NodeSpec(
            root=self.root,
            hostname=self.hostname,
            cpus=self.cpus,
            # slurmd reads the free memory; a RealMemory above it would make the node invalid.
            real_memory_mb=max(1, int(_mem_available_mb() * 0.5)),
            gpus=self.gpus or self._placeholder_gpus(),
            munge_socket=self.munge_socket,
            spool_dir=self.spool_dir,
            ports=self.ports,
            plugin_dir=self.install.plugin_dir,
            bind_cores=self.bind_cores,
            first_job_id=self.first_job_id,
        )
        self.conf.write_text(slurm_conf(node, self.accounting))
        (self.conf.parent / "gres.conf").write_text(gres_conf(node))  # looked up beside slurm.conf
        (self.conf.parent / "cgroup.conf").write_text(cgroup_conf())
        if self.accounting:
            dbd = self.conf.parent / "slurmdbd.conf"  # holds a password: slurmdbd wants mode 600
            dbd.touch(mode=0o600)
            dbd.chmod(0o600)
            dbd.write_text(slurmdbd_conf(node, DB_NAME, DB_USER, self._db_password()))

    def _placeholder_gpus(self) -> dict[str, list[str]]:
        files: dict[str, list[str]] = {}
        types = [gpu_type for gpu_type, count in PLACEHOLDER_GPUS.items() for _ in range(count)]
        for index, gpu_type in enumerate(types):
            path = self.root / "dev" / f"fakegpu{index}"
            path.touch()
            files.setdefault(gpu_type, []).append(str(path))
        return files

    def _db_password(self) -> str:
        path = self.root / "etc" / "db.password"
        if not path.exists():
            path.write_text(secrets.token_hex(12))
            path.chmod(0o600)
        return path.read_text().strip()

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        """Start a process in its own session with output to a log file and the cluster's env.
        The program is the installation's (`slurmd-wlm` in a prefix), but its argv[0] stays the
        plain name: Slurm decides by its own name whether it runs as a daemon, and a `slurmd-wlm`
        ignores the node's GPUs (gres) in slurm.conf."""
        with open(self.root / "log" / log_name, "ab") as out:
            return subprocess.Popen(
                args,
                executable=self.install.command(args[0]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env(), MARKER_ENV: str(self.root)},
                start_new_session=True,
                cwd=self.root,
            )

    def _daemon(self, name: str, pid_file: str, *args: str) -> None:
        """Start a daemon that forks into the background and writes its pid file; wait for that file."""
        pid_path = self.root / "run" / pid_file
        pid_path.unlink(missing_ok=True)
        proc = self._spawn([name, *args], f"{name}.out")
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait()
            raise SlurmStartError(f"{name} did not daemonise within 60 s\n{self.logs()}") from exc
        if rc != 0:
            raise SlurmStartError(
                f"{name} exited with {rc}\n{_tail(self.root / 'log' / f'{name}.out')}\n{self.logs()}"
            )
        end = time.monotonic() + 30
        while (pid := _read_pid(pid_path)) is None:
            if time.monotonic() > end:
                raise SlurmStartError(f"{name} wrote no pid file {pid_path}\n{self.logs()}")
            time.sleep(0.05)
        self._started_pids.append(pid)

    def restart(self, daemon: str, sig: signal.Signals = signal.SIGTERM, down_s: float = 0) -> None:
        """Stop `slurmd` or `slurmctld` with `sig` (SIGKILL: as if it crashed), leave it down for
        `down_s` seconds, start it again and wait for the node to be up. Jobs keep running meanwhile
        (their slurmstepd are separate processes); the controller recovers its state from disk."""
        pid = _read_pid(self.root / "run" / f"{daemon}.pid")
        if pid is not None and _alive(pid):
            self._terminate([pid], timeout=30, signals=(sig, signal.SIGKILL))
        self._forget(pid)
        time.sleep(down_s)
        self._daemon(daemon, f"{daemon}.pid")
        self._wait_idle(time.monotonic() + 120)

    def save_state(self, job_id: str, timeout: float = 60) -> None:
        """Until slurmctld has written its job state to disk anew (StateSaveLocation/job_state). It
        saves a few seconds after a change, so a controller SIGKILLed right after jobs started or
        ended recovers them as they were before: started ones are unknown and their steps killed as
        orphans, ended ones run on until their time limit (seen on CI: a job that started 3.5 s
        before the kill). A change to job `job_id` (its comment) schedules a save; this returns once
        the file has been written after the call began, so it holds every job change before the call."""
        state = self.root / "state" / "job_state"
        before = state.stat().st_mtime_ns if state.exists() else 0
        self.run("scontrol", "update", f"jobid={job_id}", "comment=compilebench-test-state-saved")
        self._wait(
            "slurmctld's job state saved",
            lambda: state.exists() and state.stat().st_mtime_ns > before,
            time.monotonic() + timeout,
        )

    def _forget(self, pid: int | None) -> None:
        """A daemon stopped on purpose is no failure for `_wait`."""
        if pid in self._started_pids:
            self._started_pids.remove(pid)

    @contextlib.contextmanager
    def controller_stopped(self) -> Iterator[None]:
        """Within: slurmctld is stopped (SIGSTOP), so that every client command waits for it until
        its MessageTimeout, as with a controller that hangs or is overloaded; the jobs run on."""
        pid = _read_pid(self.root / "run" / "slurmctld.pid")
        if pid is None or not _alive(pid):
            raise RuntimeError("slurmctld does not run")
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def kill_node(self) -> None:
        """The node dies as if its power went: slurmd, every slurmstepd and every process of a job
        are killed at once (SIGKILL; none of them records anything), and the node is set down as
        slurmctld sets a node that stopped answering (after SlurmdTimeout). `revive_node()` undoes it."""
        keep = {
            _read_pid(self.root / "run" / name)
            for name in ("slurmctld.pid", "slurmdbd.pid", "mysqld.pid", "munged.pid")
        } - {None}
        if self._mysqld_safe is not None:
            keep.add(self._mysqld_safe.pid)
        # The daemons' own children live on the controller too: slurmctld's slurmscriptd, killed,
        # would leave slurmctld waiting for it when it stops, until stop() kills it 20 s later.
        doomed = [pid for pid in self.processes() if pid not in keep and _parent(pid) not in keep]
        self._terminate(doomed, timeout=10, signals=(signal.SIGKILL,))
        self._forget(_read_pid(self.root / "run" / "slurmd.pid"))
        self.run(
            "scontrol",
            "update",
            f"nodename={self.hostname}",
            "state=down",
            "reason=compilebench test: node lost",
        )

    @contextlib.contextmanager
    def node_memory_limited(self, limit_bytes: int) -> Iterator[Path]:
        """Within: the node has `limit_bytes` of memory, a cgroup-v1 memory limit that slurmd is put
        in, and with it every job step it starts from then on (as Slurm's task/cgroup puts a step
        under `--mem`): a job that needs more is killed by the kernel's OOM killer. Yields the
        cgroup's directory (memory.oom_control counts the kills). See `memory_cgroup_unavailable`."""
        parent = _own_memory_cgroup()
        if parent is None or memory_cgroup_unavailable():
            raise RuntimeError(memory_cgroup_unavailable() or "no memory cgroup")
        group = parent / f"compilebench-node-{secrets.token_hex(4)}"
        group.mkdir()
        try:
            (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
            slurmd = _read_pid(self.root / "run" / "slurmd.pid")
            (group / "cgroup.procs").write_text(str(slurmd))
            yield group
        finally:  # slurmd and what is left of its jobs back in the parent; the cgroup removed
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # a process that ended meanwhile
                    (parent / "cgroup.procs").write_text(pid)
            group.rmdir()

    def revive_node(self) -> None:
        """slurmd starts again after `kill_node()`; the node comes back (ReturnToService=2)."""
        self._daemon("slurmd", "slurmd.pid")
        self._wait_idle(time.monotonic() + 120)

    def _start_munged(self, deadline: float) -> None:
        root = self.root
        self._daemon(
            "munged",
            "munged.pid",
            f"--key-file={root}/munge/munge.key",
            f"--socket={self.munge_socket}",
            f"--pid-file={root}/run/munged.pid",
            f"--log-file={root}/log/munged.log",
            f"--seed-file={root}/munge/munged.seed",
            "--num-threads=4",
        )
        self._wait("munge", lambda: self._munge_works(), deadline)

    def _munge_works(self) -> bool:
        env = {**os.environ, **self.env()}
        cred = subprocess.run(
            ["munge", "-n", f"--socket={self.munge_socket}"], capture_output=True, timeout=10, env=env
        )
        if cred.returncode != 0:
            return False
        check = subprocess.run(
            ["unmunge", f"--socket={self.munge_socket}"],
            input=cred.stdout,
            capture_output=True,
            timeout=10,
            env=env,
        )
        return check.returncode == 0

    def _mysql(self, *args: str, sql: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        command = ["mariadb", "--no-defaults", f"--socket={self.mysql_socket}", "-u", "root", *args]
        if sql is not None:
            command += ["-e", sql]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=check)

    def _start_mariadb(self, deadline: float) -> None:
        root = self.root
        datadir = root / "mysql"
        if not (datadir / "mysql").is_dir():
            shutil.rmtree(datadir, ignore_errors=True)
            init = subprocess.run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    f"--datadir={datadir}",
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                    "--skip-name-resolve",
                ],
                capture_output=True,
                text=True,
                timeout=max(30, deadline - time.monotonic()),
            )
            if init.returncode != 0:
                raise SlurmStartError(f"mariadb-install-db failed:\n{init.stdout}\n{init.stderr}")
        self._mysqld_safe = self._spawn(
            [
                "mysqld_safe",
                "--no-defaults",
                f"--datadir={datadir}",
                f"--socket={self.mysql_socket}",
                f"--port={self.ports['mysqld']}",
                "--bind-address=127.0.0.1",
                f"--pid-file={root}/run/mysqld.pid",
                f"--log-error={root}/log/mysqld.err",
                "--user=root",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
                "--skip-log-bin",
            ],
            "mysqld_safe.out",
        )
        self._wait("mariadb", lambda: self._mysql(sql="SELECT 1", check=False).returncode == 0, deadline)
        pid = _read_pid(root / "run" / "mysqld.pid")
        if pid:
            self._started_pids.append(pid)
        password = self._db_password()
        self._mysql(
            sql=(
                f"CREATE DATABASE IF NOT EXISTS {DB_NAME};"
                f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}';"
                f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';"
            )
        )

    def _start_slurmdbd(self, deadline: float) -> None:
        self._daemon("slurmdbd", "slurmdbd.pid")
        # The first start creates the tables; sacctmgr answers once slurmdbd listens.
        self._wait(
            "slurmdbd",
            lambda: (
                self.run(
                    "sacctmgr", "-n", "-P", "list", "cluster", "format=cluster", check=False, timeout=30
                ).returncode
                == 0
            ),
            deadline,
        )
        clusters = self.run("sacctmgr", "-n", "-P", "list", "cluster", "format=cluster").stdout.split()
        if CLUSTER_NAME not in clusters:
            self.run("sacctmgr", "-i", "add", "cluster", CLUSTER_NAME)

    def _wait_idle(self, deadline: float) -> None:
        def idle() -> bool:
            # "mix"/"alloc": up, with jobs recovered from the state directory (a restart).
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False, timeout=30)
            states = {line.split()[1] for line in out.stdout.splitlines() if len(line.split()) == 2}
            return out.returncode == 0 and bool(states) and states <= {"idle", "mix", "alloc"}

        self._wait("the node to be idle in sinfo", idle, deadline)

    def _wait(self, what: str, ready, deadline: float) -> None:
        """Poll `ready()` until true; fail at the deadline, or at once when a started daemon died."""
        while True:
            try:
                if ready():
                    return
            except subprocess.TimeoutExpired:
                pass
            dead = [pid for pid in self._started_pids if not _alive(pid)]
            if dead:
                raise SlurmStartError(
                    f"a daemon (pid {dead}) died while waiting for {what} ({self.root})\n{self.logs()}"
                )
            if time.monotonic() > deadline:
                state = self.run("sinfo", "-N", "-l", check=False, timeout=30)
                raise SlurmStartError(
                    f"timed out waiting for {what} ({self.root})\n"
                    f"sinfo -N -l: {state.stdout}{state.stderr}\n{self.logs()}"
                )
            time.sleep(0.25)

    # --- stop -----------------------------------------------------------------------------------

    def processes(self) -> list[int]:
        """Pids of the live processes of this cluster: the daemons and what they started (marked by
        a path under the root in their command line, or `MARKER_ENV` in their environment), and
        the jobs (`SLURM_JOB_ID` and this cluster's `SLURM_CONF` in their environment). This process
        and its ancestors are never counted."""
        ours = {os.getpid()}
        pid: int | None = os.getpid()
        while pid is not None and pid > 1:
            pid = _parent(pid)
            if pid is not None:
                ours.add(pid)
        root = str(self.root).encode()
        marker = f"{MARKER_ENV}={self.root}".encode()
        conf = f"SLURM_CONF={self.conf}".encode()
        found = {p for p in self._started_pids if _alive(p)}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in ours:
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = set((entry / "environ").read_bytes().split(b"\0"))
            except OSError:
                continue
            is_job = conf in environ and any(e.startswith(b"SLURM_JOB_ID=") for e in environ)
            if (root in cmdline or marker in environ or is_job) and _alive(int(entry.name)):
                found.add(int(entry.name))
        return sorted(found)

    def stop(self, timeout: float = 60) -> None:
        """Cancel every job, stop the daemons (slurmd, slurmctld, slurmdbd, mariadb, munged, in that
        order), kill what is left of jobs, and return once none of these processes runs any more.
        The root directory is kept: a later start() recovers the queue and the accounting."""
        if not self.running:
            return
        self._cancel_jobs(timeout=timeout / 3)
        run = self.root / "run"
        order = ["slurmd.pid", "slurmctld.pid", "slurmdbd.pid", "mysqld.pid", "munged.pid"]
        for pid_file in order:
            pid = _read_pid(run / pid_file)
            if pid is not None and pid not in self._started_pids:
                self._started_pids.append(pid)
            if pid is not None and _alive(pid):
                self._terminate([pid], timeout=timeout / 3)
        if self._mysqld_safe is not None:
            try:  # it ends by itself once mysqld has shut down cleanly
                self._mysqld_safe.wait(timeout=timeout / 3)
            except subprocess.TimeoutExpired:
                os.killpg(self._mysqld_safe.pid, signal.SIGKILL)
                self._mysqld_safe.wait()
            self._mysqld_safe = None
        leftovers = self.processes()
        if leftovers:  # job steps (slurmstepd ignores SIGTERM) and jobs that outlived slurmd
            self._terminate(leftovers, timeout=10, signals=(signal.SIGKILL,))
        remaining = self.processes()
        if remaining:
            raise RuntimeError(f"processes of the local Slurm still run after stop(): {remaining}")
        self._started_pids.clear()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        self.running = False

    def _cancel_jobs(self, timeout: float) -> None:
        """Cancel every job and wait (a while) until none runs, so that a restart finds an idle node."""
        if not self._alive_daemon("slurmctld.pid"):
            return
        with contextlib.suppress(subprocess.SubprocessError):
            jobs = self.run("squeue", "-h", "-o", "%A", check=False, timeout=30).stdout.split()
            if not jobs:
                return
            self.run("scancel", *jobs, check=False, timeout=30)
            end = time.monotonic() + timeout
            while (
                time.monotonic() < end
                and self.run(
                    "squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING", check=False, timeout=30
                ).stdout.strip()
            ):
                time.sleep(0.2)

    def _alive_daemon(self, pid_file: str) -> bool:
        pid = _read_pid(self.root / "run" / pid_file)
        return pid is not None and _alive(pid)

    @staticmethod
    def _terminate(pids: list[int], timeout: float, signals=(signal.SIGTERM, signal.SIGKILL)) -> None:
        """Send each signal in turn, waiting up to `timeout` seconds after each for all to end."""
        for sig in signals:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            end = time.monotonic() + timeout
            while any(_alive(p) for p in pids) and time.monotonic() < end:
                time.sleep(0.05)
            if not any(_alive(p) for p in pids):
                return

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _mem_available_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 1024


def _own_memory_cgroup() -> Path | None:
    """The cgroup-v1 memory cgroup of this process (its directory), None without one."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return Path("/sys/fs/cgroup/memory", path.lstrip("/"))
    return None


def memory_cgroup_unavailable() -> str | None:
    """Why `LocalSlurm.node_memory_limited` cannot work here (None when it can): it needs root and
    the cgroup-v1 memory controller mounted writable at /sys/fs/cgroup/memory (a cgroup-v2-only
    host would need the memory controller delegated to a cgroup without processes: not done here)."""
    parent = _own_memory_cgroup()
    if parent is None:
        return "no cgroup-v1 memory controller (/proc/self/cgroup names none)"
    if not (parent / "memory.oom_control").exists() or not os.access(parent, os.W_OK):
        return f"the memory cgroup {parent} is not writable here"
    return None
