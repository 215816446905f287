"""Hand-made test script (tests/launch/test_time_slices.py): a loop no step source sees, which imports a module
that runs Python for ``seconds`` at import time, between two stretches of torch work.

argv: folder seconds. The module is written into ``folder`` and imported from there; it writes its import's start
and end (time.time_ns) to ``folder/import_span.txt``, so the test can check that no time slice began inside it.
The work runs ``seconds / 2`` before the import and ``seconds`` after it: a step is written when the next one
begins, so a slice after the import shows only if another follows it (slices are a second apart)."""

import sys
import time
from pathlib import Path

import torch

folder, seconds = Path(sys.argv[1]), float(sys.argv[2])
(folder / "busy_import.py").write_text(
    "import time\n"
    f"span = [time.time_ns()]\nend = time.monotonic() + {seconds}\n"
    "while time.monotonic() < end:\n    sum(range(1000))\n"
    f"span.append(time.time_ns())\nopen({str(folder / 'import_span.txt')!r}, 'w').write(' '.join(map(str, span)))\n"
)
sys.path.insert(0, str(folder))


def work(for_s: float) -> None:
    a = torch.randn(128, 128)
    end = time.monotonic() + for_s
    while time.monotonic() < end:
        a = torch.tanh(a @ a.T / 128)


work(seconds / 2)
import busy_import  # noqa: E402, F401

work(seconds)
