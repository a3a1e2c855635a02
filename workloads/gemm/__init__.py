"""The GEMM cell (`model=gemm`): one matrix multiply timed instead of a training step (docs/gemm.md).

`shapes` holds the sizes and the FLOP, byte and roofline arithmetic (torch-free), `kernels` the
operands and the timed callables (cuBLAS or `torch.compile`), `private_torch` the private torch APIs
they use, `timing` the CUDA-graph replay, and `cell` puts them together as `GemmCell`, the
counterpart of workloads/train_cell.py.
"""
