"""The configuration files of the local Slurm: slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf.

Why the settings are as they are (no systemd and no cgroups in containers and on CI machines):
see docs/testing.md and docs/clusters.md ("A real Slurm on the GPU machines"). Everything lives
under the cluster's root directory; ports are given by the caller (picked free at each start).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Partitions as at the seminar's site (GWDG Grete), GPU type -> partition; plus a default one.
PARTITIONS = {"A100": "grete:shared", "H100": "grete-h100"}
DEFAULT_PARTITION = "debug"
#: Small enough that a test can make a sweep exceed it and see the arrays split.
MAX_ARRAY_SIZE = 1001
CLUSTER_NAME = "compilebench"


@dataclass(frozen=True)
class NodeSpec:
    """What the one node offers and where the cluster's files go."""

    root: Path
    hostname: str
    cpus: int
    real_memory_mb: int
    gpus: dict[str, list[str]]
    """GPU type -> device files (placeholder files on a CPU machine, /dev/nvidiaN on a GPU one)."""
    munge_socket: Path
    spool_dir: Path
    ports: dict[str, int]
    plugin_dir: Path | None = None
    bind_cores: bool = False
    """Bind each job to the cores it was given (task/affinity, as real sites do; no cgroups needed)."""
    first_job_id: int = 1
    """The first job id this cluster hands out (Slurm's FirstJobId)."""


def slurm_conf(node: NodeSpec, accounting: bool) -> str:
    root = node.root
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={node.hostname}",
        f"SlurmctldPort={node.ports['slurmctld']}",
        f"SlurmdPort={node.ports['slurmd']}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire also holds a requeued job back (default 120 s): short here (5 s, Slurm's
        # least), tests requeue.
        f"AuthInfo=socket={node.munge_socket},cred_expire=5",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={node.spool_dir}",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        # Unbound, a test cell may use both cores of a CI machine; bound, two array tasks on a GPU
        # machine do not share CPUs (an inductor compile beside a measured step disturbs it).
        f"TaskPlugin={'task/affinity' if node.bind_cores else 'task/none'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        # A requeued job becomes eligible when its hold (cred_expire) ends, an event that starts no
        # scheduling pass: the main scheduler's periodic one starts it, every 60 s by default (a
        # backfill pass runs only after a change); every second here.
        "SchedulerParameters=sched_interval=1",
        # A fresh cluster resubmitting an old sweep directory's cells (the GPU machines' retries)
        # must not reuse the last cluster's job ids: submitit names its log files by job id, and
        # the old cells' log links would show the new jobs' logs.
        f"FirstJobId={node.first_job_id}",
        f"MaxArraySize={MAX_ARRAY_SIZE}",
        "MaxJobCount=20000",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        "GresTypes=gpu",
        "MailProg=/bin/true",
    ]
    if node.plugin_dir is not None:
        lines.append(f"PluginDir={node.plugin_dir}")
    if accounting:
        lines += [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={node.hostname}",
            f"AccountingStoragePort={node.ports['slurmdbd']}",
            # For slurmdbd with munge this names the munge socket (AuthInfo does not apply).
            f"AccountingStoragePass={node.munge_socket}",
            # GPUs by type in the job's TRES (sacct AllocTRES), as on real sites; slurmctld
            # refuses to start with these TRES and no slurmdbd.
            "AccountingStorageTRES=" + ",".join(["gres/gpu"] + [f"gres/gpu:{t.lower()}" for t in node.gpus]),
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=30",
        ]
    else:
        lines += ["AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none"]
    gres = ",".join(f"gpu:{gpu_type}:{len(files)}" for gpu_type, files in node.gpus.items())
    lines += [
        (
            f"NodeName={node.hostname} CPUs={node.cpus} RealMemory={node.real_memory_mb} "
            f"Gres={gres} State=UNKNOWN"
        ),
        # As a site's debug partition, a time limit (an hour): what a job array may not ask more than.
        f"PartitionName={DEFAULT_PARTITION} Nodes=ALL Default=YES MaxTime=60 State=UP",
        *(f"PartitionName={name} Nodes=ALL MaxTime=INFINITE State=UP" for name in PARTITIONS.values()),
    ]
    return "\n".join(lines) + "\n"


def gres_conf(node: NodeSpec) -> str:
    """One line per device: slurmd counts the lines of a type (gres.conf lies beside slurm.conf)."""
    lines = ["AutoDetect=off"]
    lines += [
        f"Name=gpu Type={gpu_type} File={path}" for gpu_type, files in node.gpus.items() for path in files
    ]
    return "\n".join(lines) + "\n"


def cgroup_conf() -> str:
    """cgroup/v1 named outright: with ProctrackType=linuxproc and TaskPlugin=none no cgroup is ever
    made, but slurmd loads a cgroup plugin at start, and on a cgroup-v2 host "autodetect" picks
    cgroup/v2, which wants libdbus and systemd (neither is in a container); v1 loads without them."""
    return "CgroupPlugin=cgroup/v1\n"


def slurmdbd_conf(node: NodeSpec, db_name: str, db_user: str, db_password: str) -> str:
    return (
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={node.munge_socket}",
                f"DbdHost={node.hostname}",
                f"DbdPort={node.ports['slurmdbd']}",
                "SlurmUser=root",
                "DebugLevel=info",
                f"LogFile={node.root}/log/slurmdbd.log",
                f"PidFile={node.root}/run/slurmdbd.pid",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={node.ports['mysqld']}",
                f"StorageUser={db_user}",
                f"StoragePass={db_password}",
                f"StorageLoc={db_name}",
            ]
        )
        + "\n"
    )
