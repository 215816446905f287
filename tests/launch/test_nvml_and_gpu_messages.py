"""No NVML, no GPU: one clear line each and the run goes on; NVML rows have the contract's shape."""

from __future__ import annotations

import sys
import types

import pytest

from diagnose.launch import nvml_sampler
from diagnose.launch.nvml_sampler import HEADER, NvmlSampler
from tests.launch.launch_helpers import EXAMPLES, gpudiag, manifest, records


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


def test_missing_nvml_and_missing_gpu_each_give_one_line(tmp_path):
    if _nvml_works():
        pytest.skip("NVML works on this machine")
    run = tmp_path / "r"
    r = gpudiag(
        "profile",
        "--trace-steps",
        "0",
        "-o",
        run,
        "--",
        sys.executable,
        EXAMPLES / "train_mlp.py",
        "--steps",
        "4",
        "--width",
        "16",
        "--device",
        "cpu",
    )
    assert r.returncode == 0
    nvml_lines = [line for line in r.stderr.splitlines() if "NVML" in line]
    assert len(nvml_lines) == 1 and nvml_lines[0].startswith("gpudiag: no NVML samples:")
    assert "the run goes on" in nvml_lines[0]
    gpu_lines = [line for line in r.stderr.splitlines() if "no GPU in use" in line]
    assert len(gpu_lines) == 1 and "host step times only" in gpu_lines[0]
    m = manifest(run)
    assert "nvml.csv" in m["unavailable"] and "nvml.csv" not in m["missing"] and m["gpus"] == []
    assert len([x for x in records(run) if x["kind"] == "step"]) == 3
    assert not (run / "memory").exists()


class _FakeNvml(types.SimpleNamespace):
    """Hand-made stand-in for pynvml: two GPUs with fixed readings; GPU 1 has no PCIe counters."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES, NVML_TEMPERATURE_GPU = (
        0,
        1,
        0,
        1,
        0,
    )

    def __init__(self):
        super().__init__(shutdowns=0)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}abc"

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=87, memory=41)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=1_000_000 * (h + 1), total=8_000_000)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980 if kind == 0 else 2619

    def nvmlDeviceGetPowerUsage(self, h):
        return 312_500  # mW

    def nvmlDeviceGetTemperature(self, h, kind):
        return 55

    def nvmlDeviceGetPcieThroughput(self, h, kind):
        if h == 1:
            raise RuntimeError("not supported")
        return 100 if kind == 0 else 200  # KB/s


def test_sampler_rows_follow_the_contract(tmp_path, monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sampler = NvmlSampler(tmp_path / "nvml.csv", hz=50)
    assert sampler.start()
    import time

    deadline = time.monotonic() + 60  # two samples of both GPUs, however busy the machine: no fixed sleep
    while sampler.rows < 4:
        assert time.monotonic() < deadline, "fewer than 4 rows within 60 s"
        time.sleep(0.01)
    sampler.stop()
    lines = (tmp_path / "nvml.csv").read_text().splitlines()
    assert lines[0] == HEADER
    rows = [line.split(",") for line in lines[1:]]
    assert len(rows) >= 4 and len(rows) % 2 == 0 and sampler.rows == len(rows)
    assert rows[0][1:] == ["0", "87", "41", "1000000", "8000000", "1980", "2619", "312.5", "102400", "204800", "55"]
    assert rows[1][1:] == ["1", "87", "41", "2000000", "8000000", "1980", "2619", "312.5", "", "", "55"]
    assert fake.shutdowns == 1


def test_visible_devices_select_the_sampled_gpus():
    fake = _FakeNvml()
    assert nvml_sampler.visible_gpu_indices(fake, {}) == [0, 1]
    assert nvml_sampler.visible_gpu_indices(fake, {"CUDA_VISIBLE_DEVICES": "1"}) == [1]
    assert nvml_sampler.visible_gpu_indices(fake, {"CUDA_VISIBLE_DEVICES": "GPU-1"}) == [1]
    assert nvml_sampler.visible_gpu_indices(fake, {"CUDA_VISIBLE_DEVICES": ""}) == []
