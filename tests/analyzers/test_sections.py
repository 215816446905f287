"""The report sections: every analyzer's renderer on an empty result, and user text escaped end to end."""

import importlib.util

import pytest

import diagnose
from diagnose.analyzers import discover
from diagnose.findings import Result
from reports.html import render_html
from tests.analyzers.fake_frames import fake_profile, repeat
from tests.html_checks import external_resources

# every analyzer with its own section renderer (the others get the generic one), discovered
SECTIONS = [m.NAME for m in discover() if importlib.util.find_spec(f"reports.sections.{m.NAME}") is not None]
EVIL = "fake_k</script><script>alert(1)</script>"


@pytest.mark.parametrize("name", SECTIONS)
def test_section_renders_an_empty_result(name):
    html = importlib.import_module(f"reports.sections.{name}").render(Result(name))
    assert "No " in html and "<script" not in html


def fake_evil_launches():
    metrics = {
        "l2_hit_pct": 20.0,
        "dram_throughput_pct": 10.0,
        "sm_throughput_pct": 5.0,
        "memory_throughput_pct": 8.0,
        "achieved_occupancy_pct": 20.0,
        "theoretical_occupancy_pct": 100.0,
        "occupancy_limit_registers": 8.0,
        "occupancy_limit_shared_mem": 8.0,
        "occupancy_limit_warps": 8.0,
        "occupancy_limit_blocks": 32.0,
        "block_size": 100.0,
        "waves_per_sm": 2.5,
        "grid_x": 330.0,
        "grid_y": 1.0,
        "grid_z": 1.0,
        "grid_size": 330.0,
    }
    return [
        *repeat(3, kernel_short=EVIL, kernel_name=f"void {EVIL}(float *)", dur_ns=100_000.0, **metrics),
        *repeat(30, kernel_short="fake_tiny", dur_ns=2_000.0, grid_size=1.0, block_size=128.0, l2_hit_pct=40.0),
    ]


def test_kernel_name_with_script_tag_is_escaped_in_the_report():
    a = diagnose.analyze(fake_profile(fake_evil_launches()))
    ids = {f.id for f in a.findings}
    assert {
        "l2.low_hit_rate",
        "occupancy.gap",
        "launch_config.block_not_warp_multiple",
        "launch_config.tail_effect",
        "tiny_kernels.launch_bound",
        "speed_of_light.latency_bound",
    } <= ids
    html = render_html(a)
    assert EVIL not in html
    assert "alert(1)</script>" not in html
    assert html.count("<script") == html.count("</script>")  # no tag closed or opened by the kernel name
    assert "fake_k&lt;/script&gt;" in html  # shown, escaped, in the findings and tables
    assert external_resources(html) == []
    for div in ("fig-l2-heatmap", "fig-sol", "fig-occupancy", "fig-launch-config", "fig-tiny-kernels"):
        assert f'id="{div}"' in html, div
