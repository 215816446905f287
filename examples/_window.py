"""Shared by the examples: mark the region Nsight Compute should profile.

Under ``ncu --profile-from-start off`` only kernels between ``cudaProfilerStart``
and ``cudaProfilerStop`` are profiled, so a capture skips warm-up (cuBLAS handle
creation, caching-allocator growth) without counting launches by hand.
"""

import contextlib

import torch


@contextlib.contextmanager
def profiled_region():
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    try:
        yield
    finally:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
