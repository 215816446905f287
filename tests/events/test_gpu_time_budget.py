"""The GPU-time budget travels in the run records: the runtime writes it in its gpu-time-every records,
parsers.events keeps them (steps.attrs["gpu_time_choices"]), the steps analyzer and its report section read it.

Hand-made event logs (the shape the runtime writes, docs/run-folder.md)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import steps as steps_analyzer
from diagnose.thresholds import Thresholds
from parsers.errors import InputError
from parsers.events import GpuTimeChoice, read_event_tables
from reports.sections.steps import render
from tests.events.conftest import fake_profile

T0 = 1796239003581976984


def _log(rank: int = 0, choices=({"from_step": 9, "every": 9},), steps: int = 40, every: int = 9) -> str:
    """An events log of ``steps`` steps with a GPU time on every ``every``-th, and the runtime's run records."""
    lines = [
        {
            "kind": "run",
            "event": "start",
            "rank": rank,
            "world_size": None,
            "pid": 1,
            "framework": "torch",
            "mode": "light",
            "cuda": True,
            "versions": {},
            "t_ns": T0,
        }
    ]
    for choice in choices:
        lines.append(
            {
                "kind": "run",
                "event": "gpu-time-every",
                "rank": rank,
                "event_us": 45.123,
                "step_host_ms": 2.2,
                "budget_pct": 0.5,
                "t_ns": T0 + 1,
                **choice,
            }
        )
    for step in range(steps):
        lines.append(
            {
                "kind": "step",
                "rank": rank,
                "step": step,
                "t_start_ns": T0 + step * 3_000_000,
                "host_ms": 3.0,
                "gpu_ms": 1.0 if step % every == 0 else None,
                "source": "optimizer",
                "instrumented": False,
                "overhead_us": 7.5,
            }
        )
    lines.append(
        {"kind": "run", "event": "end", "rank": rank, "reason": "exit", "steps": steps, "written": [], "t_ns": T0 + 2}
    )
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_the_reader_keeps_the_gpu_time_choices_typed_and_sorted(tmp_file):
    path = tmp_file("rank0.jsonl", _log(choices=({"from_step": 73, "every": 14}, {"from_step": 9, "every": 9})))
    steps = read_event_tables(path).steps
    assert steps.attrs["gpu_time_choices"] == (
        GpuTimeChoice(0, 9, 9, 45.123, 2.2, 0.5, float(T0 + 1)),
        GpuTimeChoice(0, 73, 14, 45.123, 2.2, 0.5, float(T0 + 1)),
    )
    assert len(steps) == 40  # the other run records are still skipped


def test_without_a_choice_the_choices_are_empty(tmp_file):
    assert read_event_tables(tmp_file("rank0.jsonl", _log(choices=()))).steps.attrs["gpu_time_choices"] == ()
    assert (
        read_event_tables(tmp_file("fake_steps.csv", "name,step,elapsed_ms\nstep,0,30.5\n")).steps.attrs[
            "gpu_time_choices"
        ]
        == ()
    )


def test_an_absent_budget_is_nan_and_a_bad_choice_is_an_error_naming_its_line(tmp_file):
    text = _log().replace('"budget_pct": 0.5, ', "")
    (choice,) = read_event_tables(tmp_file("rank0.jsonl", text)).steps.attrs["gpu_time_choices"]
    assert math.isnan(choice.budget_pct) and choice.every == 9
    with pytest.raises(InputError, match="line 2: every should be a whole number ≥ 1"):
        read_event_tables(tmp_file("bad.jsonl", _log(choices=({"from_step": 9, "every": 0},))))
    with pytest.raises(InputError, match="line 2: budget_pct should be a number"):
        read_event_tables(tmp_file("bad2.jsonl", _log().replace('"budget_pct": 0.5', '"budget_pct": "half"')))


def test_the_analyzer_takes_the_budget_from_the_records_and_the_report_says_it_as_before(tmp_file):
    steps = read_event_tables(tmp_file("rank0.jsonl", _log())).steps
    result = run_analyzer(steps_analyzer, fake_profile(step_events={0: steps}), Thresholds())
    assert result.meta["gpu_time_every"] == 9 and result.meta["gpu_time_budget_pct"] == 0.5
    assert (
        " GPU time was measured on one step in 9 (4 of 37 measured steps): light mode times a sample when a "
        "CUDA event costs more than 0.5 % of a step (or when --gpu-time-every asks); "
        "`gpudiag profile --gpu-time-every 1` times every step."
    ) in render(result)


def test_without_a_record_there_is_no_budget_and_the_report_still_renders(tmp_file):
    """A fixed --gpu-time-every 9 writes no choice: nothing to say about a budget, the sampling still said."""
    steps = read_event_tables(tmp_file("rank0.jsonl", _log(choices=()))).steps
    result = run_analyzer(steps_analyzer, fake_profile(step_events={0: steps}), Thresholds())
    assert result.meta["gpu_time_every"] == 9 and result.meta["gpu_time_budget_pct"] is None
    html = render(result)
    assert "GPU time was measured on one step in 9 (4 of 37 measured steps)" in html
    assert "None" not in html and "% of a step (or when" not in html


def test_ranks_with_different_choices_still_concatenate_and_give_one_budget(tmp_file):
    frames = {
        rank: read_event_tables(tmp_file(f"rank{rank}.jsonl", _log(rank=rank, choices=choices))).steps
        for rank, choices in ((0, ({"from_step": 9, "every": 9},)), (1, ()))
    }
    assert len(pd.concat(list(frames.values()), ignore_index=True)) == 80  # attrs of plain values: pandas compares them
    result = run_analyzer(steps_analyzer, fake_profile(step_events=frames), Thresholds())
    assert result.meta["gpu_time_budget_pct"] == 0.5 and result.summary["step_count"] == 74
