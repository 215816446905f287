"""JAX host syncs inside the trace window, attributed to their exact line (issue 17)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import numpy as np  # noqa: E402

from diagnose.launch.runtime.jax_sync_capture import BLOCKING_METHODS, JaxSyncCapture  # noqa: E402
from tests.launch.launch_helpers import EXAMPLES, gpudiag, records  # noqa: E402

ArrayImpl = type(jnp.zeros(1))


def _line_of(marker: str, source: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if text.rstrip().endswith(f"# {marker}"))


def test_each_blocking_call_is_recorded_at_its_line_with_its_result_unchanged():
    originals = {name: ArrayImpl.__dict__[name] for name in BLOCKING_METHODS if name in ArrayImpl.__dict__}
    original_device_get = jax.device_get
    x = jnp.arange(4.0)
    half = jnp.arange(4.0).astype(jnp.bfloat16)  # bfloat16: numpy reads it through __array__, not the buffer protocol
    capture = JaxSyncCapture(lambda: 11)
    assert capture.start(jax) is True
    try:
        as_float = float(x[2])  # LINE-float
        as_item = x[3].item()  # LINE-item
        fetched = jax.device_get(x)  # LINE-device_get
        as_numpy = np.asarray(half)  # LINE-asarray
    finally:
        capture.stop()

    assert (as_float, as_item) == (2.0, 3.0)
    np.testing.assert_array_equal(fetched, np.arange(4.0, dtype=np.float32))
    np.testing.assert_array_equal(as_numpy.astype(np.float32), np.arange(4.0, dtype=np.float32))
    source = Path(__file__).read_text()
    expected = [
        ("jax:__float__", _line_of("LINE-float", source)),
        ("jax:item", _line_of("LINE-item", source)),
        ("jax:device_get", _line_of("LINE-device_get", source)),  # its inner __array__ is not a second sync
        ("jax:__array__", _line_of("LINE-asarray", source)),
    ]
    assert [(op, stack[0][1]) for _, _, stack, op, _ in capture.captured] == expected
    assert {stack[0][0] for _, _, stack, _, _ in capture.captured} == {__file__}
    assert all(step == 11 and dur_ns >= 0 for _, step, _, _, dur_ns in capture.captured)
    # every original is back, exactly
    assert ArrayImpl.__float__ is originals["__float__"]
    assert {name: ArrayImpl.__dict__[name] for name in originals} == originals
    assert jax.device_get is original_device_get
    float(x[1])
    assert len(capture.captured) == 4


def test_calls_off_the_main_thread_pass_through_unrecorded():
    x = jnp.arange(3.0)
    capture = JaxSyncCapture(lambda: 0)
    capture.start(jax)
    results = []
    try:
        worker = threading.Thread(target=lambda: results.append(float(x[1])))
        worker.start()
        worker.join()
    finally:
        capture.stop()
    assert results == [1.0]
    assert capture.captured == []


def test_an_error_in_the_blocking_call_passes_through_and_stop_restores():
    original = ArrayImpl.__dict__["__float__"]
    capture = JaxSyncCapture(lambda: 0)
    capture.start(jax)
    try:
        with pytest.raises(TypeError, match="converted to Python scalars"):
            float(jnp.arange(3.0))  # more than one element
    finally:
        capture.stop()
    assert capture.captured == []
    assert ArrayImpl.__dict__["__float__"] is original


def test_unchanged_jax_script_gets_its_float_loss_as_sync_records_in_the_window(tmp_path):
    """examples/jax_unchanged.py on CPU: the default window (steps 10-12) holds the SYNC-1 line's float(loss)."""
    out = tmp_path / "run"
    script = EXAMPLES / "jax_unchanged.py"
    r = gpudiag(
        "profile", "-q", "-o", out, "--", "python3", script, "--epochs", "2", "--batches", "20", "--width", "64",
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    sync_line = _line_of("SYNC-1", script.read_text())
    syncs = [s for s in records(out) if s["kind"] == "sync"]
    at_sync_line = [s for s in syncs if s["file"] == str(script) and s["line"] == sync_line]
    # one float(loss) per step of the window, each a measured wait in steps 10, 11, 12
    assert [s["step"] for s in at_sync_line] == [10, 11, 12]
    assert {s["op"] for s in at_sync_line} == {"jax:__float__"}
    assert all(s["dur_ns"] >= 0 and s["function"] == "main" for s in at_sync_line)
    assert all(10 <= s["step"] <= 12 for s in syncs)
