"""Typed configuration of one cell: what `run_cell` needs, and nothing about how it was scheduled.

The dataclasses' defaults are the only ones: the orchestrator registers them with Hydra
(orchestrator/grid/config_store.py) under conf/'s groups, composes each cell and writes it to
`cells/<cell_id>/config.yaml`. Each section has its owner: a training cell's keys are the model's,
the backend's, ...; a GEMM cell's own keys are the `gemm` section (`GemmConfig`). Reading a config
back (its keys and types checked) is workloads/cell/config_io.py, the values that can never run
workloads/cell/validation.py, the cell id workloads/cell/cell_id.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workloads.contract.vocabulary import AUTO_REPEATS, BASELINE_BACKEND, EQUIVALENCE, SUSTAINED

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


@dataclass
class GemmConfig:
    """model=gemm's own keys (docs/gemm.md): the GEMM's shape, its kernel, how it is timed, or a layer of
    GEMMs instead of one; every cell has the section, only a GEMM cell may set it
    (workloads/cell/catalog.py `check_gemm`)."""

    m: int | None = None
    """Rows of A and of the product (A: M x K, B: K x N); null = the size preset's."""
    n: int | None = None
    """Columns of B and of the product; null = the size preset's."""
    k: int | None = None
    """The inner dimension; null = the size preset's."""
    kernel: str | None = None
    """With precision.name=fp8 (tensorwise), backend=eager: the GEMM runs one of the
    post's Triton kernels instead of cuBLAS, `triton_base` (data-parallel) or `triton_splitk`, at the
    tile configuration timed fastest for the cell's shape (docs/gemm.md); null = cuBLAS."""
    timing: str = SUSTAINED
    """How the GEMM is timed, one of GEMM_TIMINGS: `sustained` (the measured loop's seconds of
    CUDA-graph replays) or `burst` (`steps` short bursts of replays, each after an idle pause; their
    median) (docs/gemm.md "Timing modes")."""
    layer: str | None = None
    """With precision.name=fp8 (tensorwise), backend=eager: the GEMMs of a whole layer
    (`llama3_70b_attention`: its q, k, v and o projections at M = gemm.m tokens), launched one by
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
    gemm: GemmConfig = field(default_factory=GemmConfig)
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
