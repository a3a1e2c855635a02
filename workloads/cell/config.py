"""Typed configuration of one cell: what `run_cell` needs, and nothing about how it was scheduled.

The dataclasses' defaults are the only ones: the orchestrator registers them with Hydra
(orchestrator/grid/config_store.py) under conf/'s groups, composes each cell and writes it to
`cells/<cell_id>/config.yaml`; `load_cell_config` turns that file (or a plain dict) back into
dataclasses, rejecting unknown keys so that a typo never silently becomes a default.
Keys the workload does not use (`cluster`, `hydra`, ...) are allowed at the top level only.
The types are checked here, not by OmegaConf: a Slurm task runs `python -m workloads.run` where
no OmegaConf is installed (docs/clusters.md).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workloads.cell.precision import PRECISIONS
from workloads.contract.upgrade import MOVED_CONFIG_KEYS, lift_config
from workloads.contract.vocabulary import (
    AUTO_REPEATS,
    BASELINE_BACKEND,
    EQUIVALENCE,
    GEMM_KERNELS,
    GEMM_TIMINGS,
    SUSTAINED,
)

#: Inductor compile modes accepted for `backend.mode` (None and "default" mean the default mode).
INDUCTOR_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DATA_SOURCES = ("synthetic", "text", "bin", "imagefolder", "custom")
DIST_BACKENDS = ("auto", "nccl", "gloo")
#: `compile.measure`: one compile with whatever the caches hold, or a cold and a warm one.
COMPILE_MEASURES = ("once", "cold_warm")
#: model=gemm's layers (workloads/gemm/layer.py): the GEMMs of a whole layer instead of one GEMM.
GEMM_LAYERS = ("llama3_70b_attention",)


#: The metadata of a CellConfig field that is the sweep's own setting, not the cell's (`repeats`, ...).
SWEEP_SETTING = {"sweep_setting": True}


class ConfigError(ValueError):
    """A cell configuration that cannot be run; the message is meant for the user as is."""


@dataclass
class ModelConfig:
    name: str = "gpt"
    """Model family from `workloads.models.MODEL_FAMILIES`: `gpt`, `resnet`, `timm`, `custom`; or `gemm`,
    one matrix multiply timed instead of a training step (docs/gemm.md)."""
    target: str | None = None
    """model=custom: the user's builder, `package.module:function` (workloads/models/custom.py)."""
    arch: str | None = None
    """timm model name (e.g. `convnext_tiny`), or model=gpt's `gpt-<layers>x<heads>x<width>` (the size
    preset gives context and batch); null = the size's default architecture."""
    channels_last: bool = True
    """Vision models: train in channels-last memory format (faster convolutions on GPUs)."""
    dropout: float | None = None
    """GPT dropout; null = the size preset's value (0.2 for shakespeare-char, as nanoGPT)."""
    image_size: int | None = None
    """Vision input resolution; null = the size preset's value."""
    m: int | None = None
    """model=gemm: rows of A and of the product (A: M x K, B: K x N); null = the size preset's."""
    n: int | None = None
    """model=gemm: columns of B and of the product; null = the size preset's."""
    k: int | None = None
    """model=gemm: the inner dimension; null = the size preset's."""
    kernel: str | None = None
    """model=gemm with precision.name=fp8 (tensorwise), backend=eager: the GEMM runs one of the
    post's Triton kernels instead of cuBLAS, `triton_base` (data-parallel) or `triton_splitk`, at the
    tile configuration timed fastest for the cell's shape (docs/gemm.md); null = cuBLAS."""
    timing: str = SUSTAINED
    """model=gemm: how the GEMM is timed, one of GEMM_TIMINGS: `sustained` (the measured loop's seconds of
    CUDA-graph replays) or `burst` (`steps` short bursts of replays, each after an idle pause; their
    median) (docs/gemm.md "Timing modes")."""
    layer: str | None = None
    """model=gemm with precision.name=fp8 (tensorwise), backend=eager: the GEMMs of a whole layer
    (`llama3_70b_attention`: its q, k, v and o projections at M = model.m tokens), launched one by
    one and replayed as one CUDA graph (docs/gemm.md "The post's layer"); null = one GEMM."""


@dataclass
class BackendConfig:
    name: str = BASELINE_BACKEND
    """`eager`, `torchscript` (jit.trace), or any registered dynamo backend (`inductor`, ...)."""
    mode: str | None = None
    """torch.compile mode (inductor only): default, reduce-overhead, max-autotune, ..."""
    fullgraph: bool = False
    """Fail on any graph break instead of falling back to Python between graphs."""
    dynamic: bool | None = None
    """torch.compile `dynamic`: null lets dynamo decide after a shape change."""
    compile_optimizer: bool = False
    """Also compile the optimizer step (`torch.compile` around `optimizer.step`)."""
    regional: bool = False
    """Compile each repeated block (transformer layer, residual block) instead of the whole model."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra backend options passed to torch.compile(options=...)."""


#: `precision.recipe` of precision=fp8 (torchao's float8 training recipes; a GEMM cell takes the
#: first two: its scales per tensor or per row).
FP8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")


@dataclass
class PrecisionConfig:
    name: str = "bf16"
    """fp32 (no TF32), tf32 (fp32 with TF32 matmuls), bf16 or fp16 autocast, or fp8 (bf16 autocast, Linear
    layers' matmuls in float8 e4m3 through torchao; GPUs of compute capability >= 8.9 only)."""
    recipe: str = "tensorwise"
    """precision=fp8 only: how the fp8 scales are taken, one of FP8_RECIPES: `tensorwise` (one scale per
    tensor), `rowwise` (one per row), `rowwise_with_gw_hp` (rowwise, the weight gradient in bf16)."""


@dataclass
class DataConfig:
    source: str = "synthetic"
    """synthetic | text (char-level file) | bin (uint16 token memmap) | imagefolder | custom (model=custom's
    own reader)."""
    path: str | None = None
    """File (text, bin), directory (imagefolder) or either (custom); required for every source but
    synthetic."""
    workers: int = 4
    """DataLoader worker processes for imagefolder."""


@dataclass
class OptimConfig:
    lr: float | None = None
    """Peak learning rate; null = the model family's default (GPT AdamW 6e-4 as nanoGPT, vision SGD 0.01)."""
    weight_decay: float | None = None
    """null = the family default (0.1 for GPT's AdamW, 1e-4 for vision SGD)."""
    grad_clip: float | None = None
    """Clip the global gradient norm to this value; 0 disables; null = the family default
    (1.0 for GPT as nanoGPT, none for vision as timm)."""


@dataclass
class DistributedConfig:
    """How many processes train the cell together (data parallel, DDP). The launcher — Slurm, one
    task per process — starts them; see workloads/cell/distributed.py."""

    nodes: int = 1
    """Nodes of the cell's Slurm job."""
    tasks_per_node: int = 1
    """Training processes (Slurm tasks) per node: one per GPU with CUDA, or CPU processes (gloo).
    Above one process in all, the model trains under DistributedDataParallel; `batch_size` and
    `grad_accum` stay per process, so the global batch grows with the processes (weak scaling)."""
    backend: str = "auto"
    """torch.distributed backend: auto (nccl on CUDA, gloo on the CPU), nccl or gloo."""
    bucket_cap_mb: float | None = None
    """DDP's gradient bucket size in MiB; null = DDP's default (25). Compiled backends split
    their graphs at bucket boundaries (dynamo's DDPOptimizer), so this sets how many pieces."""

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node


@dataclass
class MeasureConfig:
    """When the measured loop stops (workloads/cell/stop_rule.py `StopRule`, docs/measurement.md "How long
    a cell measures"): after at least `steps` measured steps, at the first step at which the
    measured time has reached `min_seconds` and, where `rel_ci` is set, the median step's 95%
    interval is that narrow; beyond `steps`, never past `max_steps` steps nor `max_seconds` of
    measured time. Measured time is the sum of the measured steps' times (the span from the first
    measured step's start to the last one's end, device clock on CUDA)."""

    min_seconds: float = 5.0
    """Measure at least this long: a 10 ms step is measured for 500 steps, not 20 (0.2 s); a step
    slower than min_seconds / steps (0.25 s) is measured `steps` times, as before."""
    max_steps: int | None = 5000
    """Cap on measured steps (a step under 1 ms stops here, and steps.parquet keeps at most this
    many measured rows per attempt); a larger `steps` wins; null = no cap."""
    max_seconds: float | None = 300.0
    """Stop at the first step that reaches this much measured time once `steps` are done, targets
    met or not: bounds a cell whose `rel_ci` is not reached (GPT-2 at seconds per step); null = no cap."""
    rel_ci: float | None = None
    """Precision target: also require the median step's distribution-free 95% interval (order
    statistics at binomial ranks) to have a half-width <= rel_ci x the median (0.01 = ±1%); null =
    no target. With min_seconds=0 it is a pure precision stop."""
    paired: bool = True
    """A `torch.compile` cell also measures its own eager baseline in the same process: blocks of
    compiled and `force_eager` steps alternate, and the stop rule runs on the pairs' ratios
    (workloads/cell/paired.py, docs/measurement.md "Paired measurement"). No-op for eager,
    torchscript and distributed cells (run.parquet `paired_fallback` says why)."""
    block_seconds: float = 0.1
    """A paired block runs at least this long (at the last warm-up step's time) ..."""
    block_steps: int = 5
    """... and at least this many steps."""
    min_pairs: int = 6
    """The fewest pairs of blocks measured: below 6 no 95% interval of their median ratio exists."""


@dataclass
class CompileConfig:
    """How a compiled cell's compile is measured (docs/measurement.md "Compile cost")."""

    measure: str = "once"
    """`once`: the attempt compiles with the caches it finds (`compile_time_s`; `cluster.compile_cache`
    says which). `cold_warm`: first a separate process compiles the cell (its warm-up steps) with
    empty caches of its own (`compile_cold_s`), then the attempt compiles with the caches that one
    left and measures as usual (`compile_warm_s` = its `compile_time_s`). No-op for eager and
    torchscript."""


@dataclass
class CellConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    size: str = "tiny"
    """Size preset of the model family: tiny, small, medium, large, xl."""
    backend: BackendConfig = field(default_factory=BackendConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    seed: int = 1337
    """Seeds torch (model init, synthetic data, batch sampling)."""
    steps: int = 20
    """The fewest measured optimizer steps (after warm-up); `measure` says when to stop beyond them."""
    warmup_steps: int = 5
    """Steps run before measurement; compilation happens here. Recorded with phase=warmup."""
    batch_size: int | None = None
    """Micro-batch size; null = the size preset's default."""
    grad_accum: int | None = None
    """Micro-steps per optimizer step; null = the size preset's default."""
    device: str = "auto"
    """auto (cuda when available), cuda, or cpu."""
    peak_tflops: float | None = None
    """Override the GPU peak used for MFU; null = looked up from the GPU name and precision."""
    environment: str | None = None
    """The named software environment of the cluster profile (`cluster.environments`) whose Python runs
    the cell (orchestrator/grid/environments.py); null = the profile's own modules/venv/conda_env."""
    cell_id: str | None = None
    """Stable id given by the orchestrator; null = derived from the config by `run_cell`."""
    # The sweep's own settings: how many replicates of the cell run and when they stop. More
    # replicates of a cell are the same cell: `config_digest` leaves every SWEEP_SETTING out of the id.
    repeats: int | str = field(default=1, metadata=SWEEP_SETTING)
    """Replicates of the cell: each runs as its own process (its own array task on Slurm), the
    backends of a workload alternating; analysis gives intervals over them. `auto`: round after round
    until the speedup is decided, precise to `measure.rel_ci` or `max_repeats` are reached
    (docs/measurement.md)."""
    max_repeats: int = field(default=10, metadata=SWEEP_SETTING)
    """repeats=auto: the most replicates a cell runs (at least 3, the fewest it decides from:
    analysis/statistics/decision.py); read only with repeats=auto."""
    equivalence: float = field(default=EQUIVALENCE, metadata=SWEEP_SETTING)
    """repeats=auto: the margin of practical equivalence, 0.02 by default (1 ± 2%; as `analyze
    --equivalence`): a cell stops once
    the verdict `analyze` prints with this margin is decided (faster, slower or no difference;
    analysis/statistics/decision.py)."""

    @property
    def most_repeats(self) -> int:
        """The most replicates the cell runs: `repeats`, or `max_repeats` with repeats=auto."""
        return self.max_repeats if self.repeats == AUTO_REPEATS else int(self.repeats)

    def validate(self) -> None:
        """Raise ConfigError for values that can never run, before any work starts."""
        if self.steps <= 0:
            raise ConfigError(f"steps must be positive, got {self.steps}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.repeats != AUTO_REPEATS and not (isinstance(self.repeats, int) and self.repeats >= 1):
            raise ConfigError(f"repeats must be a positive integer or {AUTO_REPEATS}, got {self.repeats!r}")
        if self.max_repeats < 3:
            raise ConfigError(
                f"max_repeats must be >= 3 (the fewest runs repeats=auto decides from), got "
                f"{self.max_repeats}"
            )
        if not 0 <= self.equivalence < 1:
            raise ConfigError(f"equivalence must be in [0, 1) (0.02 = 1 ± 2%), got {self.equivalence}")
        for key in ("batch_size", "grad_accum", "model.m", "model.n", "model.k"):
            value = getattr(self.model, key[6:]) if key.startswith("model.") else getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"{key} must be positive, got {value}")
        if self.model.kernel not in (None, *GEMM_KERNELS):
            raise ConfigError(
                f"model.kernel must be one of {GEMM_KERNELS} or null, got {self.model.kernel!r}"
            )
        if self.model.timing not in GEMM_TIMINGS:
            raise ConfigError(f"model.timing must be one of {GEMM_TIMINGS}, got {self.model.timing!r}")
        if self.model.layer not in (None, *GEMM_LAYERS):
            raise ConfigError(f"model.layer must be one of {GEMM_LAYERS} or null, got {self.model.layer!r}")
        if self.precision.name not in PRECISIONS:
            raise ConfigError(
                f"precision.name must be one of {tuple(PRECISIONS)}, got {self.precision.name!r}"
            )
        if self.precision.recipe not in FP8_RECIPES:
            raise ConfigError(f"precision.recipe must be one of {FP8_RECIPES}, got {self.precision.recipe!r}")
        if self.data.source not in DATA_SOURCES:
            raise ConfigError(f"data.source must be one of {DATA_SOURCES}, got {self.data.source!r}")
        if self.data.source != "synthetic" and not self.data.path:
            raise ConfigError(f"data.source={self.data.source} needs data.path")
        if self.data.path and self.data.source != "synthetic":
            path = Path(self.data.path)
            if not path.exists():
                raise ConfigError(f"data.path does not exist: {self.data.path}")
            # text and bin are one file each, an image folder is a directory of class folders;
            # a custom model's reader takes what it takes
            wants_dir = {"imagefolder": True, "text": False, "bin": False}.get(self.data.source)
            if wants_dir is not None and path.is_dir() != wants_dir:
                raise ConfigError(
                    f"data.source={self.data.source} needs a {'directory' if wants_dir else 'file'}"
                    f" as data.path, got {self.data.path}"
                )
        if self.data.workers < 0:
            raise ConfigError(f"data.workers must be >= 0, got {self.data.workers}")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ConfigError(f"device must be auto, cuda or cpu, got {self.device!r}")
        mode = self.backend.mode
        if mode not in (None, *INDUCTOR_MODES):
            raise ConfigError(f"backend.mode must be one of {INDUCTOR_MODES}, got {mode!r}")
        if mode not in (None, "default") and self.backend.name != "inductor":
            raise ConfigError(f"backend.mode={mode} is an inductor mode; backend is {self.backend.name}")
        if self.backend.name != BASELINE_BACKEND and self.warmup_steps < 1:
            raise ConfigError("compiled backends need warmup_steps >= 1: compilation must not be measured")
        if self.compile.measure not in COMPILE_MEASURES:
            raise ConfigError(
                f"compile.measure must be one of {COMPILE_MEASURES}, got {self.compile.measure!r}"
            )
        if self.compile.measure == "cold_warm" and self.distributed.world_size > 1:
            raise ConfigError(
                "compile.measure=cold_warm measures one process's compile; this cell trains as "
                f"{self.distributed.world_size} processes"
            )
        if self.backend.compile_optimizer and self.precision.name == "fp16":
            raise ConfigError("backend.compile_optimizer with fp16: GradScaler calls the optimizer itself")
        self._validate_distributed()
        self._validate_measure()

    def _validate_measure(self) -> None:
        m = self.measure
        if m.min_seconds < 0:
            raise ConfigError(f"measure.min_seconds must be >= 0, got {m.min_seconds}")
        if m.max_steps is not None and m.max_steps < 1:
            raise ConfigError(f"measure.max_steps must be >= 1 or null, got {m.max_steps}")
        if m.max_seconds is not None and not m.max_seconds > 0:
            raise ConfigError(f"measure.max_seconds must be > 0 or null, got {m.max_seconds}")
        if m.max_seconds is not None and m.max_seconds < m.min_seconds:
            raise ConfigError(
                f"measure.max_seconds ({m.max_seconds}) must be >= measure.min_seconds ({m.min_seconds})"
            )
        if m.rel_ci is not None and not 0 < m.rel_ci < 1:
            raise ConfigError(
                f"measure.rel_ci must be between 0 and 1 (0.01 = ±1% of the median), got {m.rel_ci}"
            )
        if m.rel_ci is not None and m.max_steps is None and m.max_seconds is None:
            raise ConfigError(
                "measure.rel_ci needs measure.max_steps or measure.max_seconds: a precision that is "
                "never reached would measure forever"
            )
        if m.block_seconds < 0 or m.block_steps < 1:
            raise ConfigError(
                f"measure.block_seconds must be >= 0 and measure.block_steps >= 1, got {m.block_seconds} "
                f"and {m.block_steps}"
            )
        if m.min_pairs < 6:
            raise ConfigError(
                f"measure.min_pairs must be >= 6 (a 95% interval of a median), got {m.min_pairs}"
            )

    def _validate_distributed(self) -> None:
        dist = self.distributed
        for key in ("nodes", "tasks_per_node"):
            if getattr(dist, key) < 1:
                raise ConfigError(f"distributed.{key} must be >= 1, got {getattr(dist, key)}")
        if dist.backend not in DIST_BACKENDS:
            raise ConfigError(f"distributed.backend must be one of {DIST_BACKENDS}, got {dist.backend!r}")
        if dist.backend == "nccl" and self.device == "cpu":
            raise ConfigError("distributed.backend=nccl needs GPUs; device=cpu trains with gloo")
        # DDP's first bucket holds 1 MiB, and dynamo's DDPOptimizer refuses a smaller cap than that.
        if dist.bucket_cap_mb is not None and dist.bucket_cap_mb < 1:
            raise ConfigError(
                f"distributed.bucket_cap_mb must be >= 1 (DDP's first bucket), got {dist.bucket_cap_mb}"
            )


#: Top-level keys that belong to the orchestrator; a workload ignores them.
FOREIGN_TOP_LEVEL_KEYS = frozenset({"cluster", "hydra", "experiment", "executor", "sweep", "suite"})


#: Python types a YAML value may have for each annotated scalar type (an int is a valid float).
_ACCEPTED_TYPES = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}


def _check_type(hint: Any, value: Any, key: str) -> None:
    """Reject a value of the wrong scalar type (`steps: abc`), naming the key."""
    args = _union_members(hint)
    if value is None and type(None) in args:
        return
    for candidate in (t for t in args if t is not type(None)):
        accepted = _ACCEPTED_TYPES.get(candidate)
        if accepted is None:
            return  # not a scalar type (dict, ...): nothing to check here
        if isinstance(value, bool) and candidate is not bool:
            continue  # bool is an int subclass, but `steps: true` is a mistake
        if isinstance(value, accepted):
            return
    raise ConfigError(f"config key {key} must be {_type_name(hint)}, got {value!r}")


@functools.cache
def _union_members(hint: Any) -> tuple[Any, ...]:
    """(int, NoneType) for `int | None`; (hint,) for anything that is not a union."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _type_name(hint: Any) -> str:
    names = [getattr(t, "__name__", str(t)) for t in _union_members(hint)]
    return " or ".join("null" if n == "NoneType" else n for n in names)


@functools.cache
def _fields_and_hints(cls: type) -> tuple[dict[str, dataclasses.Field], dict[str, Any]]:
    # get_type_hints evaluates the string annotations each call; a 10,000-cell sweep builds
    # a config per cell, so do it once per class.
    return {f.name: f for f in dataclasses.fields(cls)}, typing.get_type_hints(cls)


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    names, hints = _fields_and_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in names:
            if not where and key in FOREIGN_TOP_LEVEL_KEYS:
                continue
            raise ConfigError(
                moved_key(f"{where}{key}") or f"unknown config key '{where}{key}'; known: {sorted(names)}"
            )
        sub = names[key].default_factory
        if isinstance(sub, type) and dataclasses.is_dataclass(sub):
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key {where}{key} must be a mapping, got {value!r}")
            value = _build(sub, value, f"{where}{key}.")
        else:
            _check_type(hints[key], value, f"{where}{key}")
        kwargs[key] = value
    return cls(**kwargs)


def moved_key(text: str) -> str | None:
    """The one line that refuses a key which moved (workloads/contract/upgrade.py MOVED_CONFIG_KEYS)
    where `text` (a key, an override, Hydra's error) names one: a stored config.yaml is lifted, but an
    override or a config file of the user's is refused, as Hydra refuses any key it does not know."""
    for old, new in MOVED_CONFIG_KEYS.items():
        if old in text:
            return f"{old} is now {new}, the sweep's own setting beside repeats: write {new}=VALUE"
    return None


def cell_config_from_dict(values: Mapping[str, Any]) -> CellConfig:
    """Build and validate a CellConfig from a plain (already resolved) mapping."""
    cfg = _build(CellConfig, values, "")
    cfg.validate()
    return cfg


def distributed_section(config: Mapping[str, Any]) -> DistributedConfig:
    """The `distributed` section of a resolved cell config (the defaults where it has none)."""
    return DistributedConfig(**(config.get("distributed") or {}))


def load_cell_config(path: str | Path) -> CellConfig:
    """Read a resolved `config.yaml` written by the orchestrator (or by hand)."""
    with open(path) as fh:
        try:
            values = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(values, Mapping):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return cell_config_from_dict(lift_config(values))


def cell_config_to_dict(cfg: CellConfig) -> dict[str, Any]:
    """The plain-dict form, as written to `config.yaml` and hashed into the cell id."""
    return _plain(cfg)


def _plain(value: Any) -> Any:
    # dataclasses.asdict deep-copies every leaf; config leaves are immutable scalars, so this
    # walk gives the same dict several times faster (it runs once per cell of a sweep).
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.cache
def _later_section_defaults() -> dict[str, dict[str, Any]]:
    """The sections added after cells existed, at their defaults (built once: a sweep digests every cell)."""
    return {
        "distributed": cell_config_to_dict(DistributedConfig()),
        "measure": cell_config_to_dict(MeasureConfig()),
        "compile": cell_config_to_dict(CompileConfig()),
    }


#: Keys added to a section after cells existed, with the value at which they stay out of the digest.
_LATER_KEYS: dict[str, dict[str, Any]] = {
    "model": {
        "target": None,
        "m": None,
        "n": None,
        "k": None,
        "kernel": None,
        "timing": SUSTAINED,
        "layer": None,
    },
    "precision": {"recipe": PrecisionConfig.recipe},
    "measure": {
        k: getattr(MeasureConfig, k) for k in ("paired", "block_seconds", "block_steps", "min_pairs")
    },
}


#: Top-level keys added after cells existed, with the value at which they stay out of the digest.
_LATER_TOP_LEVEL_KEYS: dict[str, Any] = {"environment": None}


@functools.cache
def _sweep_settings() -> tuple[str, ...]:
    """The names of the fields marked SWEEP_SETTING."""
    return tuple(f.name for f in dataclasses.fields(CellConfig) if f.metadata.get("sweep_setting"))


def config_digest(cfg: CellConfig | Mapping[str, Any]) -> str:
    """A stable 12-hex-digit id of a resolved config (the `cell_id` field and the sweep's own settings
    excluded)."""
    values = cell_config_to_dict(cfg) if isinstance(cfg, CellConfig) else dict(cfg)
    for name in ("cell_id", *_sweep_settings()):
        values.pop(name, None)
    # Sections (`distributed`, `measure`, `compile`) and keys added after cells existed are left out at
    # their defaults, so that re-running an older sweep still finds its completed cells.
    for section, defaults in _later_section_defaults().items():
        if values.get(section) == defaults:
            del values[section]
    for key, default in _LATER_TOP_LEVEL_KEYS.items():  # and top-level keys (`environment`)
        if key in values and values[key] == default:
            del values[key]
    for section, keys in _LATER_KEYS.items():  # likewise keys added to a section (model.target)
        if isinstance(part := values.get(section), Mapping):
            values[section] = {k: v for k, v in part.items() if not (k in keys and v == keys[k])}
    blob = json.dumps(values, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
