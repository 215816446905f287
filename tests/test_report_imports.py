"""What a report imports: only what its input and its outputs need (issue 21, startup time).

Each case runs in a fresh interpreter and lists ``sys.modules`` after the command: a JSON-only report of a
trace must not import plotly or Jinja (the HTML stack, ~0.3 s), nor the launcher; the bare CLI must not
import pandas; writing the HTML page does import plotly (so the check can tell the difference).
"""

import json
import subprocess
import sys

from tests.paths import FIXTURES, REPO

TRACE = FIXTURES / "trace" / "sync_planted" / "trace.json.gz"
HEAVY = ("plotly", "jinja2", "pandas", "numpy", "diagnose.launch.api", "diagnose.launch.launcher", "ncu_report")

RUN = """
import json, sys
sys.path.insert(0, {repo!r})
sys.argv = ["gpudiag", *{args!r}]
from diagnose.cli import main
try:
    main(prog_name="gpudiag")
except SystemExit as e:
    code = e.code
print("MODULES " + json.dumps({{"code": code, "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def modules_after(*args: str) -> dict:
    code = RUN.format(repo=str(REPO), args=list(args), heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("MODULES "))
    return json.loads(line[len("MODULES ") :])


def test_json_report_of_a_trace_imports_no_html_stack(tmp_path):
    out = tmp_path / "findings.json"
    got = modules_after("report", "--no-html", "--json", str(out), str(TRACE))
    assert got["code"] in (0, None)
    assert "plotly" not in got["loaded"] and "jinja2" not in got["loaded"]
    assert "diagnose.launch.api" not in got["loaded"] and "ncu_report" not in got["loaded"]
    assert "pandas" in got["loaded"]  # the trace's tables are pandas frames
    findings = json.loads(out.read_text())
    assert findings["summary"]["gpu_idle_pct"] > 0
    assert any(f["id"].startswith("sync.") for f in findings["findings"])


def test_html_report_imports_plotly(tmp_path):
    got = modules_after("report", "-o", str(tmp_path / "r.html"), str(TRACE))
    assert got["code"] in (0, None)
    assert "plotly" in got["loaded"] and "jinja2" in got["loaded"]


def test_help_imports_neither_pandas_nor_numpy():
    got = modules_after("--help")
    assert got["code"] == 0
    assert got["loaded"] == []


def test_package_names_stay_the_functions_after_their_submodules_are_imported():
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "import diagnose.ingest.loading, diagnose.analysis, diagnose\n"
        "print(callable(diagnose.load), diagnose.load.__module__, diagnose.analyze.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.stdout.split() == ["True", "diagnose.ingest.loading", "diagnose.analysis"], out.stderr
