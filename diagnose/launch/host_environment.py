"""What the run ran on: host, GPUs, driver, CUDA, framework and gpudiag versions.

Read in the parent, without importing torch or jax (their versions come from package
metadata here, and from the child's start record where the child imported them).
NVML missing is a value (no GPUs listed, a reason), not an error.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def host_info() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "cpu_count": os.cpu_count(),
    }


def versions() -> dict:
    from diagnose.version import __version__

    return {
        "gpudiag": __version__,
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "jax": package_version("jax"),
        "jaxlib": package_version("jaxlib"),
        "nvidia-ml-py": package_version("nvidia-ml-py"),
    }


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_info() -> tuple[list[dict], dict, str | None]:
    """(gpus, {"driver_version", "cuda_driver_version"}, reason NVML is unavailable or None)."""
    try:
        import pynvml
    except ImportError:
        return [], {}, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return [], {}, f"NVML cannot start ({_text(e) or type(e).__name__}): no NVIDIA driver or GPU here"
    try:
        driver = {"driver_version": _text(pynvml.nvmlSystemGetDriverVersion())}
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            driver["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:
            pass
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = {"index": index, "name": _text(pynvml.nvmlDeviceGetName(handle))}
            for key, call in (
                ("uuid", lambda h: _text(pynvml.nvmlDeviceGetUUID(h))),
                ("memory_total_bytes", lambda h: int(pynvml.nvmlDeviceGetMemoryInfo(h).total)),
                ("pci_bus_id", lambda h: _text(pynvml.nvmlDeviceGetPciInfo(h).busId)),
            ):
                try:
                    gpu[key] = call(handle)
                except Exception:
                    pass
            gpus.append(gpu)
        return gpus, driver, None
    except Exception as e:
        return [], {}, f"NVML query failed ({_text(e) or type(e).__name__})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
