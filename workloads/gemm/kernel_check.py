"""The correctness check a Triton fp8 GEMM passes before it is timed: its product against a reference
at the cell's operands, element by element, within a bound derived from fp8/bf16 arithmetic (not
fitted to any run).

The reference: `torch._scaled_mm` (cuBLAS) on CUDA; on the CPU (Triton's interpreter) the fp32 matmul
of the dequantised operands. For x the exact product of the fp8 operands times scale_a·scale_b, a
kernel's c and the reference r each satisfy |c - x| <= acc + u(|x| + acc), where

    acc = scale_a·scale_b · ( 2^-13 · 32 · sum over 32-deep K chunks of max|A[m,k]|·max|B[k,n]|
                              + (K/32 + 1) · 2^-24 · sum_k |A[m,k]·B[k,n]| )
    u   = 2^-8 (bf16's unit roundoff; the scales' fp32 product adds < 2^-22, covered below)

The first term is a tensor core's sum of one 32-deep product in an accumulator of about 14 bits
(13 fraction bits of the chunk's largest term, truncated; DeepSeek-V3 report, section 3.3), once per
chunk; the second the fp32 additions of the chunks' sums (Higham's gamma_n). Both c and r obey it, so

    |c - r| <= 2·acc + 2u(1 + 2u)·(|r| + 3·acc)

(|x| <= |r| + acc + u(|x| + acc) to first order in u). On the CPU the reference is tighter (fp32
throughout), so the bound is loose there by at most 2x. It is loose, not blind: at M = 16, N = 512,
K = 8192 (make_operands, seed 5) the median bound is 19% of |r| and the right product reaches 0.07x
of it, while a product missing one 32-deep K block reaches 2.1x, one missing a 512-deep block (one
split's step) 7.4x and one with its rows shifted by one 37x (tests/unit/workloads/test_triton_fp8.py checks
the
last two kinds at a small shape).
"""

from __future__ import annotations

import torch

#: Depth of one tensor-core product (fp8 wgmma K) and the accumulator's fraction bits within it.
CHUNK = 32
CHUNK_FRACTION_BITS = 13
FP32_UNIT = 2.0**-24
BF16_UNIT = 2.0**-8


class KernelMismatch(RuntimeError):
    """A kernel's product is beyond the bound somewhere: the cell fails, nothing is timed."""


def reference(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """The product the kernel must match: cuBLAS's scaled fp8 GEMM on CUDA, else fp32 arithmetic."""
    if a.device.type == "cuda":
        from workloads.gemm.private_torch import scaled_mm

        return scaled_mm(a, b, scale_a, scale_b).float()
    return (a.float() * scale_a) @ (b.float() * scale_b)


def _chunk_amax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """max |x| over each CHUNK-long stretch of `dim` (K), zero-padded to a whole chunk."""
    k = x.shape[dim]
    pad = [0, 0, 0, 0]
    pad[1 if dim == 1 else 3] = -k % CHUNK  # F.pad lists the last dimension first
    padded = torch.nn.functional.pad(x.abs(), pad)
    if dim == 1:
        return padded.unflatten(1, (-1, CHUNK)).amax(dim=2)
    return padded.unflatten(0, (-1, CHUNK)).amax(dim=1)


def error_bound(
    r: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
) -> torch.Tensor:
    """The largest |c - r| each element may have (module docstring), float64."""
    a64, b64 = a.double(), b.double()
    scales = (scale_a.double() * scale_b.double()).reshape(())
    chunks = _chunk_amax(a64, 1) @ _chunk_amax(b64, 0)
    magnitude = a64.abs() @ b64.abs()
    k = a.shape[1]
    acc = scales * (2.0**-CHUNK_FRACTION_BITS * CHUNK * chunks + (k / CHUNK + 1) * FP32_UNIT * magnitude)
    return 2 * acc + 2 * BF16_UNIT * (1 + 2 * BF16_UNIT) * (r.double().abs() + 3 * acc)


class ProductCheck:
    """The reference and the bound of one set of operands, computed once (on a GPU at M = 64,
    N = K = 8192 two float64 matmuls), against which every candidate kernel's product is checked."""

    def __init__(
        self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
    ) -> None:
        self.reference = reference(a, b, scale_a, scale_b).double()
        self.bound = error_bound(self.reference, a, b, scale_a, scale_b)

    def __call__(self, label: str, c: torch.Tensor) -> float:
        """The worst |c - r| / bound over C (< 1 passes); KernelMismatch where an element is beyond it."""
        ratio = ((c.double() - self.reference).abs() / self.bound).nan_to_num(nan=float("inf"))
        worst = float(ratio.max())
        if not worst < 1:
            beyond = int((ratio >= 1).sum())
            where = tuple(int(i) for i in divmod(int(ratio.argmax()), c.shape[1]))
            raise KernelMismatch(
                f"{label}: {beyond} of {c.numel()} elements of the {c.shape[0]}x{c.shape[1]} product "
                f"beyond the fp8/bf16 error bound (worst {worst:.3g}x the bound at {where}); not timed"
            )
        return worst
