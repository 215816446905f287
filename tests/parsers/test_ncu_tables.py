"""The ncu readers of the registry give (kernels, rules), and Profile.add puts each in its table; the report's
per-instruction excess sectors become the kernels table's ``global_excess_sources``."""

from __future__ import annotations

import gzip
import json

import pytest

import diagnose
from parsers import ncu_csv, registry
from parsers.errors import InputError
from parsers.ncu_kernels import KERNELS_SCHEMA, RULES_SCHEMA
from parsers.ncu_rep import access_of
from parsers.reader import KERNELS
from tests.analyzers.ncu_isolated import (
    FIXTURE_REPORTS,
    in_fresh_process,
    read_report,
    read_with_broken_rules,
    report_path,
)
from tests.ncu_read import ncu_kernels
from tests.paths import REPO

KINDS = REPO / "fixtures" / "ncu" / "kernel_kinds"
RAW = KINDS / "raw.csv.gz"
DETAILS = KINDS / "details.csv.gz"


def test_raw_page_reads_as_kernels_and_an_empty_rules_table_parsing_once(monkeypatch):
    def no_second_parse(path):
        raise AssertionError("a raw page was parsed again for rules")

    monkeypatch.setattr(ncu_csv, "read_ncu_rules", no_second_parse)
    reader = registry.detect(RAW)
    assert reader.kind == "ncu-csv" and reader.table == KERNELS
    kernels, rules = reader.read(RAW)
    assert len(kernels) == 23 and list(kernels.columns[: len(KERNELS_SCHEMA.columns)]) == list(KERNELS_SCHEMA.columns)
    assert list(rules.columns) == list(RULES_SCHEMA.columns) and not len(rules)
    assert kernels["global_excess_sources"].isna().all()  # the CSV pages have no per-instruction counters


def test_details_page_gives_its_rules():
    kernels, rules = registry.detect(DETAILS).read(DETAILS)
    assert len(kernels) == 23 and len(rules) == 251
    assert list(rules.columns) == list(RULES_SCHEMA.columns)
    assert rules["rule"].value_counts()["SOLBottleneck"] == 23
    assert set(rules["kernel_short"]) == set(kernels["kernel_short"])


def test_rule_columns_are_found_after_ncus_log_lines(tmp_path):
    lines = gzip.decompress(DETAILS.read_bytes())
    stdout = tmp_path / "stdout.csv"
    stdout.write_bytes(b"==PROF== Connected to process 1\nhello from the script\n" + lines)
    assert ncu_csv.has_rule_columns(stdout)
    assert len(ncu_csv.read_ncu_csv_tables(stdout)[1]) == 251
    raw = tmp_path / "raw_stdout.csv"
    raw.write_bytes(b"==PROF== Connected to process 1\n" + gzip.decompress(RAW.read_bytes()))
    assert not ncu_csv.has_rule_columns(raw) and not ncu_csv.has_rule_columns(tmp_path / "missing.csv")


def test_bad_details_page_with_rule_columns_is_an_input_error(tmp_path):
    text = gzip.decompress(DETAILS.read_bytes()).decode()
    header, rest = text.split("\n", 1)
    bad = tmp_path / "bad_details.csv"
    bad.write_text(header.replace('"Rule Type"', '"Rule Kind"') + "\n" + rest)
    with pytest.raises(InputError) as e:
        ncu_csv.read_ncu_csv_tables(bad)
    assert str(bad) in str(e.value) and "Rule Type" in str(e.value)


def test_profile_add_takes_the_pair_and_a_bare_frame_and_merges_pages_of_one_report():
    p = diagnose.load(DETAILS)
    assert len(p.kernels) == 23 and len(p.ncu_rules) == 251
    kernels, rules = registry.detect(DETAILS).read(DETAILS)
    p.add(KERNELS, (kernels, rules), 0, "again.csv")  # the same page again: its launches and rules once
    assert len(p.kernels) == 23 and len(p.ncu_rules) == 251
    assert p.warnings[-1].startswith("again.csv: the same 23 launches as an ncu file read before")
    p.add(KERNELS, ncu_kernels(RAW), 0)  # a caller's own kernels frame of the same report: its columns merged in
    assert len(p.kernels) == 23 and len(p.ncu_rules) == 251
    assert "lts__t_sectors.sum [sector]" in p.kernels.columns  # a raw-page metric the details page lacks
    other = ncu_kernels(REPO / "fixtures" / "ncu" / "small_grid" / "raw.csv")  # another capture: appended
    p.add(KERNELS, other, 0)
    assert len(p.kernels) == 25
    assert not diagnose.load(RAW).has("ncu_rules")


def test_a_folder_of_one_reports_pages_counts_each_launch_once_with_the_raw_pages_exact_durations():
    p = diagnose.load(REPO / "fixtures" / "ncu" / "kernel_kinds")
    assert len(p.kernels) == 23  # details.csv.gz and raw.csv.gz: 23 launches each, the same ones
    naive = p.kernels[p.kernels["kernel_short"] == "naive_gemm"]
    # the raw page's durations (ns), not the details page's 3-digit "3.18 ms"
    assert sorted(naive["dur_ns"]) == [3180320.0, 3180992.0]
    assert any("raw.csv.gz: the same 23 launches" in w for w in p.warnings)
    console = next(w for w in p.warnings if "ncu_console.log" in w)
    assert (
        "ncu wrote its results to /root/out/kinds/report.ncu-rep" in console and "no kernel was profiled" not in console
    )


@pytest.mark.parametrize(
    "scenario, launches, rule_results",
    [("l2_random_gather", 3, 3), ("matmul_tiled", 3, 9), ("small_grid", 2, 6), ("tiny_kernels", 48, 144)],
)
def test_report_reads_kernels_and_rules_in_one_pass(scenario, launches, rule_results):
    """The rules themselves are checked against the details page of the same capture in test_ncu_fixtures.py."""
    pytest.importorskip("ncu_report")
    kernels, rules = in_fresh_process(read_report, str(FIXTURE_REPORTS[scenario]))
    assert len(kernels) == launches and len(rules) == rule_results
    assert list(kernels.columns[: len(KERNELS_SCHEMA.columns)]) == list(KERNELS_SCHEMA.columns)
    assert list(rules.columns) == list(RULES_SCHEMA.columns)
    assert set(rules["launch_id"]) == set(kernels["launch_id"])  # each launch's rules, and only those launches'
    assert kernels["global_excess_sources"].isna().all()  # captured without SourceCounters


def test_kinds_report_reads_its_per_instruction_excess_sectors():
    kernels, rules = in_fresh_process(read_report, report_path())
    assert len(kernels) == 23 and len(rules) == 251
    sources = kernels.set_index("launch_id")["global_excess_sources"]
    assert sources.notna().all()  # the capture has SourceCounters for every launch
    transpose = json.loads(sources[11.0])
    assert transpose["excess_by_access"] == {"store": 58_720_256.0}
    assert [(x["line"], x["access"]) for x in transpose["lines"]] == [(51, "store")]
    curand = json.loads(sources[0.0])  # cuRAND has no line info: SASS only, five instructions kept
    assert len(curand["lines"]) == 5 and all(x["file"] is None for x in curand["lines"])
    assert curand["excess_by_access"] == {"load": 1_250_304.0, "store": 1_250_304.0}


@pytest.mark.parametrize(
    "sass, access",
    [
        ("LDG.E R7, desc[UR4][R6.64]", "load"),
        ("@P0 LDG.E.128 R4, [R2.64]", "load"),
        ("LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]", "load"),
        ("@!PT ST.E [R2], R5", "store"),
        ("STG.E.64 desc[UR4][R2.64+0x8], R12", "store"),
        ("ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU PT, R3, [R2], R5", "atomic"),
        ("RED.E.ADD.F32.FTZ.RN.STRONG.GPU [R2.64], R5", "reduction"),
        ("IMAD R5, R5, UR4, R2", "other"),
        ("", "other"),
    ],
)
def test_access_of_sass(sass, access):
    assert access_of(sass) == access


def test_report_whose_rules_cannot_be_read_keeps_its_kernels():
    pytest.importorskip("ncu_report")
    path = str(FIXTURE_REPORTS["tiny_kernels"])
    kernels, rules, said = in_fresh_process(read_with_broken_rules, path)
    assert len(kernels) == 48 and not len(rules) and list(rules.columns) == list(RULES_SCHEMA.columns)
    assert said == [f"{path}: ncu_report could not give the rule results of 48 of 48 launches"]


def test_a_folder_of_two_captures_keeps_both_and_merges_each_ones_pages():
    """fixtures/shared/ncu: one capture (40 launches, process 483) as raw, raw-base and details pages, and a
    second run of the script (20 launches, process 1050, other metrics) with the same launch IDs and kernels."""
    p = diagnose.load(REPO / "fixtures" / "shared" / "ncu")
    assert len(p.kernels) == 60
    assert sorted(p.kernels["process_id"].value_counts().items()) == [(483.0, 40), (1050.0, 20)]
    assert sum("the same 40 launches" in w for w in p.warnings) == 2


def test_the_ncu_rep_and_its_csv_pages_are_one_capture_though_they_name_kernels_differently():
    """The .ncu-rep names kernels with namespaces and no process; its CSV pages without namespaces, with the
    process: the same launches all the same (fixtures/ncu/small_grid: 2 launches in 4 files)."""
    pytest.importorskip("ncu_report")
    p = in_fresh_process(_load_launch_count, str(REPO / "fixtures" / "ncu" / "small_grid"))
    assert p == (2, 3)


def _load_launch_count(path: str) -> tuple[int, int]:
    p = diagnose.load(path)
    return len(p.kernels), sum("the same 2 launches" in w for w in p.warnings)
