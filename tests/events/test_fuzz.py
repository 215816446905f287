"""Any text fed to the readers either reads or raises InputError — never another exception."""

from __future__ import annotations

import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers.errors import InputError
from parsers.events import read_event_tables
from parsers.nvml import NVML_COLUMNS, read_nvml

PIECES = st.sampled_from(
    [
        '{"kind":"step","step":',
        '{"kind":"sync",',
        '"host_ms":',
        '"gpu_ms":',
        "-1",
        "1e400",
        "NaN",
        "null",
        "}",
        "]",
        "[",
        "\n",
        ",",
        '"x"',
        "3",
        "2.5",
        "name,step,elapsed_ms\n",
        ",".join(NVML_COLUMNS) + "\n",
        "step,",
        '"rank":',
        '"stack":',
        "true",
    ]
)
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=30).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT)
def test_readers_raise_only_input_error(tmp_path, text):
    path = tmp_path / "fake_fuzz.txt"
    path.write_bytes(text.encode("utf-8", errors="replace"))
    for reader in (read_event_tables, read_nvml):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                reader(path)
            except InputError:
                pass
