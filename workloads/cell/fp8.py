"""precision=fp8 for training: torchao's float8 training swaps a model's Linear layers for
`Float8Linear`, whose matmuls run in fp8 with the scales of `precision.recipe`.

Not every Linear is converted: torch._scaled_mm needs both dimensions divisible by 16, and the
output head (a ModelSpec's `output_head`: GPT's lm_head, a timm model's classifier) stays in bf16,
as torchao's own recipes leave it, since its logits are what fp8 rounds worst. torchao is the
optional extra `compilebench[fp8]`, imported only here, only by fp8 cells.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workloads.cell.support import require_fp8

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

#: What a cell or the orchestrator says where torchao cannot be imported.
MISSING_TORCHAO = "precision=fp8 needs torchao, the optional extra: pip install 'compilebench[fp8]'"
#: torch._scaled_mm's alignment: both matrix dimensions of an fp8 matmul divisible by this.
FP8_ALIGNMENT = 16


@dataclass(frozen=True)
class LinearChoice:
    """Which Linear layers of a model become Float8Linear, and which stay and why."""

    converted: list[str]
    output_head: list[str]
    """Left in bf16: the output head."""
    misaligned: list[str]
    """Left in bf16: a dimension not divisible by FP8_ALIGNMENT."""

    def columns(self) -> dict[str, Any]:
        """The run row's columns."""
        return {
            "fp8_linears": len(self.converted),
            "fp8_skipped_head": len(self.output_head),
            "fp8_skipped_misaligned": len(self.misaligned),
        }


def choose_linears(module: nn.Module, output_head: str | None) -> LinearChoice:
    """Sort the model's nn.Linear layers (by qualified name) into converted and left, and why."""
    import torch.nn as nn

    converted, head, misaligned = [], [], []
    for name, layer in module.named_modules():
        if not isinstance(layer, nn.Linear):
            continue
        if output_head is not None and name == output_head:
            head.append(name)
        elif layer.in_features % FP8_ALIGNMENT or layer.out_features % FP8_ALIGNMENT:
            misaligned.append(name)
        else:
            converted.append(name)
    return LinearChoice(converted, head, misaligned)


def missing_extra(precision: str, trains: bool) -> str | None:
    """Why an fp8 cell cannot run here, known before it runs: a training cell needs torchao (a GEMM
    cell, `trains` false, only torch); None where it may. Torch-free: the orchestrator asks."""
    return MISSING_TORCHAO if precision == "fp8" and trains and not _torchao_installed() else None


@functools.cache
def _torchao_installed() -> bool:
    # Once per process: the grid check asks for every fp8 cell, and a lookup scans sys.path.
    return importlib.util.find_spec("torchao") is not None


def import_float8() -> Any:
    """torchao.float8, or ModuleNotFoundError naming the extra."""
    try:
        import torchao.float8 as float8
    except ImportError:
        raise ModuleNotFoundError(MISSING_TORCHAO) from None
    return float8


def convert_to_float8(
    module: nn.Module, device: torch.device, recipe: str, output_head: str | None
) -> dict[str, Any]:
    """Swap the chosen Linear layers of `module` (in place) for torchao's Float8Linear; the run
    row's columns. NotSupported on a device without fp8 tensor cores (with torchao or without: the
    device decides), before anything is swapped."""
    require_fp8(device)
    return swap_linears(import_float8(), module, recipe, output_head)


def swap_linears(float8: Any, module: nn.Module, recipe: str, output_head: str | None) -> dict[str, Any]:
    """The swap itself, on any device (it converts modules; only the fp8 matmuls need the GPU)."""
    choice = choose_linears(module, output_head)
    chosen = set(choice.converted)
    float8.convert_to_float8_training(
        module,
        config=float8.Float8LinearConfig.from_recipe_name(recipe),
        module_filter_fn=lambda _, name: name in chosen,
    )
    return choice.columns()
