"""NVML samples of every GPU the job can see, 10 Hz by default, from a thread of the parent.

One row per GPU per tick (nvml.csv, header in docs/contracts.md), appended and flushed
tick by tick like the JSONL files, so a killed run keeps every finished row. A reading a
GPU does not support is an empty cell. Without NVML (no driver, no GPU, no pynvml) the
sampler does not start and says why in one line; the run goes on.
"""
from __future__ import annotations

import os
import threading
import time

HEADER = ("t_ns,gpu,gpu_util_pct,mem_util_pct,mem_used_bytes,mem_total_bytes,sm_clock_mhz,mem_clock_mhz,"
          "power_w,pcie_tx_bytes_per_s,pcie_rx_bytes_per_s,temperature_c")
DEFAULT_HZ = 10.0


def visible_gpu_indices(pynvml, environ=None) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES leaves to the job (all when unset)."""
    env = os.environ if environ is None else environ
    count = pynvml.nvmlDeviceGetCount()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return list(range(count)) if visible is None else []
    indices = []
    for item in visible.split(","):
        item = item.strip()
        if item.isdigit():
            if int(item) < count:
                indices.append(int(item))
            continue
        for i in range(count):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if item and uuid.startswith(item):
                indices.append(i)
                break
    return indices


def _reading(call):
    try:
        value = call()
    except Exception:
        return ""
    return "" if value is None else value


def sample_row(pynvml, index: int, handle) -> str:
    util = _reading(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
    mem = _reading(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    kb = 1024  # NVML reports PCIe throughput in KB/s
    values = [
        time.time_ns(), index,
        util.gpu if util != "" else "", util.memory if util != "" else "",
        mem.used if mem != "" else "", mem.total if mem != "" else "",
        _reading(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        _reading(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        _reading(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
        _reading(lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * kb),
        _reading(lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * kb),
        _reading(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
    ]
    return ",".join(str(v) for v in values)


class NvmlSampler:
    def __init__(self, path: str | os.PathLike, hz: float = DEFAULT_HZ):
        self.path = os.fspath(path)
        self.interval_s = 1.0 / max(0.1, min(hz, 100.0))
        self.rows = 0
        self.unavailable_reason: str | None = None
        self._stop = threading.Event()
        self._thread = None
        self._pynvml = None

    def start(self) -> bool:
        """Start sampling; False (and ``unavailable_reason``) when NVML cannot be used here."""
        try:
            import pynvml
        except ImportError:
            self.unavailable_reason = "nvidia-ml-py (pynvml) is not installed"
            return False
        try:
            pynvml.nvmlInit()
        except Exception as e:
            self.unavailable_reason = f"NVML cannot start ({e or type(e).__name__}): no NVIDIA driver or GPU here"
            return False
        try:
            indices = visible_gpu_indices(pynvml)
        except Exception as e:
            indices, self.unavailable_reason = [], f"NVML device query failed ({e})"
        if not indices:
            self.unavailable_reason = self.unavailable_reason or "NVML sees no GPU for this job (CUDA_VISIBLE_DEVICES)"
            pynvml.nvmlShutdown()
            return False
        self._pynvml = pynvml
        handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._file = open(self.path, "x", encoding="utf-8")
        self._file.write(HEADER + "\n")
        self._file.flush()
        self._thread = threading.Thread(target=self._run, args=(handles,), name="gpudiag-nvml", daemon=True)
        self._thread.start()
        return True

    def _run(self, handles) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                lines = "".join(sample_row(self._pynvml, i, h) + "\n" for i, h in handles)
                self._file.write(lines)
                self._file.flush()
                self.rows += len(handles)
            except Exception:
                pass
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._thread = None
        try:
            self._file.close()
        finally:
            try:
                self._pynvml.nvmlShutdown()
            except Exception:
                pass
