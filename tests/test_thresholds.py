"""Thresholds: overrides, config files, and the generated docs staying current."""

import json

import pytest

from diagnose.thresholds import Thresholds, load_config, parse_assignments
from parsers.errors import InputError
from tests.paths import REPO


def test_assignment_override_changes_only_that_value():
    th = Thresholds().with_overrides(parse_assignments(["l2.warning_pct=80", "sync.kernel_gap_us=2.5"]))
    assert th.l2.warning_pct == 80.0 and th.l2.critical_pct == 62.0
    assert th.sync.kernel_gap_us == 2.5
    assert Thresholds().l2.warning_pct == 85.0


@pytest.mark.parametrize("bad", ["l2.nope=1", "nogroup.x=1", "l2.warning_pct=abc", "l2warning", "l2.=3"])
def test_bad_assignments_raise_input_error(bad):
    with pytest.raises(InputError):
        Thresholds().with_overrides(parse_assignments([bad]))


def test_toml_and_json_configs(tmp_path):
    t = tmp_path / "a.toml"
    t.write_text("[occupancy]\ngap_pts = 5\n")
    j = tmp_path / "a.json"
    j.write_text(json.dumps({"thresholds": {"occupancy": {"gap_pts": 7}}}))
    assert Thresholds().with_overrides(load_config(t)).occupancy.gap_pts == 5
    assert Thresholds().with_overrides(load_config(j)).occupancy.gap_pts == 7


def test_docs_are_generated_from_the_code():
    from tools.gen_threshold_docs import render

    assert (REPO / "docs" / "thresholds.md").read_text() == render(), "run python tools/gen_threshold_docs.py"
