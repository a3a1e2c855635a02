"""Each cell's numbers, one row per cell (metrics.py `cell_metrics`), gathered from the column groups
beside it: the paired speedup, break-even, the GPU's busy share, energy, what a verdict cost; and the
GEMM cells' rows (gemm.py)."""
