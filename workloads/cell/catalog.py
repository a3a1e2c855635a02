"""What a cell may ask for, and `check_cell`, which refuses the rest: model families and what they
read, size names, data sources per kind, backends. Torch-free, because the orchestrator checks
every cell of a grid before submitting: importing torch took 1.8 of a 10,000-cell dry run's 7 s
(2 cores). Packages that only some cells need (timm, torch._dynamo) are imported when asked.

The builders live beside the things they build (workloads/models, workloads/cell/backends.py); a test
checks that they cover exactly the names here.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from typing import Any

from workloads.cell.config import BackendConfig, CellConfig, ConfigError, GemmConfig
from workloads.cell.fp8 import missing_extra
from workloads.cell.support import plan_refusal
from workloads.contract.vocabulary import BASELINE_BACKEND, short_error

#: The size presets of every model family.
SIZES = ("tiny", "small", "medium", "large", "xl")
#: The family whose cell times one GEMM instead of training a model (workloads/gemm/).
GEMM_FAMILY = "gemm"
#: model=gpt's `model.arch`: `gpt-<layers>x<heads>x<width>`, the name a GPT cell records, so that a
#: recorded arch can be asked for again; the size preset still gives context, vocabulary and batch.
GPT_ARCH = re.compile(r"gpt-(\d+)x(\d+)x(\d+)")
#: Model family -> what it reads: `tokens`, `images` or `custom` (decides which data sources fit);
#: a GEMM reads its own random operands.
FAMILY_KINDS = {
    "gpt": "tokens",
    "resnet": "images",
    "timm": "images",
    "custom": "custom",
    GEMM_FAMILY: "gemm",
}
#: The package that builds a family's models, where it is not the project itself.
FAMILY_LIBRARIES = {"resnet": "timm", "timm": "timm"}
#: Data sources that can feed each kind of model.
SOURCES_BY_KIND = {
    "tokens": ("synthetic", "text", "bin"),
    "images": ("synthetic", "imagefolder"),
    "custom": ("synthetic", "custom"),
    "gemm": ("synthetic",),
}
#: Precisions a GEMM cell runs in, and the fp8 recipes it has: scales per tensor or per row (the
#: third, rowwise_with_gw_hp, is about a weight gradient, which a GEMM has not).
GEMM_PRECISIONS = ("bf16", "fp16", "fp8")
GEMM_RECIPES = ("tensorwise", "rowwise")
#: Backends that are not dynamo backends; every other name goes to torch.compile(backend=name).
NON_DYNAMO_BACKENDS = (BASELINE_BACKEND, "torchscript")
#: Dynamo backends every torch 2.x has. Checking other names lists dynamo's registry, which
#: imports torch._dynamo (seconds).
BUILTIN_DYNAMO_BACKENDS = ("inductor", "cudagraphs", "aot_eager")


@functools.cache
def dynamo_backend_names() -> list[str]:
    """Names accepted by torch.compile(backend=...) in this torch installation."""
    import torch._dynamo

    return sorted(torch._dynamo.list_backends(exclude_tags=()))


def is_timm_model(arch: str) -> bool:
    """Whether timm can build `arch` (timm costs a second to import; GPT-only grids never need it)."""
    import timm

    return arch in timm.list_models()


def gpt_arch(arch: str) -> tuple[int, int, int]:
    """(layers, heads, width) of a GPT arch name; ConfigError for one that names no GPT."""
    match = GPT_ARCH.fullmatch(arch)
    if match is None:
        raise ConfigError(
            f"model=gpt takes model.arch=gpt-<layers>x<heads>x<width> (gpt-8x32x4096), not {arch!r}"
        )
    layers, heads, width = map(int, match.groups())
    if min(layers, heads, width) < 1 or width % heads:
        raise ConfigError(f"model.arch={arch}: the width must be a positive multiple of the heads")
    return layers, heads, width


def check_model(cfg: CellConfig) -> str:
    """The kind of input the cell's model reads; ConfigError for an unknown family, size or arch."""
    kind = FAMILY_KINDS.get(cfg.model.name)
    if kind is None:
        raise ConfigError(f"unknown model {cfg.model.name!r}; known: {sorted(FAMILY_KINDS)}")
    if cfg.size not in SIZES:
        raise ConfigError(f"model {cfg.model.name} has no size {cfg.size!r}; sizes: {list(SIZES)}")
    if cfg.model.name == "resnet" and cfg.model.arch and not cfg.model.arch.startswith("resnet"):
        raise ConfigError(
            f"model=resnet with arch {cfg.model.arch!r}: use model=timm for other architectures"
        )
    if cfg.model.name == "gpt" and cfg.model.arch:
        gpt_arch(cfg.model.arch)
    if kind == "images" and cfg.model.arch and not is_timm_model(cfg.model.arch):
        raise ConfigError(f"timm has no model named {cfg.model.arch!r} (model.arch)")
    if (kind == "custom") != bool(cfg.model.target):
        raise ConfigError(
            "model.target goes with model=custom (model=custom model.target=package.module:function)"
        )
    return kind


def check_data_source(cfg: CellConfig, kind: str) -> None:
    """ConfigError when the data source cannot feed a model reading `kind`."""
    if cfg.data.source not in SOURCES_BY_KIND[kind]:
        raise ConfigError(
            f"data.source={cfg.data.source} does not fit model {cfg.model.name} "
            f"(reads {kind}); use one of {SOURCES_BY_KIND[kind]}"
        )


def check_backend(cfg: BackendConfig) -> None:
    """ConfigError for a backend that does not exist here, or options it cannot honour."""
    if cfg.name in NON_DYNAMO_BACKENDS:
        if cfg.regional or cfg.compile_optimizer:
            raise ConfigError(f"backend={cfg.name}: regional/compile_optimizer need a dynamo backend")
    elif cfg.name not in BUILTIN_DYNAMO_BACKENDS and cfg.name not in dynamo_backend_names():
        raise ConfigError(
            f"unknown backend {cfg.name!r}; here: {[*NON_DYNAMO_BACKENDS, *dynamo_backend_names()]}"
        )


def check_gemm(cfg: CellConfig) -> None:
    """ConfigError for what a GEMM cell cannot be asked (or what only a GEMM cell can)."""
    if cfg.model.name != GEMM_FAMILY:
        defaults = GemmConfig()
        if given := [f"gemm.{k}={v}" for k, v in vars(cfg.gemm).items() if v != getattr(defaults, k)]:
            raise ConfigError(f"{given[0]}: the gemm section is a GEMM cell's, it goes with model=gemm")
        return
    if cfg.gemm.kernel is not None:
        check_post_gemms(cfg, f"gemm.kernel={cfg.gemm.kernel}")
    if cfg.gemm.layer is not None:
        check_layer(cfg)
    if cfg.precision.name not in GEMM_PRECISIONS:
        raise ConfigError(f"model=gemm runs in {GEMM_PRECISIONS}, not precision={cfg.precision.name}")
    if cfg.precision.name == "fp8" and cfg.precision.recipe not in GEMM_RECIPES:
        raise ConfigError(
            f"model=gemm has no weight gradient: precision.recipe={cfg.precision.recipe} does not apply; "
            f"use one of {GEMM_RECIPES}"
        )
    if cfg.backend.name == "torchscript" or cfg.backend.regional or cfg.backend.compile_optimizer:
        raise ConfigError(
            "model=gemm runs eager (cuBLAS) or torch.compile of the GEMM: no torchscript, "
            "regional or compile_optimizer"
        )
    if cfg.distributed.world_size > 1:
        raise ConfigError(f"model=gemm runs in one process, not {cfg.distributed.world_size}")
    if cfg.compile.measure != "once":
        raise ConfigError("model=gemm measures its compile once (compile.measure=once)")
    if batch := [key for key in ("batch_size", "grad_accum") if getattr(cfg, key) is not None]:
        raise ConfigError(f"model=gemm has no {batch[0]}: its shape is gemm.m, gemm.n, gemm.k")


def check_post_gemms(cfg: CellConfig, what: str) -> None:
    """`what` (`gemm.kernel=...`, `gemm.layer=...`): the post's GEMMs are fp8 with one scale per
    tensor, run as written (cuBLAS's, or the Triton kernel's)."""
    if (cfg.precision.name, cfg.precision.recipe) != ("fp8", "tensorwise"):
        raise ConfigError(
            f"{what} runs fp8 GEMMs with tensorwise scales: it needs precision.name=fp8 "
            f"precision.recipe=tensorwise, not {cfg.precision.name}/{cfg.precision.recipe}"
        )
    if cfg.backend.name != BASELINE_BACKEND:
        raise ConfigError(f"{what} runs its GEMMs as written: backend=eager, not {cfg.backend.name}")


def check_layer(cfg: CellConfig) -> None:
    """gemm.layer: the post's GEMMs (check_post_gemms), at the layer's own N and K per projection."""
    check_post_gemms(cfg, f"gemm.layer={cfg.gemm.layer}")
    if given := [key for key in ("n", "k") if getattr(cfg.gemm, key) is not None]:
        raise ConfigError(
            f"gemm.layer={cfg.gemm.layer} has its own N and K per projection: gemm.{given[0]} does not "
            "apply (gemm.m sets its tokens)"
        )


def check_cell(cfg: CellConfig, submitting: bool = False) -> None:
    """The configuration errors that need the catalogue, raised as ConfigError before any work.
    With `submitting` (the orchestrator's check of a grid) also a custom model's target, imported:
    in the cell's own process a target that fails is recorded as the cell's status instead."""
    kind = check_model(cfg)
    check_data_source(cfg, kind)
    check_backend(cfg.backend)
    check_gemm(cfg)
    precision = cfg.precision.name
    if submitting and (
        problem := plan_refusal(precision, device=cfg.device) or missing_extra(precision, kind != GEMM_FAMILY)
    ):
        raise ConfigError(problem)  # in the cell's own process: not_supported, or the import's error
    if submitting and kind == "custom":
        check_target(cfg.model.target)


# model=custom's target (workloads/models/custom.py) is imported here, torch-free as the rest: the
# grid check imports it before any cell is written, the cell's process to call it.


def _attribute(target: str) -> tuple[str, str]:
    """(module, attribute path) of `pkg.mod:build` or, as Hydra's `_target_`, `pkg.mod.build`."""
    module, colon, name = target.partition(":")
    if not colon:
        module, _, name = target.rpartition(".")
    if not module or not name:
        raise ConfigError(f"model.target={target}: expected package.module:function")
    return module, name


@functools.cache
def load_target(target: str) -> Callable[..., Any]:
    """The callable `model.target` names; ConfigError (one line) if it cannot be imported or called."""
    module_name, name = _attribute(target)
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as err:  # the user's module may raise anything while it imports
        raise ConfigError(
            f"model.target={target}: cannot import {module_name} "
            f"({type(err).__name__}: {short_error(str(err), 200)}); is its package on PYTHONPATH?"
        ) from None
    for part in name.split("."):
        if not hasattr(found, part):
            raise ConfigError(f"model.target={target}: {module_name} has no attribute {name!r}")
        found = getattr(found, part)
    if not callable(found):
        raise ConfigError(f"model.target={target}: {name} is not callable (type {type(found).__name__})")
    return found


def check_target(target: str | None) -> None:
    """The submitting side's check of `model=custom`: a target given, importable and callable."""
    if not target:
        raise ConfigError("model=custom needs model.target=package.module:function (docs/custom-models.md)")
    load_target(target)
