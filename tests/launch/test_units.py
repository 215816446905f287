"""Tiny unit tests of the launch pieces: env config, names, JSONL, manifest reading, frame filtering."""

from __future__ import annotations

import json
import math
import sys
import warnings

import pytest

from diagnose.launch import child_config, run_dir
from diagnose.launch.event_log import JsonlAppender
from diagnose.launch.runtime import sync_capture
from parsers import run_folder
from parsers.errors import InputError
from parsers.run_folder import read_manifest


def test_child_config_round_trips_through_the_environment(tmp_path):
    config = child_config.ChildConfig(
        run_dir=str(tmp_path),
        trace_start=7,
        trace_steps=2,
        snapshot_at="12",
        history_max_entries=5,
        memory_stats_interval_ms=0.5,
        gpu_time_every=4,
        sync_debug=False,
    )
    assert child_config.from_env(config.to_env()) == config
    assert config.trace_stop == 9 and config.snapshot_step == 12
    assert child_config.ChildConfig(run_dir="x", trace_start=10, trace_steps=3).snapshot_step == 12
    assert child_config.ChildConfig(run_dir="x", snapshot_at="exit").snapshot_step is None
    # no trace window: the history still stops where the default window would have ended, not at exit (issue 17)
    assert child_config.ChildConfig(run_dir="x", trace_start=10, trace_steps=0).snapshot_step == 12
    assert child_config.from_env({}) is None
    assert child_config.from_env({**config.to_env(), "GPUDIAG_DISABLE": "1"}) is None
    bad = child_config.from_env({**config.to_env(), "GPUDIAG_TRACE_START": "soon", "GPUDIAG_MODE": "odd"})
    assert bad.trace_start == 10 and bad.mode == "light"  # bad values fall back to defaults, never raise
    assert child_config.from_env({**config.to_env(), "GPUDIAG_GPU_TIME_EVERY": "-3"}).gpu_time_every == 0


US, MS = 1_000, 1_000_000


@pytest.mark.parametrize(
    "event_ns, step_ns, current, every",
    [
        (2 * US, 2.2 * MS, 1, 1),  # 2 µs per event, 0.09 % of a 2.2 ms step: every step
        (5 * US, 2.2 * MS, 1, 3),  # 5 µs, 0.23 %: over the 0.2 % budget, 2 events per 3 steps ≈ 0.15 %
        (45 * US, 100 * MS, 1, 1),  # the H200's 45 µs against a 100 ms step: 0.045 %
        (45 * US, 2.2 * MS, 1, 21),  # the H200's 45 µs against its MLP's 2.2 ms step: 2 events per 21 steps ≈ 0.19 %
        (45 * US, 2.2 * MS, 20, 20),  # within a factor 1.5 of the current choice: kept
        (45 * US, 2.2 * MS, 40, 21),  # outside it: changed
        (45 * US, 1.1 * MS, 21, 41),
        (58 * US, 9.4 * MS, 1, 7),  # char_gpt on the H100 (58 µs an event, 9.4 ms steps): 3 at the 0.5 % of before
        (45 * US, 10 * US, 1, 256),  # capped
    ],
)
def test_gpu_time_is_sampled_only_when_the_events_cost_more_than_the_budget(event_ns, step_ns, current, every):
    from diagnose.launch.runtime import gpu_time

    assert gpu_time.GPU_TIME_BUDGET_PCT == 0.2
    chosen = gpu_time.gpu_time_every([event_ns] * 4, [step_ns] * 10, current)
    assert chosen == every
    if every > 1 and chosen != current:  # the events of one timed step in k stay within the budget
        assert 2 * event_ns / every <= 0.002 * step_ns or every == gpu_time.GPU_TIME_MAX_EVERY


def test_gpu_time_sampling_waits_for_enough_steps_and_reads_medians():
    from diagnose.launch.runtime import gpu_time

    assert gpu_time.gpu_time_every([], [2 * MS] * 10, 1) is None
    assert gpu_time.gpu_time_every([45 * US], [2 * MS] * 5, 1) is None
    # one slow step (a checkpoint) and one slow event do not move the median
    steps = [2.2 * MS] * 9 + [900 * MS]
    assert gpu_time.gpu_time_every([45 * US] * 5 + [9000 * US], steps, 1) == 21


def test_rank_comes_from_the_launcher_env():
    assert child_config.rank_from_env({"RANK": "3"}) == 3
    assert child_config.rank_from_env({"OMPI_COMM_WORLD_RANK": "5"}) == 5
    assert child_config.rank_from_env({}) is None
    assert child_config.world_size_from_env({"WORLD_SIZE": "8"}) == 8


@pytest.mark.parametrize(
    "command, name",
    [
        (["python", "train.py", "--lr", "3"], "train"),
        (["python3", "-m", "mypkg.train"], "mypkg.train"),
        (["torchrun", "--nproc-per-node", "2", "scripts/pretrain.py"], "pretrain"),
        (["/usr/bin/python3.12", "-u", "a/b/c.py"], "c"),
        (["./run_training.sh", "--fast"], "run_training.sh"),
    ],
)
def test_run_folder_name_from_the_command(command, name):
    assert run_dir.script_name(command) == name


def test_new_run_folder_refuses_a_non_empty_out(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("1")
    with pytest.raises(InputError, match="not empty"):
        run_dir.new_run_folder(["python", "t.py"], tmp_path / "taken")
    a = run_dir.new_run_folder(["python", "t.py"], parent=str(tmp_path / "runs"))
    b = run_dir.new_run_folder(["python", "t.py"], parent=str(tmp_path / "runs"))
    assert a != b and a.name.endswith("-t") and b.name.startswith(a.name)


def test_jsonl_appender_writes_whole_lines_and_refuses_a_second_writer(tmp_path):
    path = tmp_path / "events" / "rank0.jsonl"
    log = JsonlAppender(str(path))
    log.append({"kind": "step", "host_ms": float("nan"), "step": 1})
    assert path.read_text() == '{"kind":"step","host_ms":null,"step":1}\n'  # flushed at once, NaN as null
    with pytest.raises(FileExistsError):
        JsonlAppender(str(path)).append({"kind": "step"})
    log.close()


@pytest.mark.parametrize(
    "host_ms, gpu_ms, source, instrumented, overhead_us",
    [
        (1.764512, 1.760001, "optimizer", False, 21.437),
        (1.7645124999, 1.7600006, "optimizer", False, 21.4374999),  # rounded to the ns and the ns/1000
        (0.000001, None, "marker", True, 0.0),
        (12345.678901, 1e-06, "optimizer", False, 1234567.891),
        (2.0, 3.0, "marker", False, 7.0),
        (3.5, float("nan"), "marker", False, float("inf")),  # not finite: null, as append writes it
        (2.0, 1.0, 'odd "source"\n', False, 5.0),  # not one of the two sources: through the encoder
    ],
)
def test_step_line_is_the_record_rounded_to_ns(host_ms, gpu_ms, source, instrumented, overhead_us):
    """One JSON line that parses to the step record with ms to 6 decimals and µs to 3 (what the run folder's
    contract says), whichever way it was formatted."""
    from parsers.run_records import _clean, step_line

    def rounded(value, digits):
        return round(value, digits) if value is not None and math.isfinite(value) else value

    record = {
        "kind": "step",
        "rank": 3,
        "step": 12345,
        "t_start_ns": 1796239003581976984,
        "host_ms": rounded(host_ms, 6),
        "gpu_ms": rounded(gpu_ms, 6),
        "source": source,
        "instrumented": instrumented,
        "overhead_us": rounded(overhead_us, 3),
    }
    line = step_line(3, 12345, 1796239003581976984, host_ms, gpu_ms, source, instrumented, overhead_us)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    assert json.loads(line) == _clean(record)
    assert list(json.loads(line)) == list(record)  # the fields in the contract's order


def test_expected_artifacts_cover_every_rank_of_the_world():
    recs = [
        {"kind": "run", "event": "start", "rank": 1, "world_size": 3},
        {"kind": "run", "event": "expect", "rank": 1, "artifact": "trace/rank1.json.gz"},
    ]
    assert run_folder.expected_artifacts(recs, ["nvml.csv"]) == [
        "events/rank0.jsonl",
        "events/rank1.jsonl",
        "events/rank2.jsonl",
        "nvml.csv",
        "trace/rank1.json.gz",
    ]


@pytest.mark.parametrize(
    "content, words",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"schema": "gpudiag.findings/1"}', "expected schema gpudiag.run/1"),
        (b'{"schema": "gpudiag.run/2"}', "not supported"),
        (b'{"schema": "gpudiag.run/1", "missing": "trace"}', "'missing' should be a list"),
        (b'{"schema": "gpudiag.run/1", "exit_code": "0"}', "exit_code"),
        (b"\xff\xfe\x00", "not UTF-8"),
    ],
)
def test_read_manifest_rejects_bad_input_hand_made(tmp_path, content, words):
    path = tmp_path / "manifest.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match=words) as e:
        read_manifest(path)
    assert e.value.path == str(path)


def test_read_manifest_fills_the_optional_lists(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"schema": "gpudiag.run/1", "exit_code": 0}))
    m = read_manifest(path)
    assert m["missing"] == [] and m["gpus"] == [] and m["artifacts"] == {} and m["ranks"] == []
    with pytest.raises(InputError, match="no manifest.json"):
        read_manifest(tmp_path / "nope" / "manifest.json")


def test_user_frames_skip_library_and_gpudiag_frames():
    assert sync_capture.is_user_file(__file__)
    assert not sync_capture.is_user_file(json.__file__)
    assert not sync_capture.is_user_file(sync_capture.__file__)
    assert not sync_capture.is_user_file("/x/lib/python3.11/site-packages/torch/_tensor.py")
    assert not sync_capture.is_user_file("<frozen runpy>")
    stack = sync_capture.user_stack(sys._getframe())
    assert stack[0][0] == __file__ and stack[0][2] == "test_user_frames_skip_library_and_gpudiag_frames"


def test_sync_capture_takes_only_sync_warnings_and_restores_the_filters_hand_made():
    filters_before = list(warnings.filters)
    show_before = warnings.showwarning
    capture = sync_capture.SyncWarningCapture(lambda: 7)
    assert capture.start(torch=None) is False  # no torch: capture only, no sync debug mode
    try:
        with warnings.catch_warnings(record=True) as other:
            warnings.simplefilter("default")
            warnings.filters.insert(0, capture._filter)
            warnings.showwarning = capture._showwarning
            for _ in range(3):
                warnings.warn("called a synchronizing CUDA operation", UserWarning)  # noqa: B028  the line recorded
            warnings.warn("something else", UserWarning)  # noqa: B028
    finally:
        capture.stop()
    assert [(step, stack[0][0], library) for _, step, stack, library in capture.captured] == [(7, __file__, None)] * 3
    assert [str(w.message) for w in other] == ["something else"]
    assert warnings.filters == filters_before and warnings.showwarning == show_before


def test_a_sync_a_library_makes_names_the_librarys_line_beside_the_users(tmp_path):
    """fake library: a module under a site-packages folder whose function syncs (the warning torch's sync debug
    mode gives), called from this file: the record keeps this file's line and names the library's line."""
    import importlib.util

    lib = tmp_path / "site-packages" / "fake_trainer_lib"
    lib.mkdir(parents=True)
    (lib / "trainer.py").write_text(
        "import warnings\n"
        "\n"
        "def training_step():\n"
        "    warnings.warn('called a synchronizing CUDA operation', UserWarning)\n"
    )
    spec = importlib.util.spec_from_file_location("fake_trainer_lib.trainer", lib / "trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capture = sync_capture.SyncWarningCapture(lambda: 3)
    capture.start(torch=None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.filters.insert(0, capture._filter)
            warnings.showwarning = capture._showwarning
            module.training_step()  # the user's line
    finally:
        capture.stop()
    ((_, step, stack, library),) = capture.captured
    assert step == 3 and stack[0][0] == __file__
    assert library == f"{lib / 'trainer.py'}:4"
    line = sync_capture.sync_record(0, step, stack, 1, library=library)
    assert json.loads(line)["library_location"] == f"{lib / 'trainer.py'}:4"
