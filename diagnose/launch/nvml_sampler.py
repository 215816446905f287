"""NVML samples of every GPU the job can see, 10 Hz by default, from a thread of the parent.

One row per GPU per tick (nvml.csv, header in docs/contracts.md), appended and flushed
tick by tick like the JSONL files, so a killed run keeps every finished row. A reading a
GPU does not support is an empty cell. Without NVML (no driver, no GPU, no pynvml) the
sampler does not start and says why in one line; the run goes on.

NVML can fail mid-run (GPU fallen off the bus, driver unloaded or upgraded): a fatal NVML
error, or three ticks in a row where no reading answered, stop the sampler; so does a write
that fails (full disk). The file keeps the whole rows written before, ``stopped`` says when
and why, ``on_stop`` is told at once, and the run goes on without NVML.
"""

from __future__ import annotations

import os
import threading
import time

from diagnose.launch.event_log import LineAppender
from diagnose.launch.fault_reports import describe_error

HEADER = (
    "t_ns,gpu,gpu_util_pct,mem_util_pct,mem_used_bytes,mem_total_bytes,sm_clock_mhz,mem_clock_mhz,"
    "power_w,pcie_tx_bytes_per_s,pcie_rx_bytes_per_s,temperature_c"
)
DEFAULT_HZ = 10.0
# NVML return codes after which no further reading will answer: uninitialized, driver not loaded, library
# not found, GPU is lost, reset required, RM version mismatch (driver upgraded under the job), GPU not found
FATAL_NVML_ERRORS = frozenset({1, 9, 12, 15, 16, 18, 28})
READINGS_PER_ROW = 8  # NVML calls sample_row makes for one GPU
DEAD_TICKS = 3  # ticks in a row without any reading before the sampler gives up


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


def _reading(call, failures: list | None = None):
    """One NVML reading; "" when it failed (kept in ``failures``). A fatal NVML error is raised."""
    try:
        value = call()
    except Exception as e:
        if getattr(e, "value", None) in FATAL_NVML_ERRORS:
            raise
        if failures is not None:
            failures.append(e)
        return ""
    return "" if value is None else value


def sample_row(pynvml, index: int, handle, failures: list | None = None) -> str:
    util = _reading(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle), failures)
    mem = _reading(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle), failures)
    kb = 1024  # NVML reports PCIe throughput in KB/s
    values = [
        time.time_ns(),
        index,
        util.gpu if util != "" else "",
        util.memory if util != "" else "",
        mem.used if mem != "" else "",
        mem.total if mem != "" else "",
        _reading(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM), failures),
        _reading(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM), failures),
        _reading(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, failures),
        _reading(lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * kb, failures),
        _reading(lambda: pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * kb, failures),
        _reading(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU), failures),
    ]
    return ",".join(str(v) for v in values)


class _WriteFailed(Exception):
    pass


class NvmlSampler:
    def __init__(self, path: str | os.PathLike, hz: float = DEFAULT_HZ, on_stop=None):
        self.path = os.fspath(path)
        self.interval_s = 1.0 / max(0.1, min(hz, 100.0))
        self.rows = 0
        self.unavailable_reason: str | None = None
        # set when sampling stopped before the run ended: {"kind": "nvml-stopped" | "disk-full", "error",
        # "t_ns" (when), "last_sample_ns" (the last whole row's time or None), "rows"}
        self.stopped: dict | None = None
        self._on_stop = on_stop
        self._last_sample_ns = None
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
        self._file = LineAppender(self.path)
        self._file.write((HEADER + "\n").encode())
        self._thread = threading.Thread(target=self._run, args=(handles,), name="gpudiag-nvml", daemon=True)
        self._thread.start()
        return True

    def _run(self, handles) -> None:
        next_t = time.monotonic()
        dead_ticks = 0
        while not self._stop.is_set():
            try:
                dead_ticks = self._tick(handles, dead_ticks)
            except _WriteFailed as e:
                self._give_up("disk-full", e.__cause__)
                return
            except Exception as e:  # a fatal NVML error, or no reading answered DEAD_TICKS times
                self._give_up("nvml-stopped", e)
                return
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def _tick(self, handles, dead_ticks: int) -> int:
        """One row per GPU, written whole; returns the count of ticks in a row where nothing answered."""
        failures: list = []
        rows = [sample_row(self._pynvml, i, h, failures) for i, h in handles]
        if len(failures) >= READINGS_PER_ROW * len(handles):
            if dead_ticks + 1 >= DEAD_TICKS:
                raise failures[-1]
            return dead_ticks + 1
        try:
            self._file.write("".join(row + "\n" for row in rows).encode())
        except OSError as e:
            raise _WriteFailed() from e
        self.rows += len(rows)
        self._last_sample_ns = int(rows[-1].split(",", 1)[0])
        return 0

    def _give_up(self, kind: str, error: BaseException) -> None:
        text = describe_error(error) if kind == "disk-full" else f"{type(error).__name__}: {error}"
        self.stopped = {
            "kind": kind,
            "error": text,
            "t_ns": time.time_ns(),
            "last_sample_ns": self._last_sample_ns,
            "rows": self.rows,
        }
        if self._on_stop is not None:
            try:
                self._on_stop(self.stopped)
            except Exception:
                pass

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
