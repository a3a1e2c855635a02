"""The private torch APIs of the GEMM cell, each wrapped once here and pinned by
tests/unit/orchestrator/test_private_apis.py: checked on torch 2.11 (the GPU machines) and 2.15 (CI,
CPU-only).

- `torch._scaled_mm`: cuBLAS's fp8 GEMM with scales (PyTorch has no public fp8 matmul).
- `torch._inductor.select_algorithm.add_feedback_saver` / `clear_feedback_savers`: max-autotune
  calls each saver with its timings of every candidate kernel of a GEMM; the fastest is its choice.
- `torch._inductor.config.fx_graph_cache` and `torch._functorch.config.enable_autograd_cache`: with
  either cache hit inductor lowers nothing, and no saver hears which kernel the cached graph runs.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

#: The torch versions these wrappers were checked on (tests/unit/orchestrator/test_private_apis.py).
CHECKED_TORCH = ("2.11", "2.15")


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """a @ b of fp8 operands (b column-major) with fp32 dequantising scales, into bf16: scales of
    shape (1, 1) each (tensorwise) or (M, 1) and (1, N) (rowwise)."""
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


@dataclass
class AutotuneChoice:
    kernel: str
    """The name inductor gives the fastest candidate (`triton_mm_4`, `_scaled_mm`, `mm`, ...)."""
    us: float
    """The autotuner's own timing of it, µs."""


class AutotuneChoices:
    """The kernel max-autotune chose for each GEMM it tuned while this recorder is `listening`."""

    def __init__(self) -> None:
        self.choices: list[AutotuneChoice] = []

    def _save(self, timings, name, input_nodes, choices, profiled_time, precompile_times) -> None:
        # The signature of inductor's FeedbackFunction; timings are milliseconds (inductor's do_bench).
        finite = {choice: ms for choice, ms in timings.items() if math.isfinite(ms)}
        if finite:
            best = min(finite, key=finite.__getitem__)
            self.choices.append(AutotuneChoice(str(getattr(best, "name", best)), finite[best] * 1e3))

    @contextlib.contextmanager
    def listening(self) -> Iterator[AutotuneChoices]:
        """Hear the autotuner while inside; its caches of compiled graphs off, so that it runs."""
        from torch._functorch import config as functorch_config
        from torch._inductor import config as inductor_config
        from torch._inductor import select_algorithm

        select_algorithm.add_feedback_saver(self._save)
        try:
            with (
                inductor_config.patch(fx_graph_cache=False),
                functorch_config.patch(enable_autograd_cache=False),
            ):
                yield self
        finally:
            select_algorithm.clear_feedback_savers()  # there is no removing of one saver

    @property
    def last(self) -> AutotuneChoice | None:
        return self.choices[-1] if self.choices else None
