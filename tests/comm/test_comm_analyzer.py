"""The comm analyzer: findings and numbers on hand-made ranks and on the real captures."""

import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import comm
from diagnose.derive.collectives import intersection_ns, kernel_op
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from reports.sections.comm import render
from tests.comm.conftest import DDP_RANK0, GLOO, SAMPLED, fake_profile, fake_trace, profile_of

MS = 1_000_000
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def fake_pair(cause: str, steps: int = 4):
    """Rank 1 arrives 20 ms late at each step's all-reduce: its GPU idles first (host) or computes more (compute)."""
    r0, r1, st = [], [], []
    for s in range(steps):
        t = s * 100 * MS
        st.append((s, t, t + 100 * MS))
        r0 += [(t, 50 * MS, "gemm", 7, "compute"), (t + 50 * MS, 30 * MS, AR, 20, "comm")]
        first = (t + 20 * MS, 50 * MS) if cause == "host" else (t, 70 * MS)
        r1 += [(first[0], first[1], "gemm", 7, "compute"), (t + 70 * MS, 10 * MS, AR, 20, "comm")]
    return fake_profile(fake_trace(0, r0, st, 2), fake_trace(1, r1, st, 2))


@pytest.mark.parametrize("cause,words", [("host", "the host is late"), ("compute", "more GPU compute")])
def test_fake_straggler_found_with_its_cause(cause, words):
    r = run_analyzer(comm, fake_pair(cause))
    f = {x.id: x for x in r.findings}
    s = f["comm.straggler"]
    assert s.subjects[0].name == "rank 1" and s.subjects[0].kind == "rank"
    assert s.subjects[0].figures["last_share"] == 1.0
    assert s.subjects[0].figures["arrival_lag_ms"] == pytest.approx(20.0)
    assert s.subjects[0].figures["caused_wait_ms_per_step"] == pytest.approx(20.0)
    assert words in s.title and s.severity == Severity.WARNING and s.cost_share == pytest.approx(0.2)
    w = f["comm.wait_dominates"]
    assert w.severity == Severity.WARNING and w.cost_share == pytest.approx(0.2)
    assert [x.name for x in w.subjects if x.kind == "rank"] == ["rank 0"]
    assert any(x.kind == "collective" and x.figures["straggler_rank"] == 1 for x in w.subjects)
    assert r.summary["rank0.comm_wait_ms_per_step"] == pytest.approx(20.0)
    assert r.summary["rank1.comm_wait_ms_per_step"] == 0.0
    assert r.summary["comm_wait_ms_per_step"] == pytest.approx(10.0)
    assert r.summary["comm_collectives_matched"] == 4
    # no compute runs during communication: overlap 0 %, exposed comm 30 % of rank 0's trace → critical
    lo = f["comm.low_overlap"]
    assert r.summary["comm_overlap_pct"] == 0.0 and lo.severity == Severity.CRITICAL
    waits = r.tables["waits"]
    assert waits["max_wait_ms"].tolist() == pytest.approx([20.0] * 4) and set(waits["straggler"]) == {"rank 1"}


def test_fake_balanced_ranks_give_no_straggler_or_wait():
    st = [(s, s * 100 * MS, (s + 1) * 100 * MS) for s in range(4)]
    ks = [
        k
        for s in range(4)
        for k in ((s * 100 * MS, 60 * MS, "gemm", 7, "compute"), (s * 100 * MS + 40 * MS, 30 * MS, AR, 20, "comm"))
    ]
    r = run_analyzer(comm, fake_profile(fake_trace(0, ks, st, 2), fake_trace(1, ks, st, 2)))
    assert {f.id for f in r.findings} == set()
    assert r.summary["comm_overlap_pct"] == pytest.approx(100 * 20 / 30)  # 20 of the 30 ms overlap compute
    assert r.summary["comm_wait_ms_per_step"] == 0.0


def test_threshold_overrides_change_findings():
    th = Thresholds().with_overrides({"comm": {"wait_share_warning": 0.5, "overlap_low_pct": 0}})
    ids = {f.id for f in run_analyzer(comm, fake_pair("host"), th).findings}
    assert ids == {"comm.straggler"}


def test_fake_no_comm_kernels_gives_empty_result():
    r = run_analyzer(comm, fake_profile(fake_trace(0, [(0, 10 * MS, "gemm", 7, "compute")])))
    assert r.findings == [] and r.summary == {} and r.tables == {}
    assert run_analyzer(comm, fake_profile()).findings == []
    assert "No collectives" in render(r)


def test_kernel_names_across_nccl_versions():
    assert kernel_op("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == "allreduce"
    assert (
        kernel_op("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "reducescatter"
    )
    assert kernel_op("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == "sendrecv"


def test_intersection_of_interval_sets():
    import numpy as np

    a = (np.array([0, 10]), np.array([5, 20]))
    b = (np.array([3, 5, 18]), np.array([4, 12, 30]))
    assert intersection_ns(a, b) == 1 + 2 + 2  # [3,4) + [10,12) + [18,20)


def test_single_real_rank_gives_overlap_and_an_info():
    r = run_analyzer(comm, profile_of(DDP_RANK0))
    f = {x.id: x for x in r.findings}
    assert f["comm.single_rank"].severity == Severity.INFO
    assert f["comm.low_overlap"].severity == Severity.WARNING  # 14.8 % overlap, comm 5.6 % of the trace
    assert "comm.straggler" not in f and "comm_wait_ms_per_step" not in r.summary


def test_sampled_ranks_p2p_only_no_straggler():
    r = run_analyzer(comm, profile_of(*SAMPLED))
    ids = {f.id for f in r.findings}
    assert ids == {"comm.low_overlap"}  # SendRecv is point-to-point: no straggler/wait finding
    lo = next(f for f in r.findings if f.id == "comm.low_overlap")
    assert lo.severity == Severity.CRITICAL and lo.cost_share == pytest.approx(172.259 / 600.058)
    waits = r.tables["waits"]
    assert len(waits) == 5 and waits["p2p"].all()
    assert r.meta["world_size"] == 128


def test_gloo_capture_finds_the_planted_straggler():
    r = run_analyzer(comm, profile_of(GLOO / "rank0.json.gz", GLOO / "rank1.json.gz"))
    f = {x.id: x for x in r.findings}
    s = f["comm.straggler"].subjects[0]
    assert s.name == "rank 1" and s.figures["last_share"] == 1.0
    assert s.figures["arrival_lag_ms"] == pytest.approx(45.308, abs=0.01)  # planted: 40 ms sleep before backward
    assert f["comm.wait_dominates"].subjects[0].name == "rank 0"
    assert r.summary["rank0.comm_wait_ms_per_step"] == pytest.approx(71.793, abs=0.01)
    assert r.summary["comm_collectives_matched"] == 10
    assert "comm_overlap_pct" not in r.summary  # no GPU: overlap does not apply


def test_section_draws_the_analyzer_tables():
    html = render(run_analyzer(comm, fake_pair("host")))
    for anchor in ('id="comm-timeline"', 'id="comm-waits"', 'id="comm-ranks"', 'id="comm-overlap"'):
        assert anchor in html
    assert "https://" not in html.split("comm-timeline")[0]
