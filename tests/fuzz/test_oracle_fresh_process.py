"""The oracle in a fresh process, where the trace reader is first imported under the audit hook.

parsers/trace.py looks up glibc's malloc_trim in the process itself (``ctypes.CDLL(None)``) when it is imported;
the oracle must not take that for code run on the input's behalf, or every fuzz case that is the first to import
the reader reports ``code_execution``.
"""

import subprocess
import sys

from tests.paths import FIXTURES, REPO

SCRIPT = """
import sys
from tests.fuzz import oracle
assert "parsers.trace" not in sys.modules, "imported before the reader ran: the test would prove nothing"
o = oracle.run_reader("trace", sys.argv[1])
print(o.kind, o.detail)
"""


def test_first_trace_read_is_accepted_in_a_fresh_process():
    trace = FIXTURES / "trace" / "sync_planted" / "trace.json.gz"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(trace)], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert out.split()[0] == "accepted", out
