"""FAKE pynvml for gpudiag's fault tests: one made-up GPU that answers, then is lost. Not NVIDIA's module.

tests/launch/test_faults_nvml.py puts this folder first on the PYTHONPATH of `gpudiag profile`,
so the parent's NVML sampler and host_environment.gpu_info() import it instead of nvidia-ml-py.
The GPU answers every reading for FAKE_NVML_OK_READS calls of nvmlDeviceGetUtilizationRates
(one per sampling tick), or until the events file named by FAKE_NVML_EVENTS holds
FAKE_NVML_LOSE_AT_STEP step records (so the loss falls inside the training however slow the
start-up); unset = forever. After that every device call raises NVMLError(NVML_ERROR_GPU_IS_LOST),
"GPU is lost", as the real library does when a GPU falls off the bus. The readings are fixed
numbers, so the tests can assert on them.
"""

import os
import types

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_GPU_IS_LOST = 15
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
NVML_TEMPERATURE_GPU = 0

FAKE_GPU_NAME = "Fake NVML GPU (tests/launch/fake_nvml)"
_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    """As in nvidia-ml-py: ``value`` is the NVML return code, str() its text, the subclass names it."""

    def __new__(cls, value):
        if cls is NVMLError and value == NVML_ERROR_GPU_IS_LOST:
            cls = NVMLError_GPUIsLost
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)

    def __str__(self):
        return _STRINGS.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_GPUIsLost(NVMLError):
    pass


_state = {"initialized": 0, "util_reads": 0, "lost": False}


def _device():
    if not _state["initialized"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if _state["lost"]:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)


def nvmlInit():
    _state["initialized"] += 1


def nvmlShutdown():
    _state["initialized"] = max(0, _state["initialized"] - 1)


def nvmlSystemGetDriverVersion():
    return "000.00.fake"


def nvmlSystemGetCudaDriverVersion_v2():
    return 12080


def nvmlDeviceGetCount():
    _device()
    return 1


def nvmlDeviceGetHandleByIndex(index):
    _device()
    return ("fake-gpu", index)


def nvmlDeviceGetName(handle):
    _device()
    return FAKE_GPU_NAME


def nvmlDeviceGetUUID(handle):
    _device()
    return "GPU-fake0000-0000-0000-0000-000000000000"


def nvmlDeviceGetPciInfo(handle):
    _device()
    return types.SimpleNamespace(busId="00000000:00:00.0")


def _steps_recorded(path):
    try:
        with open(path) as f:
            return sum(1 for line in f if line.startswith('{"kind":"step"'))
    except OSError:
        return 0


def _time_to_fail():
    reads = os.environ.get("FAKE_NVML_OK_READS", "").strip()
    if reads and _state["util_reads"] >= int(reads):
        return True
    at_step = os.environ.get("FAKE_NVML_LOSE_AT_STEP", "").strip()
    return bool(at_step) and _steps_recorded(os.environ.get("FAKE_NVML_EVENTS", "")) >= int(at_step)


def nvmlDeviceGetUtilizationRates(handle):
    _device()
    if _time_to_fail():
        _state["lost"] = True  # from now on every device call fails, as when a GPU falls off the bus
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    _state["util_reads"] += 1
    return types.SimpleNamespace(gpu=87, memory=41)


def nvmlDeviceGetMemoryInfo(handle):
    _device()
    return types.SimpleNamespace(used=1 << 30, total=8 << 30, free=7 << 30)


def nvmlDeviceGetClockInfo(handle, kind):
    _device()
    return 1980 if kind == NVML_CLOCK_SM else 2619


def nvmlDeviceGetPowerUsage(handle):
    _device()
    return 312_500  # mW


def nvmlDeviceGetPcieThroughput(handle, kind):
    _device()
    return 100 if kind == NVML_PCIE_UTIL_TX_BYTES else 200  # KB/s


def nvmlDeviceGetTemperature(handle, kind):
    _device()
    return 55
