"""Whether this machine has an NVIDIA GPU (NVML answers): the GPU test modules skip themselves without one."""

from __future__ import annotations


def has_cuda_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False
