"""The GEMM cell (`model=gemm`): one matrix multiply timed instead of a training step (docs/gemm.md).

`shapes` holds the sizes and the FLOP, byte and roofline arithmetic (torch-free), `kernels` the
operands and the timed callables (cuBLAS, `torch.compile` or a Triton kernel), `private_torch` the
private torch APIs they use, `triton_fp8` the post's Triton fp8 kernels, `triton_tuning` the choice of
their tiles, `kernel_check` the error bound they pass before they are timed, `timing` the CUDA-graph
replay (timed sustained), `bursts` its burst timing (`gemm.timing=burst`), and `cell` puts them
together as `GemmCell`, the counterpart of workloads/train_cell.py.
`layer` holds the GEMMs of the post's layer (`gemm.layer`) and the arithmetic of its profiled windows,
`layer_cell` the cell that runs them (`LayerCell`) and profiles one layer launched and as a CUDA graph.
"""
