"""Numeric precision of a cell: autocast dtype, TF32 switches, loss scaling, and which peak
FLOP/s an MFU figure must be measured against. The one table of precisions (`PRECISIONS`): the
config validates names against it, so this module imports torch only where a cell runs."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    import torch.nn as nn


@dataclass(frozen=True)
class Precision:
    name: str
    autocast_dtype: str | None
    """Autocast dtype for the forward pass (a torch dtype's name); None runs in fp32."""
    tf32: bool
    """Allow TF32 tensor-core math for fp32 matmuls and convolutions."""
    grad_scaler: bool
    """Scale the loss (fp16 gradients underflow without it)."""
    peak_key: str
    """Column of the GPU peak table that bounds this precision: fp8, bf16, tf32 or fp32."""
    accuracy_tolerance: float
    """The relative loss difference a compiled cell may show against eager in the accuracy check
    (workloads/instruments/accuracy.py): PyTorch's harness's training tolerances."""
    float8_linears: bool = False
    """Swap the model's Linear layers for torchao's Float8Linear (workloads/cell/fp8.py)."""

    def apply_global_switches(self) -> None:
        """Set the process-wide TF32 switches (nanoGPT turns TF32 on alongside bf16)."""
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32

    def autocast(self, device_type: str, cache_enabled: bool = True) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        import torch

        return torch.autocast(
            device_type=device_type, dtype=getattr(torch, self.autocast_dtype), cache_enabled=cache_enabled
        )

    def convert_module(
        self, module: nn.Module, device: torch.device, recipe: str, output_head: str | None
    ) -> dict[str, Any]:
        """Convert the model's layers in place before the backend is applied; the run row's columns.
        fp8's Linear swap (NotSupported without fp8 tensor cores); for the others a no-op."""
        if not self.float8_linears:
            return {}
        from workloads.cell.fp8 import convert_to_float8

        return convert_to_float8(module, device, recipe, output_head)

    def make_scaler(self, device_type: str) -> torch.amp.GradScaler:
        """fp16's loss scaling; for the other precisions a disabled GradScaler: every call a no-op."""
        import torch

        return torch.amp.GradScaler(device_type, enabled=self.grad_scaler)


PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", None, tf32=False, grad_scaler=False, peak_key="fp32", accuracy_tolerance=1e-3),
    "tf32": Precision("tf32", None, tf32=True, grad_scaler=False, peak_key="tf32", accuracy_tolerance=1e-3),
    "bf16": Precision(
        "bf16", "bfloat16", tf32=True, grad_scaler=False, peak_key="bf16", accuracy_tolerance=1e-2
    ),
    "fp16": Precision(
        "fp16", "float16", tf32=True, grad_scaler=True, peak_key="bf16", accuracy_tolerance=1e-2
    ),
    # bf16 autocast around Linear layers whose matmuls run in fp8 (workloads/cell/fp8.py converts them);
    # MFU against the fp8 peak, the rate those matmuls may reach.
    "fp8": Precision(
        "fp8",
        "bfloat16",
        tf32=True,
        grad_scaler=False,
        peak_key="fp8",
        accuracy_tolerance=1e-2,
        float8_linears=True,
    ),
}
