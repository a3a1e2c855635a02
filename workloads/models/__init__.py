"""Model registry: `MODEL_FAMILIES[name]` = how to build the family and its size presets (its
name, sizes and input kind are the catalogue's, workloads/cell/catalog.py).

A ModelSpec carries everything the training loop and the data pipeline need to know about a
model family: the module, its default batch, the shape of one sample, how to compute the loss,
its optimizer, and (for GPT) the analytic FLOPs per token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from workloads.cell.catalog import SIZES, check_model, gpt_arch
from workloads.cell.config import CellConfig, ConfigError
from workloads.models.custom import CustomModel, build_custom_model
from workloads.models.gpt import GPT, GPT_SIZES
from workloads.models.vision import NUM_CLASSES, VISION_SIZES, create_timm_model

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
OptimizerFactory = Callable[[nn.Module, bool], torch.optim.Optimizer]


@dataclass
class ModelSpec:
    module: nn.Module
    arch: str
    """What was built: `gpt-6x6x384` or the timm model name."""
    kind: str
    """`tokens` (inputs are token ids) or `images`."""
    batch_size: int
    grad_accum: int
    sample_shape: tuple[int, ...]
    """One input sample: (T,) tokens or (C, H, W) pixels."""
    num_classes: int
    """Vocabulary size (tokens) or classes (images): the range of the targets."""
    items_per_sample: int
    """Tokens per sequence, or 1 image: what throughput counts."""
    params: int
    """Parameter count (GPT: nanoGPT's, without position embeddings)."""
    flops_per_item: float | None
    """Analytic training FLOPs per item where the family defines one (GPT), else None."""
    loss: LossFn
    make_optimizer: OptimizerFactory
    """(module, fused) -> optimizer; fused kernels are used on CUDA unless the step is compiled."""
    default_grad_clip: float
    """Gradient clipping when the config leaves it null (nanoGPT 1.0, timm none)."""
    output_head: str | None = None
    """Qualified name of the layer that makes the outputs (GPT's `lm_head`, a timm model's classifier),
    which precision=fp8 leaves in bf16 (workloads/cell/fp8.py); None where there is none to spare."""
    custom: CustomModel | None = None
    """model=custom: what its target returned; its batches replace the data sources' (workloads/data)."""


def _gpt_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return module(x, y)


def _classification_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(module(x), y)


def build_gpt(cfg: CellConfig, vocab_size: int | None) -> ModelSpec:
    """nanoGPT at a size preset, or `model.arch`'s layers, heads and width at the preset's context and
    batch; `vocab_size` from the data replaces the preset's, as nanoGPT's meta.pkl."""
    preset = GPT_SIZES[cfg.size]
    overrides = {}
    if cfg.model.arch:
        overrides.update(zip(("n_layer", "n_head", "n_embd"), gpt_arch(cfg.model.arch)))
    if vocab_size is not None:
        overrides["vocab_size"] = vocab_size
    if cfg.model.dropout is not None:
        overrides["dropout"] = cfg.model.dropout
    arch_cfg = dataclasses.replace(preset, **overrides)
    model = GPT(arch_cfg)
    lr = cfg.optim.lr if cfg.optim.lr is not None else 6e-4
    wd = cfg.optim.weight_decay if cfg.optim.weight_decay is not None else 0.1

    def make_optimizer(module: nn.Module, fused: bool) -> torch.optim.Optimizer:
        return torch.optim.AdamW(module.optimizer_groups(wd), lr=lr, betas=(0.9, 0.95), fused=fused)

    return ModelSpec(
        module=model,
        arch=f"gpt-{arch_cfg.n_layer}x{arch_cfg.n_head}x{arch_cfg.n_embd}",
        kind="tokens",
        batch_size=arch_cfg.batch_size,
        grad_accum=arch_cfg.grad_accum,
        sample_shape=(arch_cfg.block_size,),
        num_classes=arch_cfg.vocab_size,
        items_per_sample=arch_cfg.block_size,
        params=model.num_params(),
        flops_per_item=model.flops_per_token(),
        loss=_gpt_loss,
        make_optimizer=make_optimizer,
        default_grad_clip=1.0,
        output_head="lm_head",
    )


def _module_name(model: nn.Module, layer: nn.Module) -> str | None:
    """The qualified name of `layer` inside `model`; None where it is not one of its modules
    (timm's classifier is nn.Identity when a model has none, still a named module)."""
    return next((name for name, module in model.named_modules() if module is layer), None)


def _classifier_name(model: nn.Module) -> str | None:
    """timm's classifier of `model` by name; None for a model registered with timm by its user
    without timm's `get_classifier` (the GPU tier's tiny classifier has none)."""
    get_classifier = getattr(model, "get_classifier", None)
    return None if get_classifier is None else _module_name(model, get_classifier())


def build_timm(cfg: CellConfig, vocab_size: int | None = None) -> ModelSpec:
    """A timm model (`model.arch`, or the size's ResNet) trained with SGD, as timm's benchmark."""
    preset = VISION_SIZES[cfg.size]
    arch = cfg.model.arch or preset.arch
    try:
        model = create_timm_model(arch)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    image_size = cfg.model.image_size or preset.image_size
    lr = cfg.optim.lr if cfg.optim.lr is not None else 0.01
    wd = cfg.optim.weight_decay if cfg.optim.weight_decay is not None else 1e-4

    def make_optimizer(module: nn.Module, fused: bool) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            module.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=wd, fused=fused
        )

    return ModelSpec(
        module=model,
        arch=arch,
        kind="images",
        batch_size=preset.batch_size,
        grad_accum=1,
        sample_shape=(3, image_size, image_size),
        num_classes=NUM_CLASSES,
        items_per_sample=1,
        params=sum(p.numel() for p in model.parameters()),
        flops_per_item=None,
        loss=_classification_loss,
        make_optimizer=make_optimizer,
        default_grad_clip=0.0,
        output_head=_classifier_name(model),
    )


def build_custom(cfg: CellConfig, vocab_size: int | None = None) -> ModelSpec:
    """The user's own model (`model.target`, workloads/models/custom.py), trained as it says."""
    target = str(cfg.model.target)
    built = build_custom_model(target, cfg.size)
    return ModelSpec(
        module=built.module,
        arch=target,
        kind="custom",
        batch_size=built.batch_size,
        grad_accum=1,
        sample_shape=(),  # the model's own batches have their own shape
        num_classes=0,
        items_per_sample=built.items_per_sample,
        params=sum(p.numel() for p in built.module.parameters()),
        flops_per_item=built.flops_per_item,
        loss=built.loss,
        make_optimizer=lambda module, fused: built.make_optimizer(module),  # fused is the user's choice
        default_grad_clip=0.0,
        output_head=built.output_head,
        custom=built,
    )


@dataclass(frozen=True)
class ModelFamily:
    build: Callable[[CellConfig, int | None], ModelSpec]
    sizes: Mapping[str, object]
    """Size presets by the catalogue's size names (tiny, small, ...)."""


MODEL_FAMILIES: dict[str, ModelFamily] = {
    "gpt": ModelFamily(build_gpt, GPT_SIZES),
    "resnet": ModelFamily(build_timm, VISION_SIZES),
    "timm": ModelFamily(build_timm, VISION_SIZES),
    "custom": ModelFamily(build_custom, dict.fromkeys(SIZES)),  # the user's builder reads the name
}


def build_model(cfg: CellConfig, vocab_size: int | None = None) -> ModelSpec:
    """Build the model of a cell on the CPU (the caller moves it), seeded by `cfg.seed`."""
    check_model(cfg)
    torch.manual_seed(cfg.seed)
    return MODEL_FAMILIES[cfg.model.name].build(cfg, vocab_size)
