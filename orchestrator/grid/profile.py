"""A Slurm cluster profile (conf/cluster/*.yaml) read and checked, and the resources each cell asks for.

The profile is the composed `cluster` node of a sweep; every field but `name` and `partitions`
has a default here, the same as in conf/cluster_base.yaml (the base every profile inherits, which
documents the fields), so a profile names only what its site needs. A cell's resources follow
from the profile and the cell's model: the GPU type is `cluster.gpu_type` when set, else
`cluster.gpu_type_by_model[<model>]`, else `cluster.gpu_type_by_model.default`; the partition is
`cluster.partition` when set, else `cluster.partitions[<gpu type>]`. SlurmProfile is OmegaConf's
structured schema of the node, which converts and checks each value's type; what OmegaConf cannot
say (positive, known partition, one-line setup) is checked here. Bad values raise ProfileError with
a one-line message.

A cell trains as `distributed.nodes × distributed.tasks_per_node` processes, one Slurm task each
(workloads/cell/distributed.py). `cluster.gpus` is what each task gets, so a node's request is
`tasks_per_node × gpus` GPUs (`--gres` counts per node), `tasks_per_node` × the per-task memory,
and every task `cpus_per_gpu × gpus` CPUs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from workloads.cell.config import DistributedConfig
from workloads.cell.config_io import distributed_section

#: Compile-cache policies: one directory for the whole sweep (warm compiles), or a fresh one per job.
COMPILE_CACHES = ("shared", "per_job")

#: A shell variable's name (the keys of `env`).
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ProfileError(ValueError):
    """A cluster profile (or an override of it) that cannot place cells; one line for the user."""


@dataclass(frozen=True)
class SlurmProfile:
    name: str
    partitions: dict[str, str]
    executor: str = "slurm"
    gpu_type: str | None = None
    gpu_type_by_model: dict[str, str] = field(default_factory=dict)
    partition: str | None = None
    gpus: int = 1
    gpus_per_node: int | None = None
    cpus_per_gpu: int | None = None
    mem_per_gpu_gb: float | None = None
    time_min: int | None = None
    signal_delay_s: int = 90
    account: str | None = None
    qos: str | None = None
    max_array_size: int = 1000
    array_parallelism: int = 16
    max_requeue: int = 1
    cells_per_task: int = 1
    compile_cache: str = "per_job"
    sbatch_template: str = "default"
    modules: list[str] = field(default_factory=list)
    venv: str | None = None
    conda_env: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    sbatch_extra: dict[str, Any] = field(default_factory=dict)
    environments: dict[str, Any] = field(default_factory=dict)
    """Named environments (`environment=NAME`), checked by orchestrator/grid/environments.py."""


@dataclass(frozen=True, order=True)
class Resources:
    """What one cell's job asks Slurm for; cells with equal resources share a job array."""

    partition: str
    gpu_type: str
    gpus: int
    """GPUs per node."""
    cpus: int | None
    """CPUs per task."""
    mem_gb: float | None
    """Memory per node."""
    time_min: int
    nodes: int = 1
    tasks_per_node: int = 1

    @property
    def gres(self) -> str | None:
        return f"gpu:{self.gpu_type}:{self.gpus}" if self.gpus else None

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    def describe(self) -> dict[str, Any]:
        """The columns the dry-run grid shows (gres and mem per node, cpus per task)."""
        return {
            "partition": self.partition,
            "tasks": f"{self.nodes}x{self.tasks_per_node}",
            "gres": self.gres or "-",
            "cpus": self.cpus,
            "mem": f"{self.mem_gb:g}G" if self.mem_gb else None,
            "time": f"{self.time_min} min",
        }


def _fail(profile: str, message: str) -> ProfileError:
    return ProfileError(f"cluster {profile}: {message}")


def _typed(name: str, values: Mapping[str, Any]) -> SlurmProfile:
    """`values` set key by key on SlurmProfile as OmegaConf's structured schema, which converts
    and checks each value's type ("3" -> 3; `gpus: true`, `modules: cuda` refused, naming the key)."""
    schema = OmegaConf.structured(SlurmProfile)
    OmegaConf.set_readonly(schema, False)  # a frozen dataclass gives a read-only config
    for key, value in values.items():
        try:
            schema[key] = value
        except OmegaConfBaseException as exc:
            raise _fail(name, f"{key}: {str(exc).splitlines()[0]}") from None
    try:
        return OmegaConf.to_object(schema)
    except MissingMandatoryValue as exc:
        raise _fail(name, f"{exc.full_key} is required (conf/cluster_base.yaml: ???)") from None


def _positive(name: str, value: Any, key: str, optional: bool = True) -> None:
    if (value is None and optional) or (value is not None and value > 0):
        return
    kind = "integer" if isinstance(value, int) or value is None else "number"
    raise _fail(name, f"{key} must be a positive {kind}, got {value!r}")


def _named(name: str, value: Mapping[str, str], key: str) -> None:
    if not all(value.values()):
        raise _fail(name, f"{key} must map names to non-empty strings, got {value!r}")


def load_profile(cluster: Mapping[str, Any]) -> SlurmProfile:
    """The checked profile of a composed `cluster` node; raises ProfileError."""
    name = str(cluster.get("name", "?"))
    known = {f.name for f in dataclasses.fields(SlurmProfile)}
    unknown = sorted(set(cluster) - known)
    if unknown:
        raise _fail(name, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    given = {key: value for key, value in cluster.items() if value is not None}  # null = the default
    profile = _typed(name, given)

    _named(name, profile.partitions, "partitions")
    if not profile.partitions:
        raise _fail(
            name, "partitions is empty; map each GPU type to a partition, e.g. {A100: 'grete:shared'}"
        )
    _named(name, profile.gpu_type_by_model, "gpu_type_by_model")
    for key in (
        "gpus_per_node",
        "cpus_per_gpu",
        "max_array_size",
        "array_parallelism",
        "signal_delay_s",
        "cells_per_task",
    ):
        _positive(name, getattr(profile, key), key)
    _positive(name, profile.time_min, "time_min (required for Slurm: minutes per job)", optional=False)
    _positive(name, profile.mem_per_gpu_gb, "mem_per_gpu_gb")
    for key in ("gpus", "max_requeue"):
        if getattr(profile, key) < 0:
            raise _fail(name, f"{key} must be an integer >= 0, got {getattr(profile, key)!r}")
    if profile.gpus_per_node and profile.gpus > profile.gpus_per_node:
        raise _fail(
            name, f"gpus={profile.gpus} is more than a node has (gpus_per_node={profile.gpus_per_node})"
        )
    if profile.compile_cache not in COMPILE_CACHES:
        raise _fail(
            name, f"compile_cache must be one of {', '.join(COMPILE_CACHES)}, got {profile.compile_cache!r}"
        )
    if profile.partition is not None and profile.partition not in profile.partitions.values():
        raise _fail(
            name,
            f"unknown partition {profile.partition!r}; the profile's partitions: "
            f"{', '.join(sorted(set(profile.partitions.values())))}",
        )
    for key in ("modules", "setup"):
        lines = getattr(profile, key)
        if any("\n" in line for line in lines):
            raise _fail(name, f"{key} must be a list of one-line strings, got {lines!r}")
    if not all(VARIABLE_NAME.fullmatch(key) for key in profile.env):
        raise _fail(name, f"env must map variable names to values, got {profile.env!r}")
    return profile


def gpu_type_for(profile: SlurmProfile, model: str) -> str:
    """The GPU type a cell of `model` runs on (see the module docstring); raises ProfileError."""
    gpu_type = (
        profile.gpu_type or profile.gpu_type_by_model.get(model) or profile.gpu_type_by_model.get("default")
    )
    types = ", ".join(profile.partitions)
    if gpu_type is None:
        raise _fail(
            profile.name,
            f"no GPU type for model {model}: set cluster.gpu_type (one of {types}) "
            f"or cluster.gpu_type_by_model.default",
        )
    if gpu_type not in profile.partitions:
        raise _fail(
            profile.name,
            f"unknown GPU type {gpu_type!r} (for model {model}); the profile's partitions have: {types}",
        )
    return gpu_type


def resources_for(
    profile: SlurmProfile, model: str, layout: DistributedConfig = DistributedConfig()
) -> Resources:
    """The resources of one cell of `model`, trained by `layout`'s processes, on this profile."""
    gpu_type = gpu_type_for(profile, model)
    gpus_per_node = profile.gpus * layout.tasks_per_node
    if profile.gpus_per_node and gpus_per_node > profile.gpus_per_node:
        raise _fail(
            profile.name,
            f"a cell of distributed.tasks_per_node={layout.tasks_per_node} asks for "
            f"{gpus_per_node} GPUs per node; a node has {profile.gpus_per_node} (gpus_per_node)",
        )
    per_task = max(profile.gpus, 1)  # a CPU-only request (gpus: 0) still gets one GPU's share
    return Resources(
        partition=profile.partition or profile.partitions[gpu_type],
        gpu_type=gpu_type,
        gpus=gpus_per_node,
        cpus=profile.cpus_per_gpu * per_task if profile.cpus_per_gpu else None,
        mem_gb=profile.mem_per_gpu_gb * per_task * layout.tasks_per_node if profile.mem_per_gpu_gb else None,
        time_min=int(profile.time_min),  # checked positive by load_profile
        nodes=layout.nodes,
        tasks_per_node=layout.tasks_per_node,
    )


def cell_resources(profile: SlurmProfile, config: Mapping[str, Any]) -> Resources:
    """The resources of a cell from its resolved config (its model and `distributed` section)."""
    return resources_for(profile, config["model"]["name"], distributed_section(config))
