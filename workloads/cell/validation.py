"""The values of a cell's config that can never run (`validate`), refused before any work starts:
a negative count, a name outside its list, a path that does not exist. Whether a model, backend
and precision go together is the catalogue's (workloads/cell/catalog.py `check_cell`)."""

from __future__ import annotations

from pathlib import Path

from workloads.cell.config import (
    COMPILE_MEASURES,
    DATA_SOURCES,
    DIST_BACKENDS,
    FP8_RECIPES,
    GEMM_LAYERS,
    INDUCTOR_MODES,
    CellConfig,
    ConfigError,
    GemmConfig,
    MeasureConfig,
)
from workloads.cell.precision import PRECISIONS
from workloads.contract.vocabulary import AUTO_REPEATS, BASELINE_BACKEND, GEMM_KERNELS, GEMM_TIMINGS


def validate(cfg: CellConfig) -> None:
    """Raise ConfigError for values of `cfg` that can never run, before any work starts."""
    if cfg.steps <= 0:
        raise ConfigError(f"steps must be positive, got {cfg.steps}")
    if cfg.warmup_steps < 0:
        raise ConfigError(f"warmup_steps must be >= 0, got {cfg.warmup_steps}")
    if cfg.repeats != AUTO_REPEATS and not (isinstance(cfg.repeats, int) and cfg.repeats >= 1):
        raise ConfigError(f"repeats must be a positive integer or {AUTO_REPEATS}, got {cfg.repeats!r}")
    if cfg.max_repeats < 3:
        raise ConfigError(
            f"max_repeats must be >= 3 (the fewest runs repeats=auto decides from), got {cfg.max_repeats}"
        )
    if not 0 <= cfg.equivalence < 1:
        raise ConfigError(f"equivalence must be in [0, 1) (0.02 = 1 ± 2%), got {cfg.equivalence}")
    for key in ("batch_size", "grad_accum"):
        if (value := getattr(cfg, key)) is not None and value <= 0:
            raise ConfigError(f"{key} must be positive, got {value}")
    _validate_gemm(cfg.gemm)
    if cfg.precision.name not in PRECISIONS:
        raise ConfigError(f"precision.name must be one of {tuple(PRECISIONS)}, got {cfg.precision.name!r}")
    if cfg.precision.recipe not in FP8_RECIPES:
        raise ConfigError(f"precision.recipe must be one of {FP8_RECIPES}, got {cfg.precision.recipe!r}")
    if cfg.data.source not in DATA_SOURCES:
        raise ConfigError(f"data.source must be one of {DATA_SOURCES}, got {cfg.data.source!r}")
    if cfg.data.source != "synthetic" and not cfg.data.path:
        raise ConfigError(f"data.source={cfg.data.source} needs data.path")
    if cfg.data.path and cfg.data.source != "synthetic":
        path = Path(cfg.data.path)
        if not path.exists():
            raise ConfigError(f"data.path does not exist: {cfg.data.path}")
        # text and bin are one file each, an image folder is a directory of class folders;
        # a custom model's reader takes what it takes
        wants_dir = {"imagefolder": True, "text": False, "bin": False}.get(cfg.data.source)
        if wants_dir is not None and path.is_dir() != wants_dir:
            raise ConfigError(
                f"data.source={cfg.data.source} needs a {'directory' if wants_dir else 'file'}"
                f" as data.path, got {cfg.data.path}"
            )
    if cfg.data.workers < 0:
        raise ConfigError(f"data.workers must be >= 0, got {cfg.data.workers}")
    if cfg.device not in ("auto", "cuda", "cpu"):
        raise ConfigError(f"device must be auto, cuda or cpu, got {cfg.device!r}")
    mode = cfg.backend.mode
    if mode not in (None, *INDUCTOR_MODES):
        raise ConfigError(f"backend.mode must be one of {INDUCTOR_MODES}, got {mode!r}")
    if mode not in (None, "default") and cfg.backend.name != "inductor":
        raise ConfigError(f"backend.mode={mode} is an inductor mode; backend is {cfg.backend.name}")
    if cfg.backend.name != BASELINE_BACKEND and cfg.warmup_steps < 1:
        raise ConfigError("compiled backends need warmup_steps >= 1: compilation must not be measured")
    if cfg.compile.measure not in COMPILE_MEASURES:
        raise ConfigError(f"compile.measure must be one of {COMPILE_MEASURES}, got {cfg.compile.measure!r}")
    if cfg.compile.measure == "cold_warm" and cfg.distributed.world_size > 1:
        raise ConfigError(
            "compile.measure=cold_warm measures one process's compile; this cell trains as "
            f"{cfg.distributed.world_size} processes"
        )
    if cfg.backend.compile_optimizer and cfg.precision.name == "fp16":
        raise ConfigError("backend.compile_optimizer with fp16: GradScaler calls the optimizer itself")
    _validate_distributed(cfg)
    _validate_measure(cfg.measure)


def _validate_measure(m: MeasureConfig) -> None:
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
        raise ConfigError(f"measure.min_pairs must be >= 6 (a 95% interval of a median), got {m.min_pairs}")


def _validate_distributed(cfg: CellConfig) -> None:
    dist = cfg.distributed
    for key in ("nodes", "tasks_per_node"):
        if getattr(dist, key) < 1:
            raise ConfigError(f"distributed.{key} must be >= 1, got {getattr(dist, key)}")
    if dist.backend not in DIST_BACKENDS:
        raise ConfigError(f"distributed.backend must be one of {DIST_BACKENDS}, got {dist.backend!r}")
    if dist.backend == "nccl" and cfg.device == "cpu":
        raise ConfigError("distributed.backend=nccl needs GPUs; device=cpu trains with gloo")
    # DDP's first bucket holds 1 MiB, and dynamo's DDPOptimizer refuses a smaller cap than that.
    if dist.bucket_cap_mb is not None and dist.bucket_cap_mb < 1:
        raise ConfigError(
            f"distributed.bucket_cap_mb must be >= 1 (DDP's first bucket), got {dist.bucket_cap_mb}"
        )


def _validate_gemm(gemm: GemmConfig) -> None:
    """The `gemm` section's values; whether the cell may set them is workloads/cell/catalog.py's."""
    for key in ("m", "n", "k"):
        if (value := getattr(gemm, key)) is not None and value <= 0:
            raise ConfigError(f"gemm.{key} must be positive, got {value}")
    if gemm.kernel not in (None, *GEMM_KERNELS):
        raise ConfigError(f"gemm.kernel must be one of {GEMM_KERNELS} or null, got {gemm.kernel!r}")
    if gemm.timing not in GEMM_TIMINGS:
        raise ConfigError(f"gemm.timing must be one of {GEMM_TIMINGS}, got {gemm.timing!r}")
    if gemm.layer not in (None, *GEMM_LAYERS):
        raise ConfigError(f"gemm.layer must be one of {GEMM_LAYERS} or null, got {gemm.layer!r}")
