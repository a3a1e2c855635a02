"""GEMM cells (`model=gemm`): the table, the figure, and the FP8 GEMM post's claims judged."""
