"""The words every package uses for a cell: its axes, its states, its backend label.

An axis is a setting that tells cells apart in the manifest, `compilebench status` and every
table. It is defined here once, and everything else derives from `AXES`: the manifest's and
run.parquet's columns (workloads/contract/schema.py), the values the workload records, the status table,
which cells analysis compares with which. Adding an axis is one `Axis(...)` line here, plus, if its
config key is new, the key's field in workloads/cell/config.py and its default in
workloads/cell/cell_id.py `_LATER_KEYS` (docs/architecture.md walks through it).

Roles say how analysis treats an axis:

    workload   what is trained (model, size, precision, batch, data, seed): cells compared with
               each other agree on all of them
    treatment  how it is compiled (backend, mode, flags): what a comparison varies; the backend
               label names them
    hardware   where it ran (device, GPU, the named software environment): a compiled cell is
               compared with the eager cell of the same environment; mostly known once it has run
    processes  how many processes trained it together (DDP)

This module imports nothing heavy (no torch, no pandas): the Slurm task and `status` use it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

WORKLOAD, TREATMENT, HARDWARE, PROCESSES = "workload", "treatment", "hardware", "processes"


def config_value(config: Mapping[str, Any], key: str) -> Any:
    """The value of a dotted key (`backend.name`) in a resolved config; None where a level is missing."""
    node: Any = config
    for part in _parts(key):
        # dict first: an isinstance check against the Mapping ABC costs ~10x more, per key per cell
        node = node.get(part) if isinstance(node, dict) or isinstance(node, Mapping) else None
    return node


@functools.cache
def _parts(key: str) -> tuple[str, ...]:
    return tuple(key.split("."))


def compile_mode(backend: Any, mode: Any) -> str | None:
    """The inductor mode a cell compiles with: `default` when none is named; None for other backends."""
    return mode or ("default" if backend == "inductor" else None)


def _compile_mode(config: Mapping[str, Any]) -> str | None:
    return compile_mode(config_value(config, "backend.name"), config_value(config, "backend.mode"))


def _backend(config: Mapping[str, Any]) -> str | None:
    # A GEMM cell with gemm.kernel runs the post's Triton kernel, not eager's cuBLAS: the kernel is its
    # treatment, and its speedup is over the eager (cuBLAS) cell of its shape, as a compiled cell's.
    return config_value(config, "gemm.kernel") or config_value(config, "backend.name")


#: model=gemm's timing modes (`gemm.timing`; workloads/gemm/timing.py, bursts.py; docs/gemm.md "Timing
#: modes"): seconds of CUDA-graph replays back to back, what a training or serving loop gets (the GPU's
#: clocks under its power cap), or short bursts after an idle pause, as `triton.testing.do_bench` and
#: profilers time.
SUSTAINED, BURST = "sustained", "burst"
GEMM_TIMINGS = (SUSTAINED, BURST)
#: model=gemm's Triton fp8 kernels (`model.kernel`; workloads/gemm/triton_fp8.py): the FP8 post's
#: data-parallel "base" matmul and its SplitK TK-GEMM. A cell with a kernel has it as its backend axis.
GEMM_KERNELS = ("triton_base", "triton_splitk")


def _gemm_timing(config: Mapping[str, Any]) -> str | None:
    # Only a GEMM cell (model=gemm) is timed either way; one configured before gemm.timing was sustained.
    if config_value(config, "model.name") != "gemm":
        return None
    return config_value(config, "gemm.timing") or SUSTAINED


def _arch(config: Mapping[str, Any]) -> str | None:
    # A custom model's target names what is built, as a timm name does (two targets: two workloads).
    return config_value(config, "model.arch") or config_value(config, "model.target")


def _fp8_recipe(config: Mapping[str, Any]) -> str | None:
    # Only fp8 has a recipe: a bf16 cell and an fp8 cell differ by precision, not by a recipe.
    return (
        config_value(config, "precision.recipe") if config_value(config, "precision.name") == "fp8" else None
    )


def _processes(config: Mapping[str, Any]) -> int:
    # A one-process cell's config may have no `distributed` section (its id stays what it was).
    return (config_value(config, "distributed.nodes") or 1) * (
        config_value(config, "distributed.tasks_per_node") or 1
    )


def _nodes(config: Mapping[str, Any]) -> int:
    return config_value(config, "distributed.nodes") or 1


@dataclass(frozen=True)
class Axis:
    """One axis of a cell."""

    name: str
    """Its column in manifest.parquet, run.parquet and the tables."""
    type: pa.DataType
    role: str
    """workload, treatment, hardware or processes (module docstring)."""
    key: str | None
    """The config key it is read from (dotted); None for an axis known only once the cell ran. A
    workload may resolve a null (`batch_size: null` = the size's default) and record that."""
    derive: Callable[[Mapping[str, Any]], Any] | None = None
    """Computes the value from the config where the key alone does not give it."""
    label: str | None = None
    """Its column header in status and tables; None: the name."""
    headline: bool = False
    """Shown by `status` and the dry-run grid always; other axes only where they vary between cells."""
    flag: str | None = None
    """For a boolean treatment: what the backend label says when it is true."""

    @property
    def header(self) -> str:
        return self.label or self.name

    def set_by(self, override_key: str) -> bool:
        """Whether an override of this key sets the axis (`backend=inductor` sets `backend.name`)."""
        return self.key is not None and (self.key == override_key or self.key.startswith(override_key + "."))


AXES: tuple[Axis, ...] = (
    Axis("model", pa.string(), WORKLOAD, "model.name", headline=True),
    Axis("arch", pa.string(), WORKLOAD, "model.arch", _arch),
    Axis("size", pa.string(), WORKLOAD, "size", headline=True),
    Axis("backend", pa.string(), TREATMENT, "backend.name", _backend, headline=True),
    Axis("compile_mode", pa.string(), TREATMENT, "backend.mode", _compile_mode, headline=True),
    Axis("fullgraph", pa.bool_(), TREATMENT, "backend.fullgraph", flag="fullgraph"),
    Axis("regional", pa.bool_(), TREATMENT, "backend.regional", flag="regional"),
    Axis("compile_optimizer", pa.bool_(), TREATMENT, "backend.compile_optimizer", flag="compiled optimizer"),
    Axis("precision", pa.string(), WORKLOAD, "precision.name", headline=True),
    Axis("fp8_recipe", pa.string(), WORKLOAD, "precision.recipe", _fp8_recipe, label="recipe"),
    Axis("data_source", pa.string(), WORKLOAD, "data.source", label="data"),
    Axis("seed", pa.int64(), WORKLOAD, "seed"),
    Axis("batch_size", pa.int64(), WORKLOAD, "batch_size", label="batch"),
    Axis("grad_accum", pa.int64(), WORKLOAD, "grad_accum", label="accum"),
    # model=gemm's shape (A: M x K, B: K x N); the workload records the size preset's where null.
    Axis("gemm_m", pa.int64(), WORKLOAD, "gemm.m", label="M"),
    Axis("gemm_n", pa.int64(), WORKLOAD, "gemm.n", label="N"),
    Axis("gemm_k", pa.int64(), WORKLOAD, "gemm.k", label="K"),
    # ... and how it is timed: a burst's µs and a sustained one's are different quantities (docs/gemm.md).
    Axis("gemm_timing", pa.string(), WORKLOAD, "gemm.timing", _gemm_timing, label="timing"),
    # model=gemm's layer (gemm.layer): the GEMMs of a whole layer; null: one GEMM.
    Axis("gemm_layer", pa.string(), WORKLOAD, "gemm.layer", label="layer"),
    # The cluster profile's named software environment (`environment=NAME`); null: the profile's own.
    Axis("environment", pa.string(), HARDWARE, "environment"),
    Axis("device", pa.string(), HARDWARE, None),
    Axis("gpu_name", pa.string(), HARDWARE, None, label="gpu"),
    Axis("world_size", pa.int64(), PROCESSES, "distributed.tasks_per_node", _processes, label="procs"),
    Axis("nodes", pa.int64(), PROCESSES, "distributed.nodes", _nodes),
    Axis("dist_backend", pa.string(), PROCESSES, None),
)
AXIS = {axis.name: axis for axis in AXES}
#: Axes whose value a config gives: the manifest's axis columns.
CONFIG_AXES = tuple(axis for axis in AXES if axis.key is not None)
_READERS = [(axis.name, _parts(axis.key), axis.derive) for axis in CONFIG_AXES]  # type: ignore[arg-type]


def names(*roles: str) -> list[str]:
    """The axes of these roles (all axes without a role), in AXES order."""
    return [axis.name for axis in AXES if not roles or axis.role in roles]


def axes_from_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """{axis: value} of every axis a resolved cell config gives (nulls as they are). Runs once per
    cell of a sweep (10,000 in a large dry run), hence the loop without a call per axis."""
    values = {}
    for name, parts, derive in _READERS:
        if derive is not None:
            values[name] = derive(config)
            continue
        node: Any = config
        for part in parts:
            node = node.get(part) if isinstance(node, dict) or isinstance(node, Mapping) else None
        values[name] = node
    return values


def shown_axes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The axes a listing of these cells shows: the headline ones, and the others whose value
    differs between the rows (`seed=1,2` shows a seed column; one seed shows none)."""
    return [axis.name for axis in AXES if axis.headline or _varies(row.get(axis.name) for row in rows)]


def _varies(values: Iterable[Any]) -> bool:
    """Whether the values are not all equal (axis values are scalars: str, int, bool, None)."""
    iterator = iter(values)
    first = next(iterator, None)
    return any(value != first or type(value) is not type(first) for value in iterator)


def backend_label(values: Mapping[str, Any]) -> str:
    """`inductor`, `inductor (max-autotune)`, `inductor (regional, compiled optimizer)`: the
    backend with its mode where it is not the default and every treatment flag that is set."""
    backend = values.get("backend")
    mode = values.get("compile_mode")
    notes = [mode] if isinstance(mode, str) and mode != "default" else []
    notes += [axis.flag for axis in AXES if axis.flag and values.get(axis.name) is True]
    name = backend if isinstance(backend, str) else "?"
    return f"{name} ({', '.join(notes)})" if notes else name


#: The backend every other one is compared with: a compiled cell's speedup is over the eager cell
#: of the same workload.
BASELINE_BACKEND = "eager"
#: `repeats=auto`: a cell runs replicates round after round until its speedup is decided, precise enough
#: or `max_repeats` is reached (analysis/statistics/decision.py).
AUTO_REPEATS = "auto"
#: The default margin of practical equivalence of verdicts (`equivalence`, `analyze --equivalence`): a
#: speedup within 1 ± 2% is no difference, smaller than the run-to-run spread of most cells on a GPU
#: (docs/measurement.md), and the margin that makes repeats=auto decide "no difference" at all.
EQUIVALENCE = 0.02
#: The two sides of a paired cell's steps (steps.parquet `side`): its compiled steps, and its own
#: eager baseline measured in the same process (workloads/cell/paired.py); null in unpaired cells.
COMPILED_SIDE, EAGER_SIDE = "compiled", "eager"
#: A compiled cell's accuracy check (run.parquet `accuracy`, workloads/instruments/accuracy.py): every
#: tensor within its limit, one beyond it, or the check itself failed; null: not checked.
ACCURACY_PASS, ACCURACY_FAIL, ACCURACY_ERROR = "pass", "fail_accuracy", "error"
#: run.parquet `clock_limits` of a GEMM cell whose GPU clocks were read and never limited
#: (workloads/instruments/gpu_clocks.py); otherwise the reasons' names, comma-joined; null: not measured.
NO_CLOCK_LIMITS = "none"
#: What the check measured errors against (run.parquet `accuracy_reference`): an fp64 copy of the
#: model, or eager's own run where that could not be made or run (out of memory) and for fp8.
ACCURACY_FP64, ACCURACY_EAGER = "fp64", "eager"


# States. An attempt of a cell ends in one of STATUSES (run.parquet's `status`); `not_compiled`:
# a compiled backend was asked for and nothing compiled; `not_supported`: the device it landed on
# cannot run what it asks for (fp8 on a GPU without fp8 tensor cores, or on the CPU), which a
# retry on the same partition would not change. A cell without a readable result is
# NO_RESULT or UNREADABLE to analysis; `status` asks the scheduler about it instead.
COMPLETED, FAILED, OOM, TIMEOUT, CANCELLED, NOT_COMPILED, NOT_SUPPORTED = (
    "completed",
    "failed",
    "oom",
    "timeout",
    "cancelled",
    "not_compiled",
    "not_supported",
)
STATUSES = (COMPLETED, FAILED, OOM, TIMEOUT, CANCELLED, NOT_COMPILED, NOT_SUPPORTED)
NO_RESULT, UNREADABLE = "no_result", "unreadable"
#: A cell's job in the scheduler's queue.
PENDING, RUNNING = "pending", "running"
QUEUED = (PENDING, RUNNING)
#: A job that the scheduler has forgotten without a result; a cell whose job state could not be
#: learned; a cell never started (a dry run, or a local sweep that has not reached it).
LOST, UNKNOWN, NOT_RUN = "lost", "unknown", "not run"
#: Every state a cell can be in, in the order tables and count lines show them.
CELL_STATES = (COMPLETED, *QUEUED, *STATUSES[1:], LOST, UNKNOWN, NOT_RUN, NO_RESULT, UNREADABLE)

#: Longest error text shown in a table (its first line).
ERROR_WIDTH = 60


def ordered_states(states: Iterable[str]) -> list[str]:
    """The distinct states in CELL_STATES's order, unknown ones after them by name."""
    distinct = set(states)
    return [s for s in CELL_STATES if s in distinct] + sorted(distinct - set(CELL_STATES))


def count_states(states: Iterable[str]) -> str:
    """The states counted in that order, e.g. `3 completed, 1 running, 4 pending` ('none' for none):
    the count line of `status`, `--wait`, `--retry-failed` and `analyze`."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{counts[state]} {state}" for state in ordered_states(counts)) or "none"


def short_error(error: Any, width: int = ERROR_WIDTH) -> str:
    """The first non-empty line of an error, cut to `width` characters ('' for no error)."""
    line = (
        next((line.strip() for line in error.splitlines() if line.strip()), "")
        if isinstance(error, str)
        else ""
    )
    return line if len(line) <= width else line[: width - 1] + "…"
