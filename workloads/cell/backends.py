"""Execution backends: how a cell's model (and optionally its optimizer step) is compiled.

`apply_backend` returns the module to train and a `CompiledRun` describing what was asked
for; workloads/instruments/dynamo_records.py reads dynamo's own records afterwards, so that a cell can prove
that compilation happened (graph count > 0) instead of trusting that it did.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from workloads.cell.catalog import check_backend
from workloads.cell.config import BackendConfig, ConfigError
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED, NOT_COMPILED

#: Inductor modes that replay CUDA graphs (cudagraph trees), like the dynamo `cudagraphs` backend.
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")


def wants_cudagraphs(cfg: BackendConfig) -> bool:
    """Whether the backend asked for CUDA graph replay (the point of `cudagraphs`, reduce-overhead)."""
    return cfg.name == "cudagraphs" or (cfg.name == "inductor" and cfg.mode in CUDAGRAPH_MODES)


@dataclass
class CompiledRun:
    module: nn.Module
    """The module to train: the original (eager, regional) or its compiled/traced wrapper."""
    uses_dynamo: bool
    marks_cudagraph_steps: bool
    """Call torch.compiler.cudagraph_mark_step_begin() before every forward (CUDA graph trees
    otherwise treat gradient-accumulation micro-steps as one step and overwrite live outputs)."""
    setup_time_s: float
    """Time spent compiling ahead of the first step (torchscript tracing); dynamo compiles lazily."""


def compile_kwargs(cfg: BackendConfig) -> dict:
    """torch.compile's keyword arguments for the backend config."""
    kwargs: dict = {"backend": cfg.name, "fullgraph": cfg.fullgraph, "dynamic": cfg.dynamic}
    if cfg.options:  # torch.compile accepts either mode or options, not both
        kwargs["options"] = dict(cfg.options)
    elif cfg.mode not in (None, "default"):
        kwargs["mode"] = cfg.mode
    return kwargs


def repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The model's repeated building block instances (transformer layers, residual blocks):
    the children of ModuleList/Sequential containers whose class occurs most often there."""
    children = [
        child
        for container in module.modules()
        if isinstance(container, (nn.ModuleList, nn.Sequential))
        for child in container.children()
        if any(True for _ in child.children())  # blocks, not single layers
    ]
    counts = Counter(type(child) for child in children)
    if not counts:
        return []
    block_type, _ = counts.most_common(1)[0]
    return [child for child in children if type(child) is block_type]


def apply_backend(
    module: nn.Module,
    cfg: BackendConfig,
    example_inputs: tuple[torch.Tensor, ...],
    autocast: Callable[..., AbstractContextManager],
    on_cuda: bool,
    wrap: Callable[[nn.Module], nn.Module] = lambda m: m,
) -> CompiledRun:
    """Prepare `module` for training under backend `cfg`.

    `example_inputs` are one real batch's model inputs (torchscript traces with them);
    `autocast(cache_enabled=...)` makes the precision context the training step runs under.
    `wrap` (DDP for a distributed cell) goes around the module as it is trained: around the
    traced module, around the regionally compiled one, and inside whole-model torch.compile,
    which is then given the wrapper (how DDP and torch.compile are meant to be combined).
    """
    check_backend(cfg)
    if cfg.name == BASELINE_BACKEND:
        return CompiledRun(wrap(module), uses_dynamo=False, marks_cudagraph_steps=False, setup_time_s=0.0)
    if cfg.name == "torchscript":
        start = time.perf_counter()
        # Traced under the training precision (autocast casts become part of the graph);
        # cache_enabled=False keeps autocast's weight-cast cache out of the trace.
        with autocast(cache_enabled=False):
            traced = torch.jit.trace(module, example_inputs, check_trace=False)
        return CompiledRun(
            wrap(traced),
            uses_dynamo=False,
            marks_cudagraph_steps=False,
            setup_time_s=time.perf_counter() - start,
        )
    marks = on_cuda and wants_cudagraphs(cfg)
    kwargs = compile_kwargs(cfg)
    if cfg.regional:
        blocks = repeated_blocks(module)
        if not blocks:
            raise ConfigError(f"regional compilation: no repeated blocks found in {type(module).__name__}")
        for block in blocks:
            block.compile(**kwargs)  # in place: the module tree and its state_dict keys stay as they are
        return CompiledRun(wrap(module), uses_dynamo=True, marks_cudagraph_steps=marks, setup_time_s=0.0)
    return CompiledRun(
        torch.compile(wrap(module), **kwargs), uses_dynamo=True, marks_cudagraph_steps=marks, setup_time_s=0.0
    )


def compile_optimizer_step(optimizer: torch.optim.Optimizer, cfg: BackendConfig) -> Callable[[], None]:
    """The optimizer step as a compiled function (PyTorch's "compiling the optimizer" recipe)."""
    kwargs = {k: v for k, v in compile_kwargs(cfg).items() if k in ("backend", "mode", "options")}

    @torch.compile(fullgraph=False, **kwargs)
    def step() -> None:
        optimizer.step()

    return step


def compiled_status(cfg: BackendConfig, run: dict[str, Any]) -> str:
    """A finished cell's status from its run row: `completed`, or `not_compiled` (with the error text
    put in `run`) where the backend compiled nothing or CUDA graphs were asked for and skipped."""
    if cfg.name != BASELINE_BACKEND and not run.get("graph_count"):
        run["error"] = (
            f"backend {cfg.name} was requested but no graph was compiled "
            "(torch.compile disabled, e.g. TORCH_COMPILE_DISABLE=1?); steps ran eagerly"
        )
        return NOT_COMPILED
    if wants_cudagraphs(cfg) and run.get("cudagraph_skips"):
        run["error"] = (
            f"backend {cfg.name} (mode {cfg.mode}) asked for CUDA graphs, but "
            f"{run['cudagraph_skips']} graph(s) ran without them (CPU device or unsupported "
            "ops: the job log names the reason)"
        )
        return NOT_COMPILED
    return COMPLETED
