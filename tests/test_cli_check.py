"""`gpudiag check` as a CI gate on real captures: exit 0/1 at --fail-on, exit 2 when nothing could be judged
(the rule `report` uses), every finding printed with its id, and --ignore validated against the declared ids."""

from __future__ import annotations

import ast
import json

import pytest

from diagnose.analyzers import discover
from diagnose.checks.gate import known_finding_ids
from tests.cli_run import gpudiag
from tests.paths import FIXTURES, REPO

TINY = FIXTURES / "ncu" / "tiny_kernels" / "raw.csv"
GATHER = FIXTURES / "ncu" / "l2_random_gather" / "raw.csv"
SYNC_PLANTED = FIXTURES / "runs" / "sync_planted"
TINY_TITLE = "48 of 48 launches (100 %) run under 5 µs (mean 2.17 µs, 2 kernels): launch-bound"
# analyzers that said "not measured" on an ncu-only capture when this test was written: a new analyzer that needs a
# trace or steps adds itself to what the library reports (the test reads that), never to this floor
NOT_MEASURED_ON_NCU_AT_LEAST = (
    "fragmentation",
    "idle",
    "launch",
    "memory_access",
    "ncu_rules",
    "step_budget",
    "steps",
    "sync",
    "utilization",
)


@pytest.fixture(scope="module")
def nothing_measured_run(tmp_path_factory):
    """A real run folder that measured nothing: `gpudiag profile` of a script that never reaches a step."""
    folder = tmp_path_factory.mktemp("runs") / "no_steps"
    r = gpudiag("profile", "-q", "--no-nvml", "-o", folder, "--", "python3", "-c", "print('no training here')")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"]
    return folder


def test_check_exits_2_on_a_run_that_measured_nothing_like_report(nothing_measured_run, tmp_path):
    check = gpudiag("check", nothing_measured_run)
    report = gpudiag("report", nothing_measured_run, "-o", tmp_path / "r.html")
    assert (check.returncode, report.returncode) == (2, 2), (check.stdout, check.stderr)
    assert check.stderr.startswith(f"gpudiag: error: {nothing_measured_run}: nothing to check: the run folder holds")
    assert report.stderr.startswith(f"gpudiag: error: {nothing_measured_run}: nothing to report: the run folder holds")
    assert "events/rank0.jsonl is missing" in check.stderr  # the run's own note says why
    assert "OK:" not in check.stdout and "Traceback" not in check.stderr
    assert not (tmp_path / "r.html").exists()


def test_check_gates_on_severity_on_a_run_folder():
    critical = gpudiag("check", SYNC_PLANTED, "--fail-on", "critical")
    warning = gpudiag("check", SYNC_PLANTED, "--fail-on", "warning")
    assert critical.returncode == 0, critical.stderr
    assert critical.stdout.endswith("OK: no finding at or above critical\n")
    assert warning.returncode == 1, warning.stderr
    # idle.gpu_idle is info: 8.9 % of the untraced median step (28.8 % of the traced steps, issue 31)
    assert warning.stdout.endswith("FAIL: 1 finding at or above warning: sync.host_sync\n")


def test_check_prints_every_finding_with_its_id():
    import diagnose

    not_measured = {
        f.analyzer for f in diagnose.analyze(diagnose.load(TINY)).findings if f.id.endswith(".not_measured")
    }
    assert not_measured >= set(NOT_MEASURED_ON_NCU_AT_LEAST)
    r = gpudiag("check", TINY)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert f"critical  {TINY_TITLE} (cost 100.0 %)  [tiny_kernels.launch_bound]" in lines
    for analyzer in not_measured:  # check lists them all, not the report's first 15
        assert any(line.endswith(f"  [{analyzer}.not_measured]") for line in lines), analyzer
    # and the 2 kernels under the L2 band whose misses are cold ones (2 µs launches): l2.below_band, info
    assert any(line.startswith("    info  2 more kernels below 85 % L2 hit rate") for line in lines)
    assert f"1 critical, 0 warning, {len(not_measured) + 1} info" in lines
    assert lines[-1] == "FAIL: 1 finding at or above critical: tiny_kernels.launch_bound"


def test_ignore_by_id_and_by_glob():
    by_id = gpudiag("check", TINY, "--ignore", "tiny_kernels.launch_bound")
    assert by_id.returncode == 0, by_id.stdout
    assert "ignored (--ignore): tiny_kernels.launch_bound" in by_id.stdout.splitlines()
    infos = gpudiag("check", TINY, "--fail-on", "info", "--ignore", "tiny_kernels.*", "--ignore", "l2.below_band")
    assert infos.returncode == 1
    not_measured = sorted(
        line.split("[")[-1].rstrip("]") for line in infos.stdout.splitlines() if "not_measured]" in line
    )
    assert len(not_measured) >= len(NOT_MEASURED_ON_NCU_AT_LEAST)  # every finding left is an info "not measured"
    assert infos.stdout.splitlines()[-1] == f"FAIL: {len(not_measured)} findings at or above info: " + ", ".join(
        not_measured
    )
    nothing_left = gpudiag(
        "check", TINY, "--fail-on", "info", "--ignore", "tiny_*", "--ignore", "*.not_measured", "--ignore", "l2.*"
    )
    assert nothing_left.returncode == 0, nothing_left.stdout


def test_unknown_ignore_id_is_an_error_listing_the_known_ids():
    r = gpudiag("check", TINY, "--ignore", "tiny_kernel.launch_bound")
    assert r.returncode == 2
    assert r.stderr.startswith(
        "gpudiag: error: --ignore tiny_kernel.launch_bound: no finding has this id (did you mean tiny_kernels.launch_bound?)"
    )
    listed = [line.strip() for line in r.stderr.splitlines()[1:]]
    assert listed == list(known_finding_ids())
    assert {"l2.low_hit_rate", "sync.host_sync", "idle.gpu_idle", "fragmentation.churn"} <= set(listed)
    glob = gpudiag("check", TINY, "--ignore", "nccl.*")
    assert glob.returncode == 2 and "--ignore nccl.*: no finding has this id" in glob.stderr
    assert "Traceback" not in r.stderr + glob.stderr


def test_check_reads_a_findings_json_back_with_ids(tmp_path):
    js = tmp_path / "findings.json"
    assert gpudiag("report", GATHER, "--no-html", "--json", js).returncode == 0
    r = gpudiag("check", js)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == f"gpudiag: {js}  [NVIDIA H200]"
    assert any(line.startswith("critical  ") and line.endswith("  [l2.low_hit_rate]") for line in r.stdout.splitlines())
    assert gpudiag("check", js, "--ignore", "l2.low_hit_rate").returncode == 0
    assert gpudiag("check", js, "--ignore", "l2.no_such").returncode == 2
    again = gpudiag("check", js, "--json", tmp_path / "again.json")
    assert again.returncode == 2 and "is already a findings JSON" in again.stderr


def test_findings_json_of_an_input_that_measured_nothing_exits_2(tmp_path):
    """Hand-edited (fake_): the real JSON with every artifact count set to zero."""
    js = tmp_path / "real.json"
    assert gpudiag("report", TINY, "--no-html", "--json", js).returncode == 0
    data = json.loads(js.read_text())
    assert data["source"]["artifacts"]["ncu_kernel_launches"] == 48
    data["source"]["artifacts"] = {k: 0 if isinstance(v, int) else [] for k, v in data["source"]["artifacts"].items()}
    fake = tmp_path / "fake_nothing_measured.json"
    fake.write_text(json.dumps(data))
    r = gpudiag("check", fake)
    assert r.returncode == 2
    assert r.stderr.startswith(f"gpudiag: error: {fake}: nothing to check: the input holds no readable measurement")


def _literal_ids(module_path, name: str) -> set[str]:
    """The ids analyzer ``name``'s code in ``module_path`` can produce: ``id="..."`` literals and
    ``not_measured(...)`` calls."""
    tree = ast.parse(module_path.read_text())
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "id" and isinstance(node.value, ast.Constant):
            ids.add(node.value.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "not_measured":
            ids.add(f"{name}.not_measured")
    return ids


def test_every_analyzer_declares_exactly_the_ids_its_code_makes():
    mods = discover()
    assert len(mods) >= 16  # the sixteen this test was written with, and any added since
    for mod in mods:
        path = REPO / "diagnose" / "analyzers" / f"{mod.NAME}.py"
        judges = sorted((REPO / "diagnose" / "judges" / mod.NAME).glob("*.py"))  # the diagnoses it hands over
        assert set(mod.FINDING_IDS) == set().union(*(_literal_ids(p, mod.NAME) for p in (path, *judges))), mod.NAME
        assert all(i.startswith(f"{mod.NAME}.") for i in mod.FINDING_IDS), mod.NAME
    assert len(known_finding_ids()) == sum(len(mod.FINDING_IDS) for mod in mods) >= 52


@pytest.mark.parametrize(
    "fixture", [TINY, GATHER, SYNC_PLANTED], ids=["tiny_kernels", "l2_random_gather", "sync_planted"]
)
def test_findings_on_real_captures_have_declared_ids(fixture):
    import diagnose

    analysis = diagnose.analyze(diagnose.load(fixture))
    assert analysis.findings
    assert {f.id for f in analysis.findings} <= set(known_finding_ids())
